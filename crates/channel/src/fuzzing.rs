//! Entry points for the fuzz targets in `fuzz/` (a workspace of its own, so it cannot see crate-private
//! items). Thin wrappers around the response parsing in `wire/response.rs` and the proxy answer parsing in
//! `conn/proxy/handshake.rs`; not part of the API and not stable. At the crate root (the API layer) because
//! it reaches into two layers.

use http::HeaderMap;

use crate::wire::compression::{Encoding, ReceivedEncoding};
use crate::wire::metadata::MetadataMap;
use crate::wire::response::{self, Head};
use crate::wire::status::Status;

/// What the response HEADERS say, as [`response_head`] classifies them.
#[derive(Debug)]
pub enum ResponseHead {
    /// Messages follow.
    Messages {
        /// The `grpc-encoding` of the messages: `Ok` for one we decode (identity when absent), `Err` with the
        /// name of one we do not.
        encoding: Result<Encoding, String>,
        /// The response headers without the protocol's own.
        metadata: MetadataMap,
    },
    /// The call is over (Trailers-Only, or a response that is not gRPC).
    End {
        /// The call's status.
        status: Status,
        /// The block's metadata.
        metadata: MetadataMap,
    },
}

/// Classifies a response head: HTTP status, header block, and whether the HEADERS frame ended the stream.
pub fn response_head(http_status: u16, headers: HeaderMap, end_stream: bool) -> ResponseHead {
    match response::classify_head(http_status, headers, end_stream) {
        Head::Messages { encoding, metadata } => ResponseHead::Messages {
            encoding: match encoding {
                ReceivedEncoding::Identity => Ok(Encoding::Identity),
                ReceivedEncoding::Known(e) => Ok(e),
                ReceivedEncoding::Unsupported(name) => Err(name),
            },
            metadata,
        },
        Head::End(status, metadata) => ResponseHead::End { status, metadata },
    }
}

/// The status and metadata of a trailer block.
pub fn trailers(trailers: HeaderMap) -> (Status, MetadataMap) {
    response::status_from_trailers(trailers)
}

/// What an HTTP proxy's answer to CONNECT says, as the channel reads it (gRFC A1).
#[derive(Debug, PartialEq, Eq)]
pub struct ProxyAnswer {
    /// The status code.
    pub code: u16,
    /// The `Proxy-Authenticate` realm, if any.
    pub realm: Option<String>,
    /// Where the tunnel's bytes start.
    pub header_len: usize,
}

/// Parses a proxy's answer: `Ok(None)` while its header is incomplete, `Err` with the parser's message
/// when it is malformed.
pub fn proxy_answer(bytes: &[u8]) -> Result<Option<ProxyAnswer>, String> {
    crate::conn::proxy::parse_answer(bytes).map(|answer| {
        answer.map(|a| ProxyAnswer {
            code: a.code,
            realm: a.realm,
            header_len: a.header_len,
        })
    })
}
