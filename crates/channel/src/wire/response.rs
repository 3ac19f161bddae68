//! How a response becomes a status, per `doc/PROTOCOL-HTTP2.md`: the response HEADERS (messages follow, or
//! Trailers-Only), the trailers, and the header-list limit. Pure functions over `http` types, used by the
//! attempts (which commit on response headers) and the receiving half.
//!
//! * HEADERS with `:status` other than 200 and no `grpc-status`: the HTTP-status table;
//! * a `content-type` that is not `application/grpc*`: the HTTP-status table (200 → UNKNOWN);
//! * HEADERS with END_STREAM (Trailers-Only): the status in them, or the HTTP-status table without one;
//! * trailers: `grpc-status` (strict decimal 0..=16, anything else UNKNOWN), `grpc-message` percent-decoded,
//!   `grpc-status-details-bin` kept; no trailers at all: INTERNAL (the receiving half decides that).
//!
//! Not here: stream resets and dead connections ([`Status::from_h2`]), message framing (`framing.rs`).

use bytes::Bytes;
use grpc_retry::Pushback;
use http::HeaderMap;

use crate::wire::compression::ReceivedEncoding;
use crate::wire::metadata::names::{
    GRPC_ENCODING, GRPC_MESSAGE, GRPC_RETRY_PUSHBACK_MS, GRPC_STATUS, GRPC_STATUS_DETAILS_BIN,
};
use crate::wire::metadata::{self, MetadataMap};
use crate::wire::percent;
use crate::wire::status::{code_from_http_status, Code, Status};

/// What the response HEADERS say.
pub(crate) enum Head {
    /// Messages follow.
    Messages {
        encoding: ReceivedEncoding,
        metadata: MetadataMap,
    },
    /// The call is over: Trailers-Only, or a response that is not gRPC.
    End(Status, MetadataMap),
}

fn grpc_content_type(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .map(|v| v.as_bytes())
        .is_some_and(|ct| {
            ct == b"application/grpc"
                || ct.starts_with(b"application/grpc+")
                || ct.starts_with(b"application/grpc;")
        })
}

pub(crate) fn classify_head(http_status: u16, headers: HeaderMap, end_stream: bool) -> Head {
    let has_grpc_status = headers.contains_key(GRPC_STATUS);
    if http_status != 200 && !has_grpc_status {
        let code = code_from_http_status(http_status);
        return Head::End(
            Status::new(
                code,
                format!("unexpected HTTP status code received from server: {http_status}"),
            ),
            MetadataMap::from_headers(headers),
        );
    }
    if !grpc_content_type(&headers) {
        let ct = headers
            .get(http::header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_else(|| "(none)".to_owned());
        let code = code_from_http_status(http_status);
        return Head::End(
            Status::new(
                code,
                format!("unexpected content-type {ct:?} (HTTP status {http_status})"),
            ),
            MetadataMap::from_headers(headers),
        );
    }
    if end_stream {
        let (status, metadata) = status_from_trailers(headers);
        return Head::End(status, metadata);
    }
    Head::Messages {
        encoding: ReceivedEncoding::from_header(headers.get(GRPC_ENCODING)),
        metadata: MetadataMap::from_headers(headers),
    }
}

/// A header block over the client's header list limit (RFC 7541 §4.1 sizes: name, value and 32 bytes of
/// overhead per field), as RESOURCE_EXHAUSTED naming the limit. h2 is given a much larger limit, so that a
/// block moderately over ours arrives whole and gets this status instead of a protocol error.
pub(crate) fn check_header_list(headers: &HeaderMap, limit: usize) -> Result<(), Status> {
    let size: usize = headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 32)
        .sum();
    if size > limit {
        return Err(Status::new(
            Code::ResourceExhausted,
            format!(
                "the response header list of {size} bytes is over the client's limit of {limit} bytes \
                 (Http2Settings::max_header_list_size)"
            ),
        ));
    }
    Ok(())
}

/// The server's `grpc-retry-pushback-ms` in a trailer block (or Trailers-Only headers). Found by walking the
/// block, as [`status_from_trailers`] does: a block holds a handful of entries, and comparing names is
/// cheaper than hashing the looked-up name.
pub(crate) fn pushback_of(headers: &HeaderMap) -> Pushback {
    Pushback::from_values(
        headers
            .iter()
            .filter(|(name, _)| **name == GRPC_RETRY_PUSHBACK_MS)
            .map(|(_, value)| value.as_bytes()),
    )
}

