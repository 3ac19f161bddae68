//! Custom metadata: the application's headers and trailers (`doc/PROTOCOL-HTTP2.md`, "Custom-Metadata").
//!
//! Keys are lower-case `[0-9a-z_.-]+`; keys starting `grpc-` are reserved for the protocol. ASCII values are
//! printable bytes 0x20..=0x7E. Keys ending `-bin` carry binary values, sent as unpadded standard base64 and
//! accepted padded or not; several values may arrive joined by commas in one header, so decoding splits first.

use std::fmt;

use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;
use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};

/// Encodes unpadded; decodes padded and unpadded alike.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Encodes binary metadata the way it goes on the wire: standard alphabet, no padding.
pub fn encode_bin(value: &[u8]) -> String {
    BASE64.encode(value)
}

/// Decodes one base64 value of a `-bin` header, padded or not.
pub fn decode_bin(value: &[u8]) -> Result<Vec<u8>, MetadataError> {
    BASE64
        .decode(value.trim_ascii())
        .map_err(|e| MetadataError::InvalidBase64(e.to_string()))
}

/// Why a metadata key or value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    /// The key is empty or has a character outside `[0-9a-z_.-]`.
    #[error("invalid metadata key {0:?}: keys are lower-case [0-9a-z_.-]+")]
    InvalidKey(String),
    /// The key is one user metadata may not set (see [`RESERVED_KEYS`]): it starts with `grpc-`, which the
    /// protocol reserves; or it is a header the channel sets itself (`te`, `content-type`, `user-agent`,
    /// `host`, `content-length`), which would go out twice; or an HTTP/1 connection-specific header
    /// (`connection`, `keep-alive`, `proxy-connection`, `transfer-encoding`, `upgrade`), which HTTP/2
    /// forbids. Pseudo-headers (`:path`...) are not valid keys at all. (`ChannelBuilder::user_agent` puts a
    /// product in front of the user agent.)
    #[error("metadata key {0:?} is reserved: grpc-* keys, the headers the channel sets (te, content-type, user-agent, host, content-length) and HTTP/1 connection headers (connection, keep-alive, proxy-connection, transfer-encoding, upgrade) cannot be metadata")]
    ReservedKey(String),
    /// An ASCII value was given for a `-bin` key, or a binary value for an ASCII key.
    #[error(
        "metadata key {0:?}: binary values need a key ending in -bin, and only they may have one"
    )]
    WrongKind(String),
    /// The ASCII value has a byte outside 0x20..=0x7E.
    #[error("invalid value for metadata key {0:?}: ASCII values are printable bytes 0x20..=0x7E")]
    InvalidValue(String),
    /// A `-bin` value is not base64.
    #[error("invalid base64 in binary metadata: {0}")]
    InvalidBase64(String),
}

/// Keys user metadata may not set, besides every key starting with `grpc-`: the headers the channel sets
/// itself, and the HTTP/1 connection-specific headers HTTP/2 forbids (RFC 9113 §8.2.2).
pub const RESERVED_KEYS: &[&str] = &[
    "te",
    "content-type",
    "user-agent",
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// The protocol's own header names, as constants: a lookup by constant neither parses nor copies the name.
pub(crate) mod names {
    use http::HeaderName;

    pub(crate) const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
    pub(crate) const GRPC_PREVIOUS_RPC_ATTEMPTS: HeaderName =
        HeaderName::from_static("grpc-previous-rpc-attempts");
    pub(crate) const GRPC_ENCODING: HeaderName = HeaderName::from_static("grpc-encoding");
    pub(crate) const GRPC_ACCEPT_ENCODING: HeaderName =
        HeaderName::from_static("grpc-accept-encoding");
    pub(crate) const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
    pub(crate) const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
    pub(crate) const GRPC_STATUS_DETAILS_BIN: HeaderName =
        HeaderName::from_static("grpc-status-details-bin");
    pub(crate) const GRPC_RETRY_PUSHBACK_MS: HeaderName =
        HeaderName::from_static("grpc-retry-pushback-ms");
}

/// Headers the protocol owns, which are never shown as metadata.
fn is_protocol_header(name: &str) -> bool {
    name.starts_with("grpc-")
        || matches!(
            name,
            "content-type" | "te" | "user-agent" | "content-length"
        )
}

fn check_key(key: &str) -> Result<HeaderName, MetadataError> {
    let valid = !key.is_empty()
        && key.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'.' | b'-')
        });
    if !valid {
        return Err(MetadataError::InvalidKey(key.to_owned()));
    }
    if key.starts_with("grpc-") || RESERVED_KEYS.contains(&key) {
        return Err(MetadataError::ReservedKey(key.to_owned()));
    }
    HeaderName::from_bytes(key.as_bytes()).map_err(|_| MetadataError::InvalidKey(key.to_owned()))
}

