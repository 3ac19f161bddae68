//! The wire layer: gRPC over HTTP/2 as bytes and headers (`doc/PROTOCOL-HTTP2.md`), with no I/O and no
//! state beyond one message or one header list: Length-Prefixed-Message framing ([`framing`]) and the message
//! codecs ([`codec`]), per-message compression ([`compression`]), custom metadata ([`metadata`]), statuses
//! and their tables ([`status`], [`error_details`], the `grpc-message` percent codec [`percent`]), how a
//! response's headers and trailers become a status ([`response`]), the `grpc-timeout` header ([`timeout`]),
//! message size limits ([`limits`]) and each method's request URI ([`method_uris`]); with the `tonic` feature,
//! statuses to and from tonic's (`tonic_status`).
//!
//! The lowest layer: it uses no other module of the crate. Not here: streams, connections and calls
//! (`conn`, `call`).

pub(crate) mod codec;
pub mod compression;
pub mod error_details;
// Public (through lib.rs) only with the `unstable` feature; what only the project's tools use is dead without it.
#[cfg_attr(not(feature = "unstable"), allow(unreachable_pub, dead_code))]
pub mod framing;
pub(crate) mod limits;
pub mod metadata;
pub(crate) mod method_uris;
// Public only with `unstable`, as `framing`.
#[cfg_attr(not(feature = "unstable"), allow(unreachable_pub, dead_code))]
pub mod percent;
pub(crate) mod response;
pub(crate) mod status;
// Public only with `unstable`, as `framing`.
#[cfg_attr(not(feature = "unstable"), allow(unreachable_pub, dead_code))]
pub mod timeout;
#[cfg(feature = "tonic")]
mod tonic_status;
