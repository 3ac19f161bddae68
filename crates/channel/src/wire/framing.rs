//! gRPC's Length-Prefixed-Message framing (`doc/PROTOCOL-HTTP2.md`): a 1-byte compressed flag, a 4-byte
//! big-endian length, then the message. HTTP/2 DATA frame boundaries have nothing to do with message
//! boundaries, so the [`Deframer`] takes chunks as they arrive and hands out whole messages.
//!
//! Sending: `encode_frame` serializes a message with its prefix in one buffer, compressed or not, and
//! refuses one over the send limit.
//!
//! A message that lies within one received chunk is handed out as a slice of that chunk (no copy). Only a
//! message split across chunks is gathered into one buffer, once. A length over the receive limit is refused
//! as soon as its prefix is read, before any of it is buffered.

use std::collections::VecDeque;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::wire::codec::Codec;
use crate::wire::compression::Encoding;
use crate::wire::limits::Limit;
use crate::wire::status::Status;

/// Bytes in the length prefix.
pub const HEADER_LEN: usize = 5;

/// One received message, still compressed if `compressed` is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Whether the compressed flag was 1.
    pub compressed: bool,
    /// The message bytes, as sent.
    pub payload: Bytes,
}

/// Why the received bytes are not a valid message stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The compressed flag was neither 0 nor 1.
    #[error("invalid compressed flag {0} in message prefix")]
    InvalidFlag(u8),
    /// The declared length is over the receive limit.
    #[error("received message larger than max ({len} vs. {limit})")]
    TooLarge {
        /// The declared length.
        len: usize,
        /// The limit.
        limit: usize,
        /// Whether the message's compressed flag was set (the length is the compressed size).
        compressed: bool,
    },
    /// The stream ended inside a message.
    #[error("stream ended in the middle of a message ({buffered} of {expected} bytes received)")]
    Truncated {
        /// The bytes received of the current message, prefix included.
        buffered: usize,
        /// The bytes the message needed, prefix included (5 while the prefix itself is incomplete).
        expected: usize,
    },
}

/// Writes the prefix for a message of `len` bytes.
pub fn put_header(buf: &mut BytesMut, compressed: bool, len: u32) {
    buf.put_u8(u8::from(compressed));
    buf.put_u32(len);
}

/// Encodes one message into a Length-Prefixed-Message, compressed with `encoding` if given.
pub(crate) fn encode_frame<T>(
    codec: &Codec<T, impl Sized>,
    msg: &T,
    encoding: Option<Encoding>,
    limit: Limit,
) -> Result<Bytes, Status> {
    let mut buf = BytesMut::new();
    write_frame(codec, msg, encoding, limit, &mut buf)?;
    Ok(buf.freeze())
}

/// [`encode_frame`] into `arena`: the frame is split off the arena's front, so consecutive frames share
/// the arena's allocation (a new one only when the free room is used up, of the arena's original capacity
/// or the frame's size if larger) instead of one allocation per message. For a stream of messages; what
/// follows the frame in `arena` is unchanged, an error leaves it as it was.
pub(crate) fn encode_frame_into<T>(
    codec: &Codec<T, impl Sized>,
    msg: &T,
    encoding: Option<Encoding>,
    limit: Limit,
    arena: &mut BytesMut,
) -> Result<Bytes, Status> {
    write_frame(codec, msg, encoding, limit, arena)?;
    Ok(arena.split().freeze())
}

/// Writes one frame into the empty `buf`; on an error `buf` is left empty.
fn write_frame<T>(
    codec: &Codec<T, impl Sized>,
    msg: &T,
    encoding: Option<Encoding>,
    limit: Limit,
    arena: &mut BytesMut,
) -> Result<(), Status> {
    let len = (codec.encoded_len)(msg);
    let too_large = |len: usize| limit.exceeded(len, encoding.is_some());
    let limit = limit.bytes;
    debug_assert!(arena.is_empty(), "the arena holds no partial frame");
    arena.clear();
    match encoding {
        None => {
            if len > limit {
                return Err(too_large(len));
            }
            arena.reserve(HEADER_LEN + len);
            arena.extend_from_slice(&[0; HEADER_LEN]);
            (codec.encode)(msg, arena);
        }
        Some(enc) => {
            let mut plain = BytesMut::with_capacity(len);
            (codec.encode)(msg, &mut plain);
            arena.reserve(HEADER_LEN + len / 2 + 64);
            arena.extend_from_slice(&[0; HEADER_LEN]);
            if let Err(status) = enc.compress(&plain, arena) {
                arena.clear();
                return Err(status);
            }
        }
    }
    let payload_len = arena.len() - HEADER_LEN;
    if payload_len > limit {
        arena.clear();
        return Err(too_large(payload_len));
    }
    let Ok(wire_len) = u32::try_from(payload_len) else {
        arena.clear();
        return Err(too_large(payload_len));
    };
    // The prefix goes into the space left for it: no second buffer per message.
    arena[0] = u8::from(encoding.is_some());
    arena[1..HEADER_LEN].copy_from_slice(&wire_len.to_be_bytes());
    Ok(())
}

