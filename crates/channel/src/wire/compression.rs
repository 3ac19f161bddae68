//! Per-message compression (`doc/compression.md`): identity, `gzip` (RFC 1952), `deflate` (the zlib format,
//! RFC 1950, as gRPC's `deflate` is) and `zstd` (RFC 8878; not in the gRPC spec: tonic's extension, which
//! C-core and grpc-java servers do not implement). Each message is compressed on its own; the call's
//! `grpc-encoding` header names the algorithm and each message's flag says whether it was applied.
//!
//! [`EncodingSet`] is a set of compressed encodings, such as what a call advertises in
//! `grpc-accept-encoding` (identity is always accepted and never listed).
//!
//! Decompression is bounded by the receive limit, so a small compressed message cannot expand into an
//! unbounded allocation ("zip bomb"): decoding stops one byte past the limit, and going over it is
//! `RESOURCE_EXHAUSTED`, like any oversize message. Data that does not decode is `INTERNAL`.

use std::io::{Read, Write};

use bytes::{BufMut, Bytes, BytesMut};
use flate2::bufread::{MultiGzDecoder, ZlibDecoder};
use flate2::write::{GzEncoder, ZlibEncoder};
use http::HeaderValue;

use crate::wire::status::{Code, Status};

/// A message encoding this crate can send and receive.
///
/// `Gzip` and `Deflate` are in the gRPC spec and every gRPC stack decodes them (grpc-java only gzip by
/// default); `Zstd` is tonic's extension: a C-core (grpcio) or grpc-java server answers a request compressed
/// with it UNIMPLEMENTED.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Encoding {
    /// No compression.
    Identity,
    /// gzip (RFC 1952).
    Gzip,
    /// gRPC's `deflate`: the zlib format (RFC 1950), a zlib header and checksum around a DEFLATE stream.
    Deflate,
    /// Zstandard (RFC 8878), as tonic's `zstd`.
    Zstd,
}

/// The zstd level messages are compressed at: the fastest, as gzip and deflate use flate2's `fast()`.
const ZSTD_LEVEL: i32 = 1;

/// What a `grpc-encoding` header said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReceivedEncoding {
    /// Absent or `identity`: a compressed message is a protocol violation (INTERNAL).
    Identity,
    /// An encoding we can decode (whether the call advertised it is checked on the first compressed
    /// message).
    Known(Encoding),
    /// An encoding we do not support: a compressed message is INTERNAL.
    Unsupported(String),
}

impl ReceivedEncoding {
    pub(crate) fn from_header(value: Option<&HeaderValue>) -> ReceivedEncoding {
        match value.map(|v| v.as_bytes()) {
            None => ReceivedEncoding::Identity,
            Some(name) => match Encoding::from_name(name) {
                Some(Encoding::Identity) => ReceivedEncoding::Identity,
                Some(known) => ReceivedEncoding::Known(known),
                None => ReceivedEncoding::Unsupported(String::from_utf8_lossy(name).into_owned()),
            },
        }
    }
}

/// Why a bounded decompression failed.
#[derive(Debug)]
pub(crate) enum DecompressError {
    /// The message decompresses to more than the limit.
    TooLarge,
    /// The data is not a valid message in the encoding (INTERNAL).
    Corrupt(Status),
}

