//! The connection layer: one HTTP/2 connection to one address, from the socket to READY ([`connect`]),
//! through an HTTP CONNECT proxy when the channel has one ([`proxy`], gRFC A1), with TLS ([`tls`]; with xDS credentials' SAN check, `xds_tls`, feature `xds`);
//! watching the server's frames for GOAWAY and non-HTTP/2 answers ([`sniff`]); keepalive pings
//! ([`keepalive`], gRFC A8); and the errors of building and eagerly connecting a channel ([`error`]: the
//! TLS and proxy options are checked here).
//!
//! Uses the wire layer only. Not here: which connections exist and when they are made or dropped (the
//! control plane, `control`), streams and calls on them (`call`).

pub(crate) mod connect;
pub(crate) mod error;
pub(crate) mod keepalive;
pub(crate) mod proxy;
pub(crate) mod sniff;
pub(crate) mod tls;
#[cfg(feature = "xds")]
pub(crate) mod xds_tls;