/// A multimap of metadata keys to values, backed by an `http::HeaderMap`.
#[derive(Clone, Default, PartialEq)]
pub struct MetadataMap {
    headers: HeaderMap,
}

impl MetadataMap {
    /// An empty map.
    pub fn new() -> MetadataMap {
        MetadataMap::default()
    }

    /// The metadata in a received header block: everything but the protocol's own headers. A block with
    /// nothing else (the usual response headers and trailers) gives an empty map without allocating.
    pub(crate) fn from_headers(mut headers: HeaderMap) -> MetadataMap {
        let protocol_keys = headers
            .keys()
            .filter(|k| is_protocol_header(k.as_str()))
            .count();
        if protocol_keys == headers.keys_len() {
            return MetadataMap::new();
        }
        if protocol_keys == 0 {
            return MetadataMap { headers };
        }
        let protocol: Vec<HeaderName> = headers
            .keys()
            .filter(|k| is_protocol_header(k.as_str()))
            .cloned()
            .collect();
        for k in protocol {
            headers.remove(k);
        }
        MetadataMap { headers }
    }

    /// The number of attempts that preceded the one whose result this metadata came with
    /// (`grpc-previous-rpc-attempts`, gRFC A6 "Exposed Retry Metadata"): 0 when absent. Only the channel
    /// sets it on received metadata; a server's copy of the header is dropped on receipt.
    pub(crate) fn previous_rpc_attempts(&self) -> u32 {
        self.headers
            .get(names::GRPC_PREVIOUS_RPC_ATTEMPTS)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// Records `n` previous attempts; 0 adds nothing, as grpc-java leaves the entry out when the first
    /// attempt produced the result (received metadata never carries it: `from_headers` drops `grpc-` keys).
    pub(crate) fn set_previous_rpc_attempts(&mut self, n: u32) {
        if n > 0 {
            self.headers
                .insert(names::GRPC_PREVIOUS_RPC_ATTEMPTS, HeaderValue::from(n));
        }
    }

    /// Adds an ASCII value for `key` (keeping earlier values of the same key).
    pub fn append(&mut self, key: &str, value: &str) -> Result<(), MetadataError> {
        let name = check_key(key)?;
        if key.ends_with("-bin") {
            return Err(MetadataError::WrongKind(key.to_owned()));
        }
        if !value.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
            return Err(MetadataError::InvalidValue(key.to_owned()));
        }
        let value = HeaderValue::from_str(value)
            .map_err(|_| MetadataError::InvalidValue(key.to_owned()))?;
        self.headers.append(name, value);
        Ok(())
    }

    /// Adds a binary value for `key`, which must end in `-bin`.
    pub fn append_bin(&mut self, key: &str, value: &[u8]) -> Result<(), MetadataError> {
        let name = check_key(key)?;
        if !key.ends_with("-bin") {
            return Err(MetadataError::WrongKind(key.to_owned()));
        }
        let encoded = HeaderValue::from_str(&encode_bin(value))
            .map_err(|_| MetadataError::InvalidValue(key.to_owned()))?;
        self.headers.append(name, encoded);
        Ok(())
    }

    /// Replaces every value of `key` with one ASCII value (tonic's `insert`): a client interceptor and a
    /// channel interceptor that both insert `authorization` send one.
    pub fn insert(&mut self, key: &str, value: &str) -> Result<(), MetadataError> {
        let mut one = MetadataMap::new();
        one.append(key, value)?;
        self.take_every_value_of(key, one)
    }

