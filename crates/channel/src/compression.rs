//! Per-message compression (`doc/compression.md`): identity and gzip. Each message is compressed on its own;
//! the call's `grpc-encoding` header names the algorithm and each message's flag says whether it was applied.
//!
//! Decompression is bounded by the receive limit, so a small compressed message cannot expand into an
//! unbounded allocation ("zip bomb"): going over the limit is `RESOURCE_EXHAUSTED`, like any oversize message.

use std::io::{Read, Write};

use bytes::{BufMut, Bytes, BytesMut};
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;

use crate::status::{Code, Status};

/// A message encoding this crate can send and receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// No compression.
    Identity,
    /// gzip (RFC 1952).
    Gzip,
}

/// What a `grpc-encoding` header said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReceivedEncoding {
    /// Absent or `identity`: a compressed message is a protocol violation (INTERNAL).
    Identity,
    /// An encoding we can decode.
    Known(Encoding),
    /// An encoding we do not support: a compressed message is UNIMPLEMENTED.
    Unsupported(String),
}

impl ReceivedEncoding {
    pub(crate) fn from_header(value: Option<&http::HeaderValue>) -> ReceivedEncoding {
        match value.map(|v| v.as_bytes()) {
            None | Some(b"identity") => ReceivedEncoding::Identity,
            Some(b"gzip") => ReceivedEncoding::Known(Encoding::Gzip),
            Some(other) => {
                ReceivedEncoding::Unsupported(String::from_utf8_lossy(other).into_owned())
            }
        }
    }
}

impl Encoding {
    /// The name used in `grpc-encoding` and `grpc-accept-encoding`.
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Identity => "identity",
            Encoding::Gzip => "gzip",
        }
    }

    /// Compresses `data`, appending the result to `out`.
    pub fn compress(self, data: &[u8], out: &mut BytesMut) -> Result<(), Status> {
        match self {
            Encoding::Identity => {
                out.extend_from_slice(data);
                Ok(())
            }
            Encoding::Gzip => {
                let mut enc = GzEncoder::new(out.writer(), flate2::Compression::fast());
                enc.write_all(data)
                    .and_then(|_| enc.finish().map(drop))
                    .map_err(|e| {
                        Status::new(Code::Internal, format!("gzip compression failed: {e}"))
                            .with_source(e)
                    })
            }
        }
    }

    /// Decompresses one message, refusing to produce more than `limit` bytes.
    pub fn decompress(self, data: Bytes, limit: usize) -> Result<Bytes, Status> {
        match self {
            Encoding::Identity => Ok(data),
            Encoding::Gzip => {
                let mut out =
                    Vec::with_capacity(data.len().saturating_mul(2).min(limit.saturating_add(1)));
                let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
                GzDecoder::new(&data[..])
                    .take(cap)
                    .read_to_end(&mut out)
                    .map_err(|e| {
                        Status::new(
                            Code::Internal,
                            format!("failed to decompress a gzip message: {e}"),
                        )
                        .with_source(e)
                    })?;
                if out.len() > limit {
                    return Err(Status::new(
                        Code::ResourceExhausted,
                        format!("decompressed message larger than the limit ({limit} bytes)"),
                    ));
                }
                Ok(Bytes::from(out))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_round_trips() {
        let data = vec![7u8; 100_000];
        let mut out = BytesMut::new();
        Encoding::Gzip.compress(&data, &mut out).expect("compress");
        assert!(out.len() < 1_000);
        let back = Encoding::Gzip
            .decompress(out.freeze(), 1 << 20)
            .expect("decompress");
        assert_eq!(&back[..], &data[..]);
    }

    #[test]
    fn decompression_is_bounded() {
        let data = vec![0u8; 1 << 20];
        let mut out = BytesMut::new();
        Encoding::Gzip.compress(&data, &mut out).expect("compress");
        let err = Encoding::Gzip
            .decompress(out.freeze(), 1000)
            .expect_err("over the limit");
        assert_eq!(err.code(), Code::ResourceExhausted);
    }

    #[test]
    fn garbage_is_internal() {
        let err = Encoding::Gzip
            .decompress(Bytes::from_static(b"not gzip at all"), 1000)
            .expect_err("garbage");
        assert_eq!(err.code(), Code::Internal);
    }
}
