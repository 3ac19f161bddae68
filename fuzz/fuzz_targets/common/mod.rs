//! Shared by the response targets: a header block built from fuzz bytes.
//!
//! The bytes are lines split on `\n`; each line is a name and a value split at the first `:`. A one-byte name
//! below 0x10 stands for one of the headers the protocol cares about ([`NAMES`]), so the fuzzer reaches them
//! without guessing their spelling. Lines whose name or value `http` refuses are skipped.

use http::header::{HeaderMap, HeaderName, HeaderValue};

/// The headers the response rules look at, plus two plain metadata keys.
pub const NAMES: [&str; 12] = [
    "grpc-status",
    "grpc-message",
    "content-type",
    "grpc-encoding",
    "grpc-status-details-bin",
    "grpc-retry-pushback-ms",
    "te",
    "user-agent",
    "content-length",
    "grpc-accept-encoding",
    "x-md",
    "x-md-bin",
];

pub fn header_map(data: &[u8]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for line in data.split(|b| *b == b'\n') {
        let (name, value) = match line.iter().position(|b| *b == b':') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, &b""[..]),
        };
        let name = match name {
            [i] if usize::from(*i) < NAMES.len() => HeaderName::from_static(NAMES[usize::from(*i)]),
            _ => match HeaderName::from_bytes(name) {
                Ok(n) => n,
                Err(_) => continue,
            },
        };
        let Ok(value) = HeaderValue::from_bytes(value) else {
            continue;
        };
        headers.append(name, value);
    }
    headers
}

/// Headers the protocol owns, which never show up as metadata (`metadata.rs`).
pub fn is_protocol_header(name: &str) -> bool {
    name.starts_with("grpc-")
        || matches!(name, "content-type" | "te" | "user-agent" | "content-length")
}

/// How many values of `headers` are metadata.
pub fn metadata_values(headers: &HeaderMap) -> usize {
    headers
        .iter()
        .filter(|(k, _)| !is_protocol_header(k.as_str()))
        .count()
}

/// `grpc-status` per the spec, written independently of `grpc_code`: decimal 0..=16 without a sign, spaces or
/// leading zeros; anything else is not a status.
pub fn strict_code(raw: &[u8]) -> Option<grpc_channel::Code> {
    let n: i32 = match raw {
        [d @ b'0'..=b'9'] => i32::from(d - b'0'),
        [a @ b'1'..=b'9', b @ b'0'..=b'9'] => i32::from(a - b'0') * 10 + i32::from(b - b'0'),
        _ => return None,
    };
    if n > 16 {
        return None;
    }
    grpc_channel::Code::from_i32(n)
}

/// Checks a trailer block's status and metadata against the rules in `call.rs`'s module docs.
pub fn check_trailers(
    headers: &HeaderMap,
    status: &grpc_channel::Status,
    metadata: &grpc_channel::MetadataMap,
) {
    use grpc_channel::{metadata as md, percent, Code};

    let raw_status = headers.get("grpc-status").map(HeaderValue::as_bytes);
    let message = headers
        .get("grpc-message")
        .map(|v| percent::decode(v.as_bytes()))
        .unwrap_or_default();
    match raw_status.map(strict_code) {
        Some(Some(code)) => {
            assert_eq!(status.code(), code, "{raw_status:?}");
            assert_eq!(status.message(), message);
        }
        // Missing or invalid: UNKNOWN, and the message still says what the server wrote.
        None | Some(None) => {
            assert_eq!(status.code(), Code::Unknown, "{raw_status:?}");
            assert!(status.message().contains(&format!("{message:?}")));
        }
    }
    // The decoded message survives a round trip through the grpc-message codec.
    assert_eq!(percent::decode(percent::encode(&message).as_bytes()), message);
    let details = headers
        .get("grpc-status-details-bin")
        .and_then(|v| md::decode_bin(v.as_bytes()).ok());
    assert_eq!(status.details_bin().map(|b| b.to_vec()), details);
    check_metadata(headers, metadata);
    assert!(status.metadata() == metadata);
}

/// The metadata of a block is every value but the protocol's own, in order.
pub fn check_metadata(headers: &HeaderMap, metadata: &grpc_channel::MetadataMap) {
    assert_eq!(metadata.len(), metadata_values(headers));
    for (k, v) in metadata.iter() {
        assert!(!is_protocol_header(k), "{k}");
        assert!(headers.get_all(k).iter().any(|h| h.as_bytes() == v), "{k}");
    }
}