    /// Replaces every value of the `-bin` key `key` with one binary value.
    pub fn insert_bin(&mut self, key: &str, value: &[u8]) -> Result<(), MetadataError> {
        let mut one = MetadataMap::new();
        one.append_bin(key, value)?;
        self.take_every_value_of(key, one)
    }

    /// Removes every value of `key`; whether there was any. A key that cannot be metadata (upper case, say,
    /// which `append` and `insert` refuse) has none.
    pub fn remove(&mut self, key: &str) -> bool {
        if check_key(key).is_err() && !key.starts_with("grpc-") {
            return false;
        }
        match HeaderName::from_bytes(key.as_bytes()) {
            Ok(name) => match self.headers.entry(name) {
                http::header::Entry::Occupied(entry) => {
                    entry.remove_entry_mult().1.for_each(drop);
                    true
                }
                http::header::Entry::Vacant(_) => false,
            },
            Err(_) => false,
        }
    }

    /// Replaces the values of `key` with `checked`'s (one checked entry of that key).
    fn take_every_value_of(
        &mut self,
        key: &str,
        checked: MetadataMap,
    ) -> Result<(), MetadataError> {
        self.remove(key);
        for (name, value) in checked.headers {
            if let Some(name) = name {
                self.headers.insert(name, value);
            }
        }
        Ok(())
    }

    /// The first ASCII value of `key`, if any (`None` for `-bin` keys and values that are not printable ASCII).
    pub fn get(&self, key: &str) -> Option<&str> {
        if key.ends_with("-bin") {
            return None;
        }
        self.headers.get(key).and_then(|v| v.to_str().ok())
    }

    /// All ASCII values of `key`, in order.
    pub fn get_all(&self, key: &str) -> Vec<&str> {
        self.headers
            .get_all(key)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect()
    }

    /// Every decoded value of the `-bin` key `key`, in order; a header holding comma-joined values yields each.
    pub fn get_bin_all(&self, key: &str) -> Result<Vec<Bytes>, MetadataError> {
        if !key.ends_with("-bin") {
            return Err(MetadataError::WrongKind(key.to_owned()));
        }
        let mut out = Vec::new();
        for v in self.headers.get_all(key) {
            for part in v.as_bytes().split(|b| *b == b',') {
                out.push(Bytes::from(decode_bin(part)?));
            }
        }
        Ok(out)
    }

    /// The first decoded value of the `-bin` key `key`: `None` if absent, an error if it is not base64.
    pub fn get_bin(&self, key: &str) -> Option<Result<Bytes, MetadataError>> {
        match self.get_bin_all(key) {
            Ok(values) => values.into_iter().next().map(Ok),
            Err(e) => Some(Err(e)),
        }
    }

    /// Whether `key` has any value.
    pub fn contains_key(&self, key: &str) -> bool {
        self.headers.contains_key(key)
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        self.headers.len()
    }

    /// Whether the map has no values.
    pub fn is_empty(&self) -> bool {
        self.headers.is_empty()
    }

    /// Iterates over `(key, raw value)` pairs; `-bin` values are still base64 here.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.headers.iter().map(|(k, v)| (k.as_str(), v.as_bytes()))
    }

    /// The map's HTTP headers, taken.
    /// The metadata as header entries.
    #[cfg(feature = "tower")]
    pub(crate) fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    pub(crate) fn into_headers(self) -> HeaderMap {
        self.headers
    }
}

/// Application retry policies read a failed attempt's trailers through this view (raw values: `-bin` ones
/// still base64).
impl grpc_retry::TrailerView for MetadataMap {
    fn get(&self, name: &str) -> Option<&[u8]> {
        self.headers.get(name).map(HeaderValue::as_bytes)
    }

    fn for_each(&self, f: &mut dyn FnMut(&str, &[u8])) {
        for (name, value) in self.iter() {
            f(name, value);
        }
    }
}