/// The status in a trailer block (or Trailers-Only headers) and the block's metadata.
pub(crate) fn status_from_trailers(trailers: HeaderMap) -> (Status, MetadataMap) {
    // One walk over the block for the three protocol fields (the first value of each).
    let (mut raw_status, mut raw_message, mut raw_details) = (None, None, None);
    for (name, value) in &trailers {
        let field = if *name == GRPC_STATUS {
            &mut raw_status
        } else if *name == GRPC_MESSAGE {
            &mut raw_message
        } else if *name == GRPC_STATUS_DETAILS_BIN {
            &mut raw_details
        } else {
            continue;
        };
        field.get_or_insert(value);
    }
    let message = raw_message
        .map(|v| percent::decode(v.as_bytes()))
        .unwrap_or_default();
    let status = match raw_status {
        None => Status::new(
            Code::Unknown,
            format!("missing grpc-status in trailers; message: {message:?}"),
        ),
        Some(raw) => match Code::from_header_bytes(raw.as_bytes()) {
            Some(code) => Status::new(code, message),
            None => Status::new(
                Code::Unknown,
                format!(
                    "invalid grpc-status {:?}; message: {message:?}",
                    String::from_utf8_lossy(raw.as_bytes())
                ),
            ),
        },
    };
    let details = raw_details
        .and_then(|v| metadata::decode_bin(v.as_bytes()).ok())
        .map(Bytes::from);
    let md = MetadataMap::from_headers(trailers);
    (
        status.with_details_bin(details).with_metadata(md.clone()),
        md,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn end_code(head: Head) -> (Code, String) {
        match head {
            Head::End(s, _) => (s.code(), s.message().to_owned()),
            Head::Messages { .. } => panic!("expected the call to end"),
        }
    }

    #[test]
    fn non_200_without_grpc_status_uses_the_http_table() {
        let (code, msg) = end_code(classify_head(
            503,
            headers(&[("content-type", "text/html")]),
            false,
        ));
        assert_eq!(code, Code::Unavailable);
        assert!(msg.contains("503"), "{msg}");
        let (code, _) = end_code(classify_head(404, HeaderMap::new(), true));
        assert_eq!(code, Code::Unimplemented);
    }

    #[test]
    fn non_200_with_grpc_status_uses_grpc_status() {
        let h = headers(&[
            ("content-type", "application/grpc"),
            ("grpc-status", "7"),
            ("grpc-message", "no"),
        ]);
        let (code, msg) = end_code(classify_head(500, h, true));
        assert_eq!((code, msg.as_str()), (Code::PermissionDenied, "no"));
    }

    #[test]
    fn wrong_content_type_is_unknown_on_200() {
        let (code, msg) = end_code(classify_head(
            200,
            headers(&[("content-type", "text/plain")]),
            false,
        ));
        assert_eq!(code, Code::Unknown);
        assert!(msg.contains("text/plain"), "{msg}");
        let (code, _) = end_code(classify_head(200, HeaderMap::new(), false));
        assert_eq!(code, Code::Unknown);
    }

    #[test]
    fn grpc_content_type_variants_are_accepted() {
        for ct in [
            "application/grpc",
            "application/grpc+proto",
            "application/grpc+json",
        ] {
            let mut h = HeaderMap::new();
            h.insert("content-type", HeaderValue::from_static(ct));
            assert!(
                matches!(classify_head(200, h, false), Head::Messages { .. }),
                "{ct}"
            );
        }
    }

    #[test]
    fn trailers_only_carries_the_status_and_metadata() {
        let h = headers(&[
            ("content-type", "application/grpc"),
            ("grpc-status", "2"),
            ("grpc-message", "a%20b%"),
            ("x-md", "v"),
        ]);
        match classify_head(200, h, true) {
            Head::End(s, md) => {
                assert_eq!(s.code(), Code::Unknown);
                assert_eq!(s.message(), "a b%");
                assert_eq!(md.get("x-md"), Some("v"));
                assert_eq!(s.metadata().get("x-md"), Some("v"));
            }
            Head::Messages { .. } => panic!("trailers-only"),
        }
    }

    #[test]
    fn trailers_only_without_grpc_status_is_unknown() {
        let (code, _) = end_code(classify_head(
            200,
            headers(&[("content-type", "application/grpc")]),
            true,
        ));
        assert_eq!(code, Code::Unknown);
    }

    #[test]
    fn trailer_status_parsing() {
        let cases: [(&[(&'static str, &'static str)], Code); 5] = [
            (&[("grpc-status", "0")], Code::Ok),
            (&[("grpc-status", "14")], Code::Unavailable),
            (&[("grpc-status", "abc")], Code::Unknown),
            (&[("grpc-status", "99")], Code::Unknown),
            (&[], Code::Unknown),
        ];
        for (h, want) in cases {
            assert_eq!(status_from_trailers(headers(h)).0.code(), want, "{h:?}");
        }
        let (s, _) = status_from_trailers(headers(&[
            ("grpc-status", "3"),
            ("grpc-status-details-bin", "AQI"),
        ]));
        assert_eq!(s.details_bin().map(|d| d.to_vec()), Some(vec![1, 2]));
        // The first value of a repeated field counts, as with a lookup.
        let (s, md) = status_from_trailers(headers(&[
            ("x-md", "1"),
            ("grpc-status", "3"),
            ("grpc-message", "first"),
            ("grpc-status", "5"),
            ("grpc-message", "second"),
        ]));
        assert_eq!((s.code(), s.message()), (Code::InvalidArgument, "first"));
        assert_eq!(md.get("x-md"), Some("1"));
    }

    #[test]
    fn pushback_reads_every_value_of_its_header() {
        let one = pushback_of(&headers(&[
            ("grpc-status", "14"),
            ("grpc-retry-pushback-ms", "10"),
        ]));
        assert_eq!(one, Pushback::from_values([b"10".as_slice()].into_iter()));
        let two = pushback_of(&headers(&[
            ("grpc-retry-pushback-ms", "10"),
            ("grpc-status", "14"),
            ("grpc-retry-pushback-ms", "20"),
        ]));
        assert_eq!(
            two,
            Pushback::from_values([b"10".as_slice(), b"20".as_slice()].into_iter())
        );
        assert_eq!(
            pushback_of(&headers(&[("grpc-status", "14")])),
            Pushback::None
        );
    }
}