impl Encoding {
    /// The name used in `grpc-encoding` and `grpc-accept-encoding`.
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Identity => "identity",
            Encoding::Gzip => "gzip",
            Encoding::Deflate => "deflate",
            Encoding::Zstd => "zstd",
        }
    }

    /// The encoding a `grpc-encoding` value names (exactly, as the spec's names are lower case), if this
    /// crate implements it.
    pub fn from_name(name: &[u8]) -> Option<Encoding> {
        match name {
            b"identity" => Some(Encoding::Identity),
            b"gzip" => Some(Encoding::Gzip),
            b"deflate" => Some(Encoding::Deflate),
            b"zstd" => Some(Encoding::Zstd),
            _ => None,
        }
    }

    /// Compresses `data`, appending the result to `out`.
    pub fn compress(self, data: &[u8], out: &mut BytesMut) -> Result<(), Status> {
        let failed = |e: std::io::Error| {
            Status::new(
                Code::Internal,
                format!("{} compression failed: {e}", self.as_str()),
            )
            .with_source(e)
        };
        match self {
            Encoding::Identity => {
                out.extend_from_slice(data);
                Ok(())
            }
            Encoding::Gzip => {
                let mut enc = GzEncoder::new(out.writer(), flate2::Compression::fast());
                enc.write_all(data)
                    .and_then(|_| enc.finish().map(drop))
                    .map_err(failed)
            }
            Encoding::Deflate => {
                let mut enc = ZlibEncoder::new(out.writer(), flate2::Compression::fast());
                enc.write_all(data)
                    .and_then(|_| enc.finish().map(drop))
                    .map_err(failed)
            }
            Encoding::Zstd => zstd_compress(data, out).map_err(failed),
        }
    }

    /// Decompresses one message, refusing to produce more than `limit` bytes: RESOURCE_EXHAUSTED over it,
    /// INTERNAL for data that does not decode.
    pub fn decompress(self, data: Bytes, limit: usize) -> Result<Bytes, Status> {
        self.decompress_bounded(data, limit).map_err(|e| match e {
            DecompressError::TooLarge => Status::new(
                Code::ResourceExhausted,
                format!("decompressed message larger than the limit ({limit} bytes)"),
            ),
            DecompressError::Corrupt(status) => status,
        })
    }

    /// [`Encoding::decompress`], telling a message over `limit` apart, so that the caller can name the limit.
    /// Never produces more than `limit + 1` bytes, whatever the data claims.
    pub(crate) fn decompress_bounded(
        self,
        data: Bytes,
        limit: usize,
    ) -> Result<Bytes, DecompressError> {
        let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
        let mut out = Vec::with_capacity(data.len().saturating_mul(2).min(limit.saturating_add(1)));
        let read = match self {
            Encoding::Identity => {
                return if data.len() > limit {
                    Err(DecompressError::TooLarge)
                } else {
                    Ok(data)
                }
            }
            // Every member (RFC 1952 2.2: a gzip stream is a series of members); bytes after the last
            // one are read as a member that does not start with gzip's magic number, an error.
            Encoding::Gzip => MultiGzDecoder::new(&data[..])
                .take(cap)
                .read_to_end(&mut out),
            Encoding::Deflate => {
                let mut decoder = ZlibDecoder::new(&data[..]);
                let read = (&mut decoder).take(cap).read_to_end(&mut out);
                // The zlib stream must be the whole message: anything after its checksum is corruption.
                match read {
                    Ok(_) if out.len() <= limit && !decoder.get_ref().is_empty() => {
                        Err(std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!(
                                "{} bytes after the end of the zlib stream",
                                decoder.get_ref().len()
                            ),
                        ))
                    }
                    other => other,
                }
            }
            // `with_buffer`: the message is already in memory, no second buffer for the decoder's input.
            // The decoder's window is bounded by zstd's default `windowLogMax` (128 MiB of address space at
            // most, written only as far as the output goes, which `take` bounds).
            Encoding::Zstd => zstd::stream::read::Decoder::with_buffer(&data[..])
                .and_then(|d| d.take(cap).read_to_end(&mut out)),
        };
        read.map_err(|e| {
            DecompressError::Corrupt(
                Status::new(
                    Code::Internal,
                    format!("failed to decompress a {} message: {e}", self.as_str()),
                )
                .with_source(e),
            )
        })?;
        if out.len() > limit {
            return Err(DecompressError::TooLarge);
        }
        Ok(Bytes::from(out))
    }
}

/// One zstd frame holding `data`, appended to `out`.
fn zstd_compress(data: &[u8], out: &mut BytesMut) -> std::io::Result<()> {
    let mut enc = zstd::stream::write::Encoder::new(out.writer(), ZSTD_LEVEL)?;
    // The size goes into the frame header: a receiver then needs a window no larger than the message.
    enc.set_pledged_src_size(Some(data.len() as u64))?;
    enc.include_contentsize(true)?;
    enc.write_all(data)?;
    enc.finish().map(drop)
}

impl std::fmt::Display for Encoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of compressed encodings ([`Encoding::Gzip`], [`Encoding::Deflate`], [`Encoding::Zstd`]): what a
/// channel or a call advertises in `grpc-accept-encoding`, in that order. Identity is always accepted, so it
/// is never a member (adding it does nothing) and never listed. Small and `Copy`.
///
/// ```
/// use grpc_channel::compression::EncodingSet;
/// use grpc_channel::Encoding;
///
/// let set: EncodingSet = [Encoding::Zstd, Encoding::Gzip].into_iter().collect();
/// assert!(set.contains(Encoding::Gzip) && !set.contains(Encoding::Deflate));
/// assert_eq!(set.to_string(), "gzip,zstd");
/// assert_eq!(EncodingSet::empty().to_string(), "");
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct EncodingSet(u8);

