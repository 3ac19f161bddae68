//! [`TransportKey`]: which transport (TLS settings, credentials) a subchannel's connections use, as part
//! of the subchannel's identity beside its address. Two users of one address with different transports
//! (two xDS clusters naming one endpoint with different security, gRFC A29) get two subchannels and never
//! share a connection, as grpc-go makes address attributes part of a subconn's identity.
//!
//! The key is opaque here: the channel gives it meaning (it finds the connector registered under it). Not
//! here: what a transport is, and who registers it.

use std::fmt;
use std::sync::Arc;

/// An opaque name of a transport: equal keys share subchannels (and so connections), distinct keys never
/// do. `None` where a key is optional means the channel's own transport.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TransportKey(Arc<str>);

impl TransportKey {
    /// The key named `name`.
    pub fn new(name: impl Into<Arc<str>>) -> TransportKey {
        TransportKey(name.into())
    }

    /// Its name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for TransportKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TransportKey({:?})", &*self.0)
    }
}

impl fmt::Display for TransportKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