impl fmt::Debug for MetadataMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.iter().map(|(k, v)| (k, String::from_utf8_lossy(v))))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bin_values_are_sent_unpadded_and_read_either_way() {
        assert_eq!(encode_bin(&[0xab, 0xab, 0xab]), "q6ur");
        assert_eq!(encode_bin(&[0xab]), "qw");
        assert_eq!(decode_bin(b"qw").expect("unpadded"), vec![0xab]);
        assert_eq!(decode_bin(b"qw==").expect("padded"), vec![0xab]);
        assert_eq!(
            decode_bin(b" q6ur ").expect("trimmed"),
            vec![0xab, 0xab, 0xab]
        );
        assert!(decode_bin(b"q6u!").is_err());
    }

    #[test]
    fn comma_joined_bin_values_are_split_before_decoding() {
        let mut h = HeaderMap::new();
        h.append("x-trace-bin", HeaderValue::from_static("AQ,Ag=="));
        h.append("x-trace-bin", HeaderValue::from_static("Aw"));
        let md = MetadataMap::from_headers(h);
        let all = md.get_bin_all("x-trace-bin").expect("decodes");
        assert_eq!(
            all,
            vec![
                Bytes::from_static(&[1]),
                Bytes::from_static(&[2]),
                Bytes::from_static(&[3])
            ]
        );
    }

    #[test]
    fn keys_and_values_are_checked() {
        let mut md = MetadataMap::new();
        assert!(md.append("x-ok", "value with spaces").is_ok());
        assert_eq!(
            md.append("X-Upper", "v"),
            Err(MetadataError::InvalidKey("X-Upper".into()))
        );
        assert_eq!(
            md.append("", "v"),
            Err(MetadataError::InvalidKey("".into()))
        );
        assert_eq!(
            md.append("grpc-status", "0"),
            Err(MetadataError::ReservedKey("grpc-status".into()))
        );
        // Headers the channel sets itself would go out twice.
        for key in RESERVED_KEYS {
            assert_eq!(
                md.append(key, "x"),
                Err(MetadataError::ReservedKey((*key).into())),
                "{key}"
            );
        }
        assert_eq!(
            md.append(":path", "/x"),
            Err(MetadataError::InvalidKey(":path".into()))
        );
        assert_eq!(
            md.append("x-bin", "v"),
            Err(MetadataError::WrongKind("x-bin".into()))
        );
        assert_eq!(
            md.append("x-ctl", "a\nb"),
            Err(MetadataError::InvalidValue("x-ctl".into()))
        );
        assert_eq!(
            md.append("x-utf8", "é"),
            Err(MetadataError::InvalidValue("x-utf8".into()))
        );
        assert_eq!(
            md.append_bin("x-text", b"v"),
            Err(MetadataError::WrongKind("x-text".into()))
        );
        md.append_bin("x-raw-bin", &[0, 255]).expect("bin");
        assert_eq!(
            md.get_bin("x-raw-bin").expect("present").expect("decodes"),
            Bytes::from_static(&[0, 255])
        );
        assert_eq!(md.get("x-ok"), Some("value with spaces"));
    }

    #[test]
    fn protocol_headers_are_not_metadata() {
        let mut h = HeaderMap::new();
        h.insert("content-type", HeaderValue::from_static("application/grpc"));
        h.insert("grpc-status", HeaderValue::from_static("0"));
        h.insert("grpc-message", HeaderValue::from_static("ok"));
        h.insert("x-user", HeaderValue::from_static("kept"));
        let md = MetadataMap::from_headers(h);
        assert_eq!(md.len(), 1);
        assert_eq!(md.get("x-user"), Some("kept"));

        let mut h = HeaderMap::new();
        h.insert("content-type", HeaderValue::from_static("application/grpc"));
        h.insert("grpc-status", HeaderValue::from_static("0"));
        assert!(MetadataMap::from_headers(h).is_empty(), "protocol only");

        let mut h = HeaderMap::new();
        h.append("x-a", HeaderValue::from_static("1"));
        h.append("x-a", HeaderValue::from_static("2"));
        let md = MetadataMap::from_headers(h);
        assert_eq!(md.len(), 2, "metadata only, every value kept");
    }
}