/// `grpc-accept-encoding` for each set, indexed by its bits (gzip 1, deflate 2, zstd 4): made once, so a
/// call's header is a clone of a static value (no allocation).
static ACCEPT_HEADERS: [HeaderValue; 8] = [
    HeaderValue::from_static(""),
    HeaderValue::from_static("gzip"),
    HeaderValue::from_static("deflate"),
    HeaderValue::from_static("gzip,deflate"),
    HeaderValue::from_static("zstd"),
    HeaderValue::from_static("gzip,zstd"),
    HeaderValue::from_static("deflate,zstd"),
    HeaderValue::from_static("gzip,deflate,zstd"),
];

impl EncodingSet {
    /// No compressed encoding: the call accepts only uncompressed messages.
    pub const fn empty() -> EncodingSet {
        EncodingSet(0)
    }

    /// Every compressed encoding this crate decodes (gzip, deflate, zstd).
    pub const fn all() -> EncodingSet {
        EncodingSet(0b111)
    }

    /// `gzip` alone: what a channel advertises unless told otherwise (as grpc-java does).
    pub const fn gzip() -> EncodingSet {
        EncodingSet(1)
    }

    const fn bit(encoding: Encoding) -> u8 {
        match encoding {
            Encoding::Identity => 0,
            Encoding::Gzip => 1,
            Encoding::Deflate => 2,
            Encoding::Zstd => 4,
        }
    }

    /// This set and `encoding` (identity adds nothing).
    pub const fn with(self, encoding: Encoding) -> EncodingSet {
        EncodingSet(self.0 | Self::bit(encoding))
    }

    /// Adds `encoding` (identity adds nothing).
    pub fn insert(&mut self, encoding: Encoding) {
        *self = self.with(encoding);
    }

    /// Whether a message compressed with `encoding` is accepted: always for identity.
    pub const fn contains(self, encoding: Encoding) -> bool {
        matches!(encoding, Encoding::Identity) || self.0 & Self::bit(encoding) != 0
    }

    /// The encodings in either set.
    pub const fn union(self, other: EncodingSet) -> EncodingSet {
        EncodingSet(self.0 | other.0)
    }

    /// Whether the set has no compressed encoding (then no `grpc-accept-encoding` is sent).
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The encodings, in `grpc-accept-encoding` order: gzip, deflate, zstd.
    pub fn iter(self) -> impl Iterator<Item = Encoding> {
        [Encoding::Gzip, Encoding::Deflate, Encoding::Zstd]
            .into_iter()
            .filter(move |e| self.contains(*e))
    }

    /// The encodings a `grpc-accept-encoding` header (or several) names that this crate implements; names
    /// it does not know, and identity, are left out.
    #[cfg(any(feature = "tower", test))]
    pub(crate) fn from_header_values<'a>(
        values: impl IntoIterator<Item = &'a HeaderValue>,
    ) -> EncodingSet {
        let mut set = EncodingSet::empty();
        for value in values {
            for name in value.as_bytes().split(|b| *b == b',') {
                if let Some(e) = Encoding::from_name(name.trim_ascii()) {
                    set.insert(e);
                }
            }
        }
        set
    }

    /// The `grpc-accept-encoding` value advertising this set; `None` for the empty set (no header).
    pub(crate) fn header_value(self) -> Option<HeaderValue> {
        if self.is_empty() {
            None
        } else {
            Some(ACCEPT_HEADERS[usize::from(self.0 & 0b111)].clone())
        }
    }
}

/// The `grpc-accept-encoding` form: `gzip,zstd`; empty for the empty set.
impl std::fmt::Display for EncodingSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let value = &ACCEPT_HEADERS[usize::from(self.0 & 0b111)];
        f.write_str(value.to_str().unwrap_or_default())
    }
}

impl std::fmt::Debug for EncodingSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl FromIterator<Encoding> for EncodingSet {
    fn from_iter<I: IntoIterator<Item = Encoding>>(iter: I) -> Self {
        iter.into_iter()
            .fold(EncodingSet::empty(), EncodingSet::with)
    }
}

