//! The transports a channel's subchannels may connect with besides its own (gRFC A29: each secured xDS
//! cluster's TLS settings), by [`TransportKey`]: a registry the resolver that hands out the keys fills,
//! and the event loop reads when a policy asks to connect a subchannel with a key. What a transport is
//! stays behind [`TransportFactory`], so this layer does not know xDS.
//!
//! A key the registry does not know (its cluster went while a connection attempt was starting) fails
//! that attempt UNAVAILABLE; it never falls back to the channel's own transport.
//!
//! Closing the channel empties the registry for good ([`Transports::close`]): what the transports hold
//! (certificate providers) is released then, not when the last clone of the channel goes.
//!
//! Not here: what a transport holds (`xds/credentials.rs`), the TLS mechanics (`conn/`).

use std::collections::HashMap;
use std::sync::Arc;

use grpc_lb::{Address, TransportKey};
use parking_lot::Mutex;

use crate::conn::tls::TlsConnector;
use crate::wire::status::Status;

/// Makes the TLS connector of one connection to `addr` with one transport. Called for each connection
/// attempt, so a transport whose certificates change gives new connections the newest.
pub(crate) trait TransportFactory: Send + Sync {
    /// The connector for a connection to `addr`, or why there is none (UNAVAILABLE, naming the cause).
    fn connector(&self, addr: &Address) -> Result<TlsConnector, Status>;
}

/// The registry: shared by the resolver (which sets and drops entries) and the event loop (which reads
/// them). Cheap to clone. Holds as many entries as the resolver keeps (one per distinct security
/// setting of the clusters it publishes).
#[derive(Clone, Default)]
pub(crate) struct Transports {
    inner: Arc<Mutex<Registry>>,
}

/// The entries, and whether the channel closed (then there are none and none are added).
#[derive(Default)]
struct Registry {
    entries: HashMap<TransportKey, Arc<dyn TransportFactory>>,
    closed: bool,
}

impl std::fmt::Debug for Transports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transports")
            .field("keys", &self.inner.lock().entries.len())
            .finish()
    }
}

impl Transports {
    /// Registers `factory` under `key` unless the key has one already (equal keys mean equal settings)
    /// or the registry is closed (then `factory` is not called).
    #[cfg(feature = "xds")]
    pub(crate) fn insert_if_absent(
        &self,
        key: TransportKey,
        factory: impl FnOnce() -> Arc<dyn TransportFactory>,
    ) {
        let mut registry = self.inner.lock();
        if !registry.closed {
            registry.entries.entry(key).or_insert_with(factory);
        }
    }

    /// Whether `key` is registered.
    #[cfg(feature = "xds")]
    pub(crate) fn contains(&self, key: &TransportKey) -> bool {
        self.inner.lock().entries.contains_key(key)
    }

    /// Drops every entry whose key is not in `keep`.
    #[cfg(feature = "xds")]
    pub(crate) fn retain(&self, keep: &std::collections::BTreeSet<TransportKey>) {
        self.inner.lock().entries.retain(|k, _| keep.contains(k));
    }

    /// Drops every entry and refuses new ones: the channel closed. The entries are dropped after the
    /// lock is released (a transport's drop may release a certificate provider).
    pub(crate) fn close(&self) {
        let entries = {
            let mut registry = self.inner.lock();
            registry.closed = true;
            std::mem::take(&mut registry.entries)
        };
        drop(entries);
    }

    /// How many entries there are.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().entries.len()
    }

    /// The connector for a connection to `addr` with `key`'s transport.
    pub(crate) fn connector(
        &self,
        key: &TransportKey,
        addr: &Address,
    ) -> Result<TlsConnector, Status> {
        let factory = self.inner.lock().entries.get(key).cloned();
        match factory {
            Some(f) => f.connector(addr),
            None => Err(Status::unavailable(format!(
                "no transport {key} for {addr}: its cluster is gone"
            ))),
        }
    }
}
