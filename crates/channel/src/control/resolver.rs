//! Name resolution for a channel: the target's endpoints and the service config in use, per gRFC A21.
//!
//! Static targets (`ipv4:`, `ipv6:`, `unix:`) resolve at once, with the application's default service config
//! or the empty one. DNS targets run a [`ResolverTask`] (hickory) that hands each
//! resolution to the A21 [`ConfigSelector`] here, which publishes the result and tells the resolver whether the
//! channel could use it: a first config that is invalid with no default is rejected, and the resolver retries
//! with backoff until a valid one arrives. The task runs whether or not calls flow, and ends when the channel
//! is closed ([`Resolution::stop`]) or dropped; so does the resolver of an `xds:` target (its watches, and
//! its share of the ADS stream, go with it). Both start on the channel's first call, inside the
//! caller's tokio runtime. A DNS target reached through an HTTP CONNECT proxy (gRFC A1) is not resolved
//! here: its one endpoint is its name (`Address::Name`), which the proxy resolves; the resolver still looks
//! up the service config.

use std::sync::Arc;

use grpc_base::{Address, Endpoint};
use grpc_retry::SplitMix64;
use grpc_service_config::{
    Accept, ConfigSelector, Decision, DnsResolver, ResolverHandle, ResolverOptions, ResolverTask,
    ServiceConfig, Target,
};
use tokio::sync::{watch, OnceCell};

use crate::control::resolver_state::{ExternalTask, Resolved, StartResolver, State};
use crate::wire::status::{Code, Status};

struct Started {
    state: watch::Receiver<State>,
}

/// The resolver that runs for a started resolution, until [`Resolution::stop`] (or the channel's drop)
/// drops it.
#[derive(Default)]
struct Running {
    /// [`Resolution::stop`] was called: no resolver starts any more.
    stopped: bool,
    /// The DNS resolver's handle: its task ends once the handle is gone (after a query in flight).
    dns: Option<ResolverHandle>,
    /// A resolver the builder started (xDS): its task stops when this is dropped.
    external: Option<ExternalTask>,
}

pub(crate) struct Resolution {
    target: Target,
    /// The target's name goes to a proxy unresolved: the only endpoint is the name (gRFC A1).
    by_name: bool,
    options: ResolverOptions,
    default_config: Option<ServiceConfig>,
    /// What starts the resolver of an `xds:` target (given by the builder with feature `xds`).
    external: Option<StartResolver>,
    started: OnceCell<Started>,
    /// Taken for the whole of [`Resolution::start`] and by [`Resolution::stop`], so that no resolver
    /// starts after the channel closed.
    running: parking_lot::Mutex<Running>,
}

impl Resolution {
    pub(crate) fn new(
        target: Target,
        options: ResolverOptions,
        default_config: Option<ServiceConfig>,
        by_name: bool,
        external: Option<StartResolver>,
    ) -> Self {
        Resolution {
            target,
            by_name,
            options,
            default_config,
            external,
            started: OnceCell::new(),
            running: parking_lot::Mutex::new(Running::default()),
        }
    }

    /// A target whose endpoints are fixed (`ipv4:`, `ipv6:`, `unix:`): resolved at once, with the
    /// application's default service config or the empty one.
    fn fixed(&self, endpoints: Vec<Address>) -> Started {
        let endpoints: Vec<Endpoint> = endpoints.into_iter().map(Endpoint::new).collect();
        let config = Arc::new(
            self.default_config
                .clone()
                .unwrap_or_else(ServiceConfig::empty),
        );
        let (_tx, rx) = watch::channel(State::Ready {
            endpoints: endpoints.into(),
            config,
            routing: None,
        });
        Started { state: rx }
    }

    fn start(&self) -> Result<Started, Status> {
        let mut running = self.running.lock();
        if running.stopped {
            return Err(Status::new(Code::Unavailable, "the channel is shut down"));
        }

        let (server, host, port) = match &self.target {
            Target::Addresses(addrs) => {
                return Ok(self.fixed(addrs.iter().copied().map(Address::Tcp).collect()))
            }
            Target::Unix(path) => return Ok(self.fixed(vec![Address::Unix(path.as_path().into())])),
            Target::Dns { server, host, port } => (server, host, port),
            Target::Xds { .. } => return self.start_xds(&mut running),
            // `Target` may grow schemes before this channel resolves them.
            other => {
                return Err(Status::new(
                    Code::Unavailable,
                    format!("no resolver for target {other}"),
                ))
            }
        };
        // Through a proxy with no TXT lookup, nothing needs DNS: the name is the one endpoint.
        if self.by_name && !self.options.txt_lookups {
            return Ok(self.fixed(vec![Address::Name {
                host: host.as_str().into(),
                port: *port,
            }]));
        }
        let mut resolver = DnsResolver::new(host, *port, *server, self.options.clone())
            .map_err(|e| Status::new(Code::Unavailable, e.to_string()).with_source(e))?;
        // Through a proxy, the name is the one endpoint; DNS still gives the service config.
        let name = self.by_name.then(|| Address::Name {
            host: host.as_str().into(),
            port: *port,
        });
        if name.is_some() {
            resolver = resolver.without_address_lookups();
        }
        let seed = super::shared::clock_seed();
        let (tx, rx) = watch::channel(State::Pending);
        let mut selector = ConfigSelector::new(self.default_config.clone());
        // Runs in the resolver task after each resolution: applies A21 and publishes the result. A first
        // config that is invalid (with no default) is rejected, so the resolver retries it with backoff
        // until the record is fixed (grpc-go: `UpdateState` returns `ErrBadResolverState`).
        let accept: Accept = Box::new(move |resolution: &grpc_service_config::Resolution| {
            let previous = tx.borrow().clone();
            let addrs = match &resolution.addresses {
                Ok(addrs) => addrs,
                Err(e) => {
                    // The name did not resolve, so its TXT answer ("no records" for a vanished name) says
                    // nothing about the config: the selector is left alone, as the channel keeps what it has
                    // (C-core returns both as errors when the addresses fail). Feeding it here made the
                    // selector's "last good config" `{}` while the channel still used the old one.
                    let next = match previous {
                        ready @ State::Ready { .. } => ready,
                        _ => State::Failed(
                            Status::new(Code::Unavailable, e.to_string()).with_source(e.clone()),
                        ),
                    };
                    tx.send_replace(next);
                    return false;
                }
            };
            let decision = selector.update(resolution.config.clone());
            if let Decision::KeepPrevious(_, e) = &decision {
                tracing::warn!(error = %e, "invalid service config from DNS; keeping the previous one");
            }
            let accepted = !matches!(decision, Decision::Fail(_));
            let next = match decision {
                Decision::Fail(e) => State::Failed(
                    Status::new(Code::Unavailable, format!("name resolution failed: {e}"))
                        .with_source(e),
                ),
                Decision::Use(config) | Decision::KeepPrevious(config, _) => State::Ready {
                    endpoints: match &name {
                        Some(name) => vec![Endpoint::new(name.clone())].into(),
                        None => addrs
                            .iter()
                            .copied()
                            .map(|a| Endpoint::new(Address::Tcp(a)))
                            .collect::<Vec<_>>()
                            .into(),
                    },
                    config,
                    routing: None,
                },
            };
            tx.send_replace(next);
            accepted
        });
        let handle = ResolverTask::spawn_with(resolver, Box::new(SplitMix64::new(seed)), accept);
        running.dns = Some(handle);
        Ok(Started { state: rx })
    }