impl Extend<Encoding> for EncodingSet {
    fn extend<I: IntoIterator<Item = Encoding>>(&mut self, iter: I) {
        for e in iter {
            self.insert(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMPRESSED: [Encoding; 3] = [Encoding::Gzip, Encoding::Deflate, Encoding::Zstd];

    #[test]
    fn every_encoding_round_trips() {
        let data = vec![7u8; 100_000];
        for enc in COMPRESSED {
            let mut out = BytesMut::new();
            enc.compress(&data, &mut out).expect("compress");
            assert!(out.len() < 1_000, "{enc}: {} bytes", out.len());
            let back = enc.decompress(out.freeze(), 1 << 20).expect("decompress");
            assert_eq!(&back[..], &data[..], "{enc}");
        }
    }

    #[test]
    fn an_empty_message_round_trips() {
        for enc in COMPRESSED {
            let mut out = BytesMut::new();
            enc.compress(&[], &mut out).expect("compress");
            let back = enc.decompress(out.freeze(), 0).expect("decompress");
            assert!(back.is_empty(), "{enc}");
        }
    }

    /// The formats are the standard ones: gRPC's `deflate` is zlib-wrapped (RFC 1950: a header whose
    /// 16-bit value is a multiple of 31, compression method 8), gzip starts with its magic, zstd with its
    /// frame magic; and each decodes what another implementation of the format wrote.
    #[test]
    fn the_formats_are_the_standard_ones() {
        let data = b"hello hello hello hello".repeat(10);
        let mut out = BytesMut::new();
        Encoding::Deflate
            .compress(&data, &mut out)
            .expect("deflate");
        assert_eq!(out[0] & 0x0f, 8, "CM = deflate");
        assert_eq!(u16::from_be_bytes([out[0], out[1]]) % 31, 0, "FCHECK");
        let mut out = BytesMut::new();
        Encoding::Gzip.compress(&data, &mut out).expect("gzip");
        assert_eq!(&out[..2], &[0x1f, 0x8b]);
        let mut out = BytesMut::new();
        Encoding::Zstd.compress(&data, &mut out).expect("zstd");
        assert_eq!(&out[..4], &[0x28, 0xb5, 0x2f, 0xfd]);

        let mut zlib = ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        zlib.write_all(&data).expect("zlib");
        let zlib = zlib.finish().expect("zlib");
        let back = Encoding::Deflate
            .decompress(Bytes::from(zlib), 1 << 20)
            .expect("zlib data");
        assert_eq!(&back[..], &data[..]);
        let zstd = zstd::bulk::compress(&data, 19).expect("zstd");
        let back = Encoding::Zstd
            .decompress(Bytes::from(zstd), 1 << 20)
            .expect("zstd data");
        assert_eq!(&back[..], &data[..]);
        // Raw DEFLATE (no zlib wrapper) is not gRPC's deflate.
        let mut raw = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        raw.write_all(&data).expect("raw");
        let err = Encoding::Deflate
            .decompress(Bytes::from(raw.finish().expect("raw")), 1 << 20)
            .expect_err("raw deflate");
        assert_eq!(err.code(), Code::Internal);
    }

    #[test]
    fn decompression_is_bounded() {
        let data = vec![0u8; 1 << 20];
        for enc in COMPRESSED {
            let mut out = BytesMut::new();
            enc.compress(&data, &mut out).expect("compress");
            let compressed = out.freeze();
            let err = enc
                .decompress(compressed.clone(), 1000)
                .expect_err("over the limit");
            assert_eq!(err.code(), Code::ResourceExhausted, "{enc}");
            assert!(matches!(
                enc.decompress_bounded(compressed.clone(), (1 << 20) - 1),
                Err(DecompressError::TooLarge)
            ));
            let exact = enc
                .decompress(compressed, 1 << 20)
                .expect("exactly the limit");
            assert_eq!(exact.len(), 1 << 20);
        }
    }

    /// A zstd frame that claims a huge content size but holds little is refused by the limit or as
    /// corrupt, never expanded.
    #[test]
    fn a_zstd_bomb_is_refused() {
        let data = vec![0u8; 64 << 20];
        let compressed = zstd::bulk::compress(&data, 1).expect("zstd");
        assert!(compressed.len() < 64 << 10);
        assert!(matches!(
            Encoding::Zstd.decompress_bounded(Bytes::from(compressed), 4 << 20),
            Err(DecompressError::TooLarge)
        ));
    }

    #[test]
    fn garbage_is_internal() {
        for enc in COMPRESSED {
            let err = enc
                .decompress(Bytes::from_static(b"not compressed at all"), 1000)
                .expect_err("garbage");
            assert_eq!(err.code(), Code::Internal, "{enc}");
            assert!(err.message().contains(enc.as_str()), "{err:?}");
        }
        // Cut short.
        for enc in COMPRESSED {
            let mut out = BytesMut::new();
            enc.compress(&[5u8; 10_000], &mut out).expect("compress");
            let half = out.freeze().slice(..8);
            let err = enc.decompress(half, 1 << 20).expect_err("truncated");
            assert_eq!(err.code(), Code::Internal, "{enc}");
        }
    }

    #[test]
    fn bytes_after_the_compressed_data_are_corruption() {
        for enc in COMPRESSED {
            let mut out = BytesMut::new();
            enc.compress(b"hello world", &mut out).expect("compress");
            out.extend_from_slice(b"garbage");
            let err = enc
                .decompress(out.freeze(), 1 << 20)
                .expect_err("trailing bytes");
            assert_eq!(err.code(), Code::Internal, "{enc}: {err:?}");
        }
    }

    #[test]
    fn every_member_or_frame_of_a_message_is_decoded() {
        for enc in [Encoding::Gzip, Encoding::Zstd] {
            let mut out = BytesMut::new();
            enc.compress(b"hello ", &mut out).expect("compress");
            enc.compress(b"world", &mut out).expect("compress");
            let back = enc
                .decompress(out.clone().freeze(), 1 << 20)
                .expect("two parts");
            assert_eq!(&back[..], b"hello world", "{enc}");
            // The limit counts every part.
            assert!(matches!(
                enc.decompress_bounded(out.freeze(), 8),
                Err(DecompressError::TooLarge)
            ));
        }
    }

    #[test]
    fn received_encodings_are_named_exactly() {
        let of =
            |v: &'static str| ReceivedEncoding::from_header(Some(&HeaderValue::from_static(v)));
        assert_eq!(
            ReceivedEncoding::from_header(None),
            ReceivedEncoding::Identity
        );
        assert_eq!(of("identity"), ReceivedEncoding::Identity);
        assert_eq!(of("gzip"), ReceivedEncoding::Known(Encoding::Gzip));
        assert_eq!(of("deflate"), ReceivedEncoding::Known(Encoding::Deflate));
        assert_eq!(of("zstd"), ReceivedEncoding::Known(Encoding::Zstd));
        assert_eq!(of("snappy"), ReceivedEncoding::Unsupported("snappy".into()));
        assert_eq!(of("GZIP"), ReceivedEncoding::Unsupported("GZIP".into()));
    }

    #[test]
    fn encoding_sets() {
        let mut set = EncodingSet::empty();
        assert!(set.is_empty() && set.header_value().is_none());
        assert!(set.contains(Encoding::Identity));
        set.insert(Encoding::Identity);
        assert!(set.is_empty());
        set.insert(Encoding::Zstd);
        set.insert(Encoding::Gzip);
        assert_eq!(set.header_value().expect("header"), "gzip,zstd");
        assert_eq!(
            set.iter().collect::<Vec<_>>(),
            [Encoding::Gzip, Encoding::Zstd]
        );
        assert_eq!(format!("{set:?}"), "{Gzip, Zstd}");
        assert_eq!(EncodingSet::all().to_string(), "gzip,deflate,zstd");
        assert_eq!(
            EncodingSet::gzip(),
            EncodingSet::empty().with(Encoding::Gzip)
        );
        let values = [
            HeaderValue::from_static("identity, deflate ,snappy"),
            HeaderValue::from_static("zstd"),
        ];
        assert_eq!(
            EncodingSet::from_header_values(&values),
            [Encoding::Deflate, Encoding::Zstd].into_iter().collect()
        );
        for bits in 0..8u8 {
            let set = EncodingSet(bits);
            let parsed = set
                .header_value()
                .map(|v| EncodingSet::from_header_values([&v]))
                .unwrap_or_default();
            assert_eq!(parsed, set);
        }
    }
}