/// Turns received chunks into messages.
#[derive(Debug)]
pub struct Deframer {
    chunks: VecDeque<Bytes>,
    buffered: usize,
    limit: usize,
    /// The parsed prefix of the message being received.
    pending: Option<(bool, usize)>,
}

impl Deframer {
    /// A deframer that refuses messages longer than `limit` bytes.
    pub fn new(limit: usize) -> Deframer {
        Deframer {
            chunks: VecDeque::new(),
            buffered: 0,
            limit,
            pending: None,
        }
    }

    /// Adds a received chunk.
    pub fn push(&mut self, chunk: Bytes) {
        if !chunk.is_empty() {
            self.buffered += chunk.len();
            self.chunks.push_back(chunk);
        }
    }

    /// Bytes received and not yet handed out.
    pub fn buffered(&self) -> usize {
        self.buffered
    }

    /// The next whole message, if one has arrived.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        let (compressed, len) = match self.pending {
            Some(p) => p,
            None => {
                if self.buffered < HEADER_LEN {
                    return Ok(None);
                }
                let mut header = [0u8; HEADER_LEN];
                self.copy_out(&mut header);
                let compressed = match header[0] {
                    0 => false,
                    1 => true,
                    other => return Err(FrameError::InvalidFlag(other)),
                };
                let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
                if len > self.limit {
                    return Err(FrameError::TooLarge {
                        len,
                        limit: self.limit,
                        compressed,
                    });
                }
                self.pending = Some((compressed, len));
                (compressed, len)
            }
        };
        if self.buffered < len {
            return Ok(None);
        }
        self.pending = None;
        Ok(Some(Frame {
            compressed,
            payload: self.take(len),
        }))
    }

    /// Checks that the stream did not end inside a message.
    pub fn finish(&self) -> Result<(), FrameError> {
        match self.pending {
            Some((_, len)) => Err(FrameError::Truncated {
                buffered: HEADER_LEN + self.buffered,
                expected: HEADER_LEN + len,
            }),
            None if self.buffered > 0 => Err(FrameError::Truncated {
                buffered: self.buffered,
                expected: HEADER_LEN,
            }),
            None => Ok(()),
        }
    }

    /// Removes `out.len()` bytes (known to be buffered) into `out`.
    fn copy_out(&mut self, out: &mut [u8]) {
        let mut filled = 0;
        while filled < out.len() {
            let Some(front) = self.chunks.front_mut() else {
                break;
            };
            let n = front.len().min(out.len() - filled);
            out[filled..filled + n].copy_from_slice(&front[..n]);
            front.advance(n);
            filled += n;
            if front.is_empty() {
                self.chunks.pop_front();
            }
        }
        self.buffered -= filled;
    }

    /// Removes `len` bytes (known to be buffered) as one `Bytes`, without copying when they are in one chunk.
    fn take(&mut self, len: usize) -> Bytes {
        if len == 0 {
            return Bytes::new();
        }
        self.buffered -= len;
        if let Some(front) = self.chunks.front_mut() {
            if front.len() >= len {
                let out = front.split_to(len);
                if front.is_empty() {
                    self.chunks.pop_front();
                }
                return out;
            }
        }
        let mut out = BytesMut::with_capacity(len);
        while out.len() < len {
            let Some(front) = self.chunks.front_mut() else {
                break;
            };
            let n = front.len().min(len - out.len());
            out.extend_from_slice(&front[..n]);
            front.advance(n);
            if front.is_empty() {
                self.chunks.pop_front();
            }
        }
        out.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_frame_applies_limits_and_compression() {
        let codec = Codec::<Bytes, Bytes>::raw();
        let msg = Bytes::from(vec![0u8; 1000]);
        let limit = |n| Limit::call(crate::wire::limits::Direction::Send, n);
        let plain = encode_frame(&codec, &msg, None, limit(1000)).expect("at the limit");
        assert_eq!(&plain[..5], &[0, 0, 0, 3, 232]);
        let err = encode_frame(&codec, &msg, None, limit(999)).expect_err("over");
        assert_eq!(err.code(), crate::Code::ResourceExhausted);
        assert!(
            err.message().starts_with(
                "request message larger than the limit (1000 vs. 999 bytes: the call's"
            ),
            "{err:?}"
        );
        let gz =
            encode_frame(&codec, &msg, Some(Encoding::Gzip), limit(999)).expect("compressed fits");
        assert_eq!(gz[0], 1);
        let len = u32::from_be_bytes([gz[1], gz[2], gz[3], gz[4]]) as usize;
        assert_eq!(len, gz.len() - 5);
        assert!(len < 100);
    }

    fn framed(compressed: bool, payload: &[u8]) -> Bytes {
        let mut b = BytesMut::new();
        put_header(&mut b, compressed, payload.len() as u32);
        b.extend_from_slice(payload);
        b.freeze()
    }

    #[test]
    fn message_split_across_chunks_at_every_offset() {
        let wire = framed(false, b"hello world");
        for cut in 0..=wire.len() {
            let mut d = Deframer::new(100);
            d.push(wire.slice(..cut));
            if cut < wire.len() {
                assert_eq!(d.next_frame(), Ok(None), "cut {cut}");
                assert_eq!(d.finish().is_err(), cut > 0, "cut {cut}");
            }
            d.push(wire.slice(cut..));
            let f = d.next_frame().expect("valid").expect("whole");
            assert_eq!(&f.payload[..], b"hello world");
            assert!(!f.compressed);
            assert_eq!(d.finish(), Ok(()));
        }
    }

    #[test]
    fn one_byte_at_a_time() {
        let wire = framed(true, &[9u8; 300]);
        let mut d = Deframer::new(1000);
        let mut got = None;
        for i in 0..wire.len() {
            d.push(wire.slice(i..i + 1));
            if let Some(f) = d.next_frame().expect("valid") {
                got = Some(f);
            }
        }
        let f = got.expect("message");
        assert!(f.compressed);
        assert_eq!(f.payload.len(), 300);
    }

    #[test]
    fn several_messages_packed_in_one_chunk_are_not_copied() {
        let mut wire = BytesMut::new();
        wire.extend_from_slice(&framed(false, b"one"));
        wire.extend_from_slice(&framed(false, b""));
        wire.extend_from_slice(&framed(true, b"three"));
        let wire = wire.freeze();
        let base = wire.as_ptr() as usize;
        let mut d = Deframer::new(100);
        d.push(wire.clone());
        let a = d.next_frame().expect("ok").expect("one");
        assert_eq!(&a.payload[..], b"one");
        assert_eq!(a.payload.as_ptr() as usize, base + 5, "sliced, not copied");
        let b = d.next_frame().expect("ok").expect("empty");
        assert!(b.payload.is_empty());
        let c = d.next_frame().expect("ok").expect("three");
        assert_eq!((&c.payload[..], c.compressed), (&b"three"[..], true));
        assert_eq!(d.next_frame(), Ok(None));
        assert_eq!(d.finish(), Ok(()));
    }

    #[test]
    fn truncated_stream_is_reported() {
        let wire = framed(false, b"abcdef");
        let mut d = Deframer::new(100);
        d.push(wire.slice(..8));
        assert_eq!(d.next_frame(), Ok(None));
        assert_eq!(
            d.finish(),
            Err(FrameError::Truncated {
                buffered: 8,
                expected: 11
            })
        );
        let mut d = Deframer::new(100);
        d.push(wire.slice(..3));
        assert_eq!(d.next_frame(), Ok(None));
        assert_eq!(
            d.finish(),
            Err(FrameError::Truncated {
                buffered: 3,
                expected: 5
            })
        );
    }

    #[test]
    fn oversize_is_refused_from_the_prefix_alone() {
        let mut d = Deframer::new(10);
        let mut b = BytesMut::new();
        put_header(&mut b, false, 11);
        d.push(b.freeze());
        assert_eq!(
            d.next_frame(),
            Err(FrameError::TooLarge {
                len: 11,
                limit: 10,
                compressed: false
            })
        );
        let mut d = Deframer::new(10);
        d.push(framed(false, &[0; 10]));
        assert_eq!(
            d.next_frame()
                .expect("at the limit")
                .map(|f| f.payload.len()),
            Some(10)
        );
    }

    #[test]
    fn bad_flag_is_refused() {
        let mut d = Deframer::new(10);
        d.push(Bytes::from_static(&[2, 0, 0, 0, 0]));
        assert_eq!(d.next_frame(), Err(FrameError::InvalidFlag(2)));
    }
}