    /// An `xds:` target: the resolver the builder gave (feature `xds`) follows the management server.
    fn start_xds(&self, running: &mut Running) -> Result<Started, Status> {
        let Some(start) = &self.external else {
            return Err(Status::unavailable(
                "xds: targets need grpc-channel's feature `xds`",
            ));
        };
        let (tx, rx) = watch::channel(State::Pending);
        running.external = Some(start(tx)?);
        Ok(Started { state: rx })
    }

    /// Stops the resolver for good (`Channel::close`): a DNS resolver asks no more (a query in flight
    /// ends first), an `xds:` resolver's task stops and drops its watches (unsubscribing what no other
    /// channel watches; the last channel of an ADS stream ends it), and none starts afterwards. Calls
    /// still waiting for a first result fail UNAVAILABLE.
    pub(crate) fn stop(&self) {
        let (dns, external) = {
            let mut running = self.running.lock();
            running.stopped = true;
            (running.dns.take(), running.external.take())
        };
        // Dropped outside the lock.
        drop((dns, external));
    }

    /// The resolution state, starting the resolver if needed.
    pub(crate) async fn subscribe(&self) -> Result<watch::Receiver<State>, Status> {
        let started = self
            .started
            .get_or_try_init(|| async { self.start() })
            .await?;
        Ok(started.state.clone())
    }

    /// The endpoints and config to use, waiting for the first result (and, for wait-for-ready calls, through
    /// failures). The caller bounds the wait with the call's deadline.
    pub(crate) async fn wait(&self, wait_for_ready: bool) -> Result<Resolved, Status> {
        let started = self
            .started
            .get_or_try_init(|| async { self.start() })
            .await?;
        let mut state = started.state.clone();
        loop {
            let current = state.borrow_and_update().clone();
            match current {
                State::Ready {
                    endpoints,
                    config,
                    routing,
                } => return Ok((endpoints, config, routing)),
                State::Failed(status) if !wait_for_ready => return Err(status),
                State::Failed(_) | State::Pending => {
                    if state.changed().await.is_err() {
                        return Err(Status::new(Code::Unavailable, "name resolution stopped"));
                    }
                }
            }
        }
    }

    /// What [`Resolution::wait`] would return at once, if it would: the endpoints and config, or the failure
    /// a fail-fast call fails with. `None` before the first result (or, for wait-for-ready calls, while
    /// resolution fails), and before the resolver started.
    pub(crate) fn ready(&self, wait_for_ready: bool) -> Option<Result<Resolved, Status>> {
        let started = self.started.get()?;
        let state = started.state.borrow();
        match &*state {
            State::Ready {
                endpoints,
                config,
                routing,
            } => Some(Ok((endpoints.clone(), config.clone(), routing.clone()))),
            State::Failed(status) if !wait_for_ready => Some(Err(status.clone())),
            State::Failed(_) | State::Pending => None,
        }
    }

    /// `look` applied to the resolver the builder gave (xDS), while it runs (started, not stopped): for
    /// its owner to look into.
    #[cfg(feature = "xds")]
    pub(crate) fn with_external<T>(
        &self,
        look: impl FnOnce(&(dyn std::any::Any + Send + Sync)) -> Option<T>,
    ) -> Option<T> {
        look(self.running.lock().external.as_deref()?)
    }

    /// Whether a resolver runs (DNS targets), so that `resolve_now` brings a fresh result.
    pub(crate) fn has_resolver(&self) -> bool {
        self.running.lock().dns.is_some()
    }

    /// Asks the resolver for a fresh resolution (rate-limited by the resolver).
    pub(crate) fn resolve_now(&self) {
        if let Some(handle) = &self.running.lock().dns {
            handle.resolve_now();
        }
    }
}
