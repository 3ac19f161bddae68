//! How messages become bytes and back: prost messages, or raw `Bytes` for callers that bring their own
//! serialization. A codec is a table of plain functions, so call types need no codec type parameter.

use bytes::{Bytes, BytesMut};

use crate::wire::status::{Code, Status};

/// Encoding and decoding functions for one request and one response type.
pub(crate) struct Codec<Req, Resp> {
    pub(crate) encoded_len: fn(&Req) -> usize,
    pub(crate) encode: fn(&Req, &mut BytesMut),
    pub(crate) decode: fn(Bytes) -> Result<Resp, Status>,
}

impl<Req, Resp> Clone for Codec<Req, Resp> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<Req, Resp> Copy for Codec<Req, Resp> {}

impl<Req, Resp> Codec<Req, Resp> {
    /// The encoding half, for a call's sending side.
    pub(crate) fn encoder(self) -> Codec<Req, ()> {
        Codec {
            encoded_len: self.encoded_len,
            encode: self.encode,
            decode: |_| Ok(()),
        }
    }
}

impl<Req: prost::Message, Resp: prost::Message + Default> Codec<Req, Resp> {
    /// The protobuf codec.
    pub(crate) fn prost() -> Self {
        Codec {
            encoded_len: |m| m.encoded_len(),
            // `BytesMut` grows as needed, so encoding cannot run out of room: `encode_raw` skips
            // `encode`'s capacity check, which computes the message's length a second time.
            encode: |m, buf| m.encode_raw(buf),
            decode: decode_prost,
        }
    }
}

/// Decodes a protobuf response message; a malformed one is INTERNAL, naming prost's error (its source).
pub(crate) fn decode_prost<M: prost::Message + Default>(bytes: Bytes) -> Result<M, Status> {
    M::decode(bytes).map_err(|e| {
        Status::new(
            Code::Internal,
            format!("failed to decode the response message: {e}"),
        )
        .with_source(e)
    })
}

impl<Resp> Codec<Bytes, Resp> {
    /// Requests already serialized, responses decoded by `decode` (the generic path's type-erased
    /// decoder: a malformed response fails the call inside the channel, as with [`Codec::prost`]).
    pub(crate) fn raw_decoding(decode: fn(Bytes) -> Result<Resp, Status>) -> Self {
        Codec {
            encoded_len: Bytes::len,
            encode: |m, buf| buf.extend_from_slice(m),
            decode,
        }
    }
}

impl Codec<Bytes, Bytes> {
    /// The identity codec: messages are already bytes.
    pub(crate) fn raw() -> Self {
        Codec {
            encoded_len: Bytes::len,
            encode: |m, buf| buf.extend_from_slice(m),
            decode: Ok,
        }
    }
}
