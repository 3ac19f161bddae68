//! Name resolution for a channel: the life cycle of its one [`Resolver`] (built by the [`ResolverBuilder`]
//! the channel builder chose for the target's scheme: the channel's own, a process-wide one, or a built-in
//! one) and the [`State`] it publishes through its [`ResolverSink`] (endpoints and the service config in
//! use, per gRFC A21).
//!
//! The resolver starts on the channel's first call (or `connect()`), inside the caller's tokio runtime,
//! and runs whether or not calls flow until the channel is closed ([`Resolution::stop`]) or dropped, which
//! drops it (a DNS task ends, an `xds:` resolver's watches go). A builder that fails or panics fails the
//! waiting calls with UNAVAILABLE, and the next call tries again; a resolver that panics in `resolve_now`
//! is dropped (its last endpoints stay in use) and its drop's panic is caught too. ResolveNow requests
//! (connection failure, GOAWAY, the policy's) reach the resolver at most once per minimum interval, one
//! inside the interval deferred to its end; the built-in DNS resolver limits them itself, by its own
//! schedule (the interval since its last success).
//!
//! Not here: the API (`resolver_api.rs`), the built-in resolvers (`builtin_resolvers.rs`,
//! `xds/resolver.rs`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Weak};
use std::time::Duration;

use grpc_service_config::{ParseOptions, ServiceConfig};
use tokio::sync::{watch, OnceCell};
use tokio::time::Instant;

use crate::control::resolver_api::{
    Closed, PublishCount, Resolver, ResolverSink, ResolverTarget, SharedBuilder, WeakSink,
};
use crate::control::resolver_state::{Resolved, State};
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
    resolver: Option<Box<dyn Resolver>>,
    /// Tells the resolver's sinks that the channel is gone.
    closed: Option<Arc<Closed>>,
    /// The resolver's sink, to report its panics with (not kept alive by the channel).
    sink: Option<WeakSink>,
    /// When ResolveNow last reached the resolver, and whether a deferred one is due.
    last_resolve_now: Option<Instant>,
    deferred: bool,
    /// The task that passes a deferred ResolveNow on at the end of the interval: stopped with the
    /// resolver, so that a closed or dropped channel leaves no task sleeping behind it.
    deferred_task: Option<tokio::task::JoinHandle<()>>,
}

/// What a channel's resolution needs to know of its builder beside the builder itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Any resolver: ResolveNow rate-limited by the channel.
    Plain,
    /// The built-in DNS resolver: it rate-limits ResolveNow itself, and a request brings a fresh result
    /// (the channel waits for it when leaving IDLE).
    Dns,
}

pub(crate) struct Resolution {
    target: ResolverTarget,
    builder: SharedBuilder,
    kind: Kind,
    default_config: Option<ServiceConfig>,
    parse: ParseOptions,
    /// The least time between two ResolveNow requests passed on.
    min_interval: Duration,
    started: OnceCell<Started>,
    /// Taken for the whole of [`Resolution::start`] and by [`Resolution::stop`], so that no resolver
    /// starts after the channel closed.
    running: parking_lot::Mutex<Running>,
    /// Set by [`Resolution::stop`]: calls waiting for a result stop waiting, whatever sinks still live.
    shut_down: Closed,
    /// How many results the resolver (any resolver this resolution started) has published.
    published: Arc<PublishCount>,
    /// What the xDS resolver shows `Channel::xds_resources` while it runs.
    #[cfg(feature = "xds")]
    inspect: Option<crate::control::resolver_state::Inspect>,
    /// The transports the resolver registers for the keys it gives clusters (A29), which the event loop
    /// connects with.
    transports: crate::control::transports::Transports,
}

/// A panic's message, if it has one.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned())
}

/// Drops a resolver, catching a panic of its drop.
fn drop_resolver(resolver: Option<Box<dyn Resolver>>, scheme: &str) {
    if let Err(panic) = catch_unwind(AssertUnwindSafe(move || drop(resolver))) {
        tracing::warn!(scheme, panic = %panic_message(&*panic), "the resolver panicked while stopping");
    }
}

