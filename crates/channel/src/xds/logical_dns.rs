//! LOGICAL_DNS clusters' names (A37), resolved through the channel's DNS resolver: one running
//! grpc-service-config [`ResolverTask`] per `host:port` the resolver's clusters name ([`DnsWatches`]), with
//! the options the channel's `dns:` targets use, minus the TXT lookup (a LOGICAL_DNS cluster has no service
//! config). Each answer wakes the xDS resolver. A name is re-resolved when the channel asks the resolver
//! (its policy wants re-resolution: [`DnsWatches::resolve_now`]), and at the options' refresh interval, both
//! under the options' minimum interval.
//!
//! An answer's addresses replace the name's; a failure keeps the last addresses (a failure before any
//! answer is a name with no addresses: A37's "one priority with no endpoints").
//!
//! Not here: what the addresses become (`resolver.rs`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use grpc_retry::SplitMix64;
use grpc_service_config::{Accept, DnsResolver, ResolverHandle, ResolverOptions, ResolverTask};
use parking_lot::Mutex;
use tokio::sync::Notify;

/// What a name resolved to, so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DnsState {
    /// No answer yet.
    Pending,
    /// The latest addresses (in DNS order; possibly empty after a failure before any answer).
    Resolved(Vec<SocketAddr>),
}

struct DnsWatch {
    /// `None` when the resolver could not be set up (the name has no addresses).
    handle: Option<ResolverHandle>,
    state: Arc<Mutex<DnsState>>,
}

/// The running DNS resolutions of one xDS resolver, by `(host, port)`. Shared with the channel's handle of
/// the resolver (for re-resolution).
pub(crate) struct DnsWatches {
    options: ResolverOptions,
    notify: Arc<Notify>,
    watches: Mutex<BTreeMap<(String, u16), DnsWatch>>,
}

impl std::fmt::Debug for DnsWatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DnsWatches")
            .field("names", &self.watches.lock().keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl DnsWatches {
    /// No names yet; answers wake `notify`. `options` are the channel's resolver options.
    pub(crate) fn new(options: ResolverOptions, notify: Arc<Notify>) -> DnsWatches {
        DnsWatches {
            options: options.with_txt_lookups(false),
            notify,
            watches: Mutex::new(BTreeMap::new()),
        }
    }

    /// Keeps resolving exactly these names: new ones start (inside a tokio runtime), the others stop.
    pub(crate) fn retain(&self, wanted: &std::collections::BTreeSet<(String, u16)>) {
        let mut watches = self.watches.lock();
        watches.retain(|name, _| wanted.contains(name));
        for (host, port) in wanted {
            if watches.contains_key(&(host.clone(), *port)) {
                continue;
            }
            let state = Arc::new(Mutex::new(DnsState::Pending));
            let handle = match DnsResolver::new(
                host,
                *port,
                self.options.default_server,
                self.options.clone(),
            ) {
                Ok(resolver) => {
                    let (state, notify) = (state.clone(), self.notify.clone());
                    let accept: Accept = Box::new(move |resolution| {
                        let ok = {
                            let mut state = state.lock();
                            match &resolution.addresses {
                                Ok(addresses) => {
                                    *state = DnsState::Resolved(addresses.clone());
                                    true
                                }
                                Err(e) => {
                                    tracing::debug!(error = %e, "xDS: a LOGICAL_DNS name did not resolve");
                                    if *state == DnsState::Pending {
                                        *state = DnsState::Resolved(Vec::new());
                                    }
                                    false
                                }
                            }
                        };
                        notify.notify_one();
                        ok
                    });
                    let seed = crate::control::clock_seed() ^ u64::from(*port);
                    Some(ResolverTask::spawn_with(
                        resolver,
                        Box::new(SplitMix64::new(seed)),
                        accept,
                    ))
                }
                Err(e) => {
                    tracing::warn!(%host, error = %e, "xDS: cannot resolve a LOGICAL_DNS name");
                    *state.lock() = DnsState::Resolved(Vec::new());
                    None
                }
            };
            watches.insert((host.clone(), *port), DnsWatch { handle, state });
        }
    }

    /// What `host:port` resolved to (`None`: not watched).
    pub(crate) fn state(&self, host: &str, port: u16) -> Option<DnsState> {
        self.watches
            .lock()
            .get(&(host.to_owned(), port))
            .map(|w| w.state.lock().clone())
    }

    /// Resolves every name again (under the minimum interval).
    pub(crate) fn resolve_now(&self) {
        for watch in self.watches.lock().values() {
            if let Some(handle) = &watch.handle {
                handle.resolve_now();
            }
        }
    }
}
