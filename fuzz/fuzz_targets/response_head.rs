//! The response HEADERS are classified without panicking, and by the rules in `call.rs`:
//! * no `grpc-status` and an HTTP status other than 200: the HTTP-status table;
//! * a `content-type` that is not `application/grpc`, `application/grpc+*` or `application/grpc;*`: the
//!   HTTP-status table (200 → UNKNOWN);
//! * END_STREAM (Trailers-Only): exactly what the same block gives as trailers;
//! * otherwise messages follow, under the `grpc-encoding` named.
//!
//! Input: two bytes of HTTP status (big-endian), one byte whose low bit is END_STREAM, then the header block
//! as in `common`.
#![no_main]

mod common;

use grpc_channel::fuzzing::{self, ResponseHead};
use grpc_channel::{Code, Encoding};
use libfuzzer_sys::fuzz_target;

/// `doc/http-grpc-status-mapping.md`, written out again so the target does not check the table with itself.
fn http_table(status: u16) -> Code {
    match status {
        400 | 431 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502 | 503 | 504 => Code::Unavailable,
        _ => Code::Unknown,
    }
}

fuzz_target!(|data: &[u8]| {
    let [s0, s1, flags, rest @ ..] = data else {
        return;
    };
    let http_status = u16::from_be_bytes([*s0, *s1]);
    let end_stream = flags & 1 == 1;
    let headers = common::header_map(rest);
    let head = fuzzing::response_head(http_status, headers.clone(), end_stream);

    let has_grpc_status = headers.contains_key("grpc-status");
    let grpc_content_type = headers.get("content-type").is_some_and(|v| {
        let v = v.as_bytes();
        v == b"application/grpc"
            || v.starts_with(b"application/grpc+")
            || v.starts_with(b"application/grpc;")
    });
    match head {
        ResponseHead::End { status, metadata } => {
            common::check_metadata(&headers, &metadata);
            if (http_status != 200 && !has_grpc_status) || !grpc_content_type {
                assert_eq!(status.code(), http_table(http_status), "{http_status}");
                assert!(status.message().contains(&http_status.to_string()));
            } else {
                assert!(end_stream, "a gRPC head without END_STREAM ended the call");
                common::check_trailers(&headers, &status, &metadata);
                let (again, again_md) = fuzzing::trailers(headers.clone());
                assert_eq!(status.code(), again.code());
                assert_eq!(status.message(), again.message());
                assert_eq!(status.details(), again.details());
                assert!(metadata == again_md);
            }
        }
        ResponseHead::Messages { encoding, metadata } => {
            assert!(!end_stream, "END_STREAM but messages expected");
            assert!(http_status == 200 || has_grpc_status);
            assert!(grpc_content_type);
            common::check_metadata(&headers, &metadata);
            let want = match headers.get("grpc-encoding").map(|v| v.as_bytes()) {
                None | Some(b"identity") => Ok(Encoding::Identity),
                Some(b"gzip") => Ok(Encoding::Gzip),
                Some(b"deflate") => Ok(Encoding::Deflate),
                Some(b"zstd") => Ok(Encoding::Zstd),
                Some(other) => Err(String::from_utf8_lossy(other).into_owned()),
            };
            assert_eq!(encoding, want);
        }
    }
});