impl Resolution {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        target: ResolverTarget,
        builder: SharedBuilder,
        kind: Kind,
        default_config: Option<ServiceConfig>,
        parse: ParseOptions,
        min_interval: Duration,
        #[cfg(feature = "xds")] inspect: Option<crate::control::resolver_state::Inspect>,
    ) -> Self {
        Resolution {
            target,
            builder,
            kind,
            default_config,
            parse,
            min_interval,
            started: OnceCell::new(),
            running: parking_lot::Mutex::new(Running::default()),
            shut_down: Closed::default(),
            published: Arc::default(),
            #[cfg(feature = "xds")]
            inspect,
            transports: Default::default(),
        }
    }

    /// This resolution with `transports` as its registry of transports (shared with its resolver).
    pub(crate) fn with_transports(
        mut self,
        transports: crate::control::transports::Transports,
    ) -> Self {
        self.transports = transports;
        self
    }

    /// The registry of transports the resolver fills.
    pub(crate) fn transports(&self) -> &crate::control::transports::Transports {
        &self.transports
    }

    fn start(&self) -> Result<Started, Status> {
        let mut running = self.running.lock();
        if running.stopped {
            return Err(Status::new(Code::Unavailable, "the channel is shut down"));
        }
        let closed = Arc::new(Closed::default());
        let (tx, rx) = watch::channel(State::Pending);
        let sink = ResolverSink::new(
            tx,
            self.default_config.clone(),
            self.parse.clone(),
            closed.clone(),
            self.published.clone(),
        );
        let weak = sink.downgrade();
        let scheme = self.target.scheme();
        let built = catch_unwind(AssertUnwindSafe(|| {
            self.builder.0.build(&self.target, sink)
        }));
        let failure = match built {
            Ok(Ok(resolver)) => {
                running.resolver = Some(resolver);
                running.closed = Some(closed);
                running.sink = Some(weak);
                return Ok(Started { state: rx });
            }
            Ok(Err(e)) => format!("the {scheme} resolver could not start: {e}"),
            Err(panic) => format!(
                "the {scheme} resolver panicked while starting: {}",
                panic_message(&*panic)
            ),
        };
        // Whatever it spawned before failing is told to stop.
        closed.close();
        Err(Status::new(Code::Unavailable, failure))
    }

    /// Stops the resolver for good (`Channel::close`): it is dropped (a DNS resolver asks no more, a
    /// query in flight ends first; an `xds:` resolver's task stops and drops its watches), its sinks say
    /// the channel is closed, and none starts afterwards. Calls still waiting for a first result fail
    /// UNAVAILABLE.
    pub(crate) fn stop(&self) {
        let (resolver, closed) = {
            let mut running = self.running.lock();
            running.stopped = true;
            running.sink = None;
            if let Some(task) = running.deferred_task.take() {
                task.abort();
            }
            (running.resolver.take(), running.closed.take())
        };
        self.shut_down.close();
        if let Some(closed) = closed {
            closed.close();
        }
        // Dropped outside the lock.
        drop_resolver(resolver, self.target.scheme());
    }

    /// Counts the results published: read while the state is borrowed, it is the count of that state.
    pub(crate) fn published(&self) -> Arc<PublishCount> {
        self.published.clone()
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
        let mut state = self.subscribe().await?;
        let shut_down = || Status::new(Code::Unavailable, "the channel is shut down");
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
                    if self.shut_down.is_closed() {
                        return Err(shut_down());
                    }
                    // A sink a resolver's task still holds does not keep calls waiting after `close()`.
                    let changed = tokio::select! {
                        changed = state.changed() => changed,
                        () = self.shut_down.wait() => return Err(shut_down()),
                    };
                    if changed.is_err() {
                        return Err(Status::new(
                            Code::Unavailable,
                            format!(
                                "name resolution stopped: the {} resolver ended without a result",
                                self.target.scheme()
                            ),
                        ));
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

    /// `look` applied to what the xDS resolver shows, while it runs (started, not stopped).
    #[cfg(feature = "xds")]
    pub(crate) fn with_external<T>(
        &self,
        look: impl FnOnce(&(dyn std::any::Any + Send + Sync)) -> Option<T>,
    ) -> Option<T> {
        let running = self.running.lock();
        running.resolver.as_ref()?;
        let inspect = self.inspect.as_ref()?.lock();
        look(inspect.as_deref()?)
    }

    /// The resolver's error, while its state is a failure (it started, and reported an error since its
    /// last result): what a call that waited for resolution quotes when its deadline passes.
    pub(crate) fn last_error(&self) -> Option<Status> {
        let started = self.started.get()?;
        let state = started.state.borrow();
        match &*state {
            State::Failed(status) => Some(status.clone()),
            State::Ready { .. } | State::Pending => None,
        }
    }

    /// Whether a ResolveNow request brings a fresh result (a running DNS resolver), so that the channel
    /// leaving IDLE waits for it.
    pub(crate) fn has_resolver(&self) -> bool {
        self.kind == Kind::Dns && self.running.lock().resolver.is_some()
    }

    /// Asks the resolver for a fresh resolution: at most once per minimum interval (a request inside it is
    /// deferred to its end; more collapse into that one), except for the DNS resolver, which limits
    /// requests itself.
    pub(crate) fn resolve_now(self: &Arc<Self>) {
        let now = Instant::now();
        let at = {
            let mut running = self.running.lock();
            if running.resolver.is_none() {
                return;
            }
            let due = match (self.kind, running.last_resolve_now) {
                (Kind::Dns, _) | (_, None) => Some(now),
                // An interval too large for an `Instant` (`Duration::MAX`) means "never again".
                (Kind::Plain, Some(last)) => last.checked_add(self.min_interval),
            };
            let Some(due) = due else {
                return;
            };
            if due <= now {
                running.last_resolve_now = Some(now);
                None
            } else if running.deferred {
                return;
            } else {
                running.deferred = true;
                Some(due)
            }
        };
        match at {
            None => self.pass_resolve_now(),
            Some(at) => {
                let weak: Weak<Resolution> = Arc::downgrade(self);
                let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                    return;
                };
                let task = runtime.spawn(async move {
                    tokio::time::sleep_until(at).await;
                    if let Some(resolution) = weak.upgrade() {
                        {
                            let mut running = resolution.running.lock();
                            running.deferred = false;
                            running.last_resolve_now = Some(Instant::now());
                        }
                        resolution.pass_resolve_now();
                    }
                });
                let mut running = self.running.lock();
                if running.stopped {
                    task.abort();
                } else {
                    // The one before has run (only one is deferred at a time): its handle goes.
                    running.deferred_task = Some(task);
                }
            }
        }
    }

    /// Calls the resolver's `resolve_now`; a panic drops the resolver (the channel keeps its last
    /// endpoints; before any, calls fail UNAVAILABLE).
    fn pass_resolve_now(&self) {
        let mut running = self.running.lock();
        let Some(resolver) = running.resolver.as_mut() else {
            return;
        };
        let Err(panic) = catch_unwind(AssertUnwindSafe(|| resolver.resolve_now())) else {
            return;
        };
        let message = format!(
            "the {} resolver panicked: {}",
            self.target.scheme(),
            panic_message(&*panic)
        );
        tracing::warn!(%message, "dropping the resolver");
        let resolver = running.resolver.take();
        let closed = running.closed.take();
        let sink = running.sink.take().and_then(|s| s.upgrade());
        drop(running);
        if let Some(sink) = sink {
            sink.report_error(&message);
        }
        if let Some(closed) = closed {
            closed.close();
        }
        drop_resolver(resolver, self.target.scheme());
    }
}

impl Drop for Resolution {
    fn drop(&mut self) {
        self.stop();
    }
}
