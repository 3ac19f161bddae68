//! What the control tests of the public resolver and load-balancing APIs share: interop backends on
//! loopback (and two on one port of two loopback addresses behind a DNS name), an endpoint of an address,
//! one call and the server that answered it, calls until a set of servers answered, a channel with a
//! resolver of its own, the service configs that select the built-in policies, a test policy's READY
//! subchannels, connections and reconnection after backoff, and a recording resolver of public items only (`Recording`, with its `Probe`). The test
//! policies stay with the tests that exercise them: each is shaped by what its tests break.

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use grpc_channel::lb::{ConnectivityState, SubchannelId, Subchannels, TimerEvent};
use grpc_channel::resolver::{
    Address, Endpoint, Resolver, ResolverBuilder, ResolverError, ResolverSink, ResolverTarget,
    ResolverUpdate,
};
use grpc_channel::{Channel, Request, Status};
use interop::dns::TestDns;
use interop::server::{self, ServerHandle};
use interop_proto::{paths, SimpleRequest, SimpleResponse};
use parking_lot::Mutex;

/// A service config selecting round_robin.
pub(crate) const ROUND_ROBIN: &str = r#"{"loadBalancingConfig":[{"round_robin":{}}]}"#;
/// A service config selecting pick_first.
pub(crate) const PICK_FIRST: &str = r#"{"loadBalancingConfig":[{"pick_first":{}}]}"#;

/// `n` interop servers on 127.0.0.1, each on a port of its own.
pub(crate) async fn backends(n: usize) -> Vec<ServerHandle> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(
            server::start("127.0.0.1:0".parse().expect("addr"))
                .await
                .expect("server"),
        );
    }
    out
}

/// Two interop servers on one port of 127.0.0.1 and 127.0.0.2, and a DNS server on loopback that names
/// only the first as `svc.test` (with `service_config`, if any, in its TXT record): a backend to move.
pub(crate) async fn two_loopbacks_one_name(
    service_config: Option<&str>,
) -> (ServerHandle, ServerHandle, TestDns) {
    let first = server::start("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("server");
    let second = server::start(SocketAddr::from((
        Ipv4Addr::new(127, 0, 0, 2),
        first.addr.port(),
    )))
    .await
    .expect("second loopback address");
    let dns = TestDns::start().await.expect("dns");
    dns.add_a("svc.test", Ipv4Addr::new(127, 0, 0, 1)).await;
    if let Some(config) = service_config {
        dns.set_service_config("svc.test", &format!(r#"[{{"serviceConfig":{config}}}]"#))
            .await;
    }
    (first, second, dns)
}

/// The endpoint of one TCP address.
pub(crate) fn endpoint(addr: SocketAddr) -> Endpoint {
    Endpoint::new(Address::Tcp(addr))
}

/// A channel to `target` with `resolver` registered on it.
pub(crate) fn channel_with(target: impl Into<String>, resolver: impl ResolverBuilder) -> Channel {
    Channel::builder(target)
        .resolver(resolver)
        .build()
        .expect("channel")
}

/// One call with no deadline of its own; the server that answered it.
pub(crate) async fn which(ch: &Channel) -> Result<String, Status> {
    server_id(ch, None).await
}

/// One call with a `deadline`; the server that answered it.
pub(crate) async fn which_within(ch: &Channel, deadline: Duration) -> Result<String, Status> {
    server_id(ch, Some(deadline)).await
}

async fn server_id(ch: &Channel, deadline: Option<Duration>) -> Result<String, Status> {
    let req = SimpleRequest {
        fill_server_id: true,
        ..Default::default()
    };
    let mut req = Request::new(req);
    if let Some(d) = deadline {
        req = req.with_timeout(d);
    }
    let r = ch
        .unary::<_, SimpleResponse>(paths::UNARY_CALL, req)
        .await?;
    Ok(r.into_message().server_id)
}

/// Calls (each with `deadline`, if any) until every server in `want` answered (bounded).
pub(crate) async fn until_all(ch: &Channel, want: &[SocketAddr], deadline: Option<Duration>) {
    let want: HashSet<String> = want.iter().map(ToString::to_string).collect();
    let mut seen = HashSet::new();
    for _ in 0..500 {
        if let Ok(id) = server_id(ch, deadline).await {
            seen.insert(id);
        }
        if want.is_subset(&seen) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never reached all of {want:?}: {seen:?}");
}

/// The READY subchannels among `ids`, in order, each with its address: a custom picker's list.
pub(crate) fn ready_with_addresses(
    subs: &Subchannels,
    ids: &[SubchannelId],
) -> Vec<(SubchannelId, Address)> {
    ids.iter()
        .filter(|id| subs.state(**id) == ConnectivityState::Ready)
        .filter_map(|id| subs.get(*id).map(|s| (*id, s.address().clone())))
        .collect()
}

/// Starts connecting every subchannel of `ids`.
pub(crate) fn connect_all(subs: &mut Subchannels, ids: &[SubchannelId], now: std::time::Instant) {
    for id in ids {
        subs.connect(*id, now);
    }
}

/// What a test policy does on a timer: connects again each subchannel whose backoff is over.
pub(crate) fn reconnect_after_backoff(subs: &mut Subchannels, now: std::time::Instant) {
    for event in subs.handle_timeout(now) {
        if let TimerEvent::BackoffOver(id) = event {
            subs.connect(id, now);
        }
    }
}

/// What a recording resolver saw, and the sink it was given.
#[derive(Default)]
pub(crate) struct Probe {
    /// `build` calls.
    pub builds: AtomicUsize,
    /// `resolve_now` calls.
    pub resolve_now: AtomicUsize,
    /// Resolvers dropped.
    pub drops: AtomicUsize,
    /// Resolvers and tasks they spawned that are still alive.
    pub live: AtomicIsize,
    /// The sink of the last resolver built (none for `Vanish`, `FailBuild` and `PanicInBuild`).
    pub sink: Mutex<Option<ResolverSink>>,
    /// The target of the last `build`.
    pub target: Mutex<Option<ResolverTarget>>,
}

impl Probe {
    /// The sink of the resolver built; panics if none was.
    pub(crate) fn sink(&self) -> ResolverSink {
        self.sink.lock().clone().expect("the resolver was built")
    }
}

/// What a recording resolver does once built.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Behaviour {
    /// Publishes `first` at once, keeps the sink for the test, spawns a task that lives until the sink
    /// says the channel is gone.
    Publish,
    /// `build` returns an error (the target is recorded first).
    FailBuild,
    /// Panics in `build`.
    PanicInBuild,
    /// Publishes like `Publish`, then panics in `resolve_now` and in its drop.
    PanicLater,
    /// Drops its sink without any update.
    Vanish,
}

/// A resolver builder of public items only: publishes `first` (if any) with `config`, keeps its sink,
/// spawns a task that lives until the sink says the channel is gone, counts everything in its `Probe`.
pub(crate) struct Recording {
    scheme: &'static str,
    first: Vec<Endpoint>,
    config: Option<&'static str>,
    behaviour: Behaviour,
    probe: Arc<Probe>,
}

impl Recording {
    /// A builder for `scheme` publishing `first`, and its probe.
    pub(crate) fn new(scheme: &'static str, first: Vec<Endpoint>) -> (Recording, Arc<Probe>) {
        let probe = Arc::new(Probe::default());
        (
            Recording {
                scheme,
                first,
                config: None,
                behaviour: Behaviour::Publish,
                probe: probe.clone(),
            },
            probe,
        )
    }

    /// The builder, behaving as `behaviour`.
    pub(crate) fn behaving(mut self, behaviour: Behaviour) -> Self {
        self.behaviour = behaviour;
        self
    }

    /// The builder, publishing the service config `json` with `first`.
    pub(crate) fn config(mut self, json: &'static str) -> Self {
        self.config = Some(json);
        self
    }
}

/// A resolver `Recording` built.
struct Running {
    probe: Arc<Probe>,
    behaviour: Behaviour,
}

impl Resolver for Running {
    fn resolve_now(&mut self) {
        self.probe.resolve_now.fetch_add(1, Ordering::SeqCst);
        if self.behaviour == Behaviour::PanicLater {
            panic!("resolve_now blew up");
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.probe.drops.fetch_add(1, Ordering::SeqCst);
        self.probe.live.fetch_sub(1, Ordering::SeqCst);
        if self.behaviour == Behaviour::PanicLater {
            panic!("drop blew up");
        }
    }
}

impl ResolverBuilder for Recording {
    fn scheme(&self) -> &str {
        self.scheme
    }

    fn build(
        &self,
        target: &ResolverTarget,
        sink: ResolverSink,
    ) -> Result<Box<dyn Resolver>, ResolverError> {
        self.probe.builds.fetch_add(1, Ordering::SeqCst);
        *self.probe.target.lock() = Some(target.clone());
        let running = || {
            Box::new(Running {
                probe: self.probe.clone(),
                behaviour: self.behaviour,
            })
        };
        match self.behaviour {
            Behaviour::FailBuild => {
                return Err(ResolverError::Other("recorded the target".to_owned()))
            }
            Behaviour::PanicInBuild => panic!("build blew up"),
            Behaviour::Vanish => {
                self.probe.live.fetch_add(1, Ordering::SeqCst);
                drop(sink);
                return Ok(running());
            }
            Behaviour::Publish | Behaviour::PanicLater => {}
        }
        if !self.first.is_empty() {
            let mut update = ResolverUpdate::new(self.first.clone());
            if let Some(c) = self.config {
                update = update.with_service_config(c);
            }
            let _ = sink.update(update);
        }
        // A task of the resolver's own, ending when the channel is gone.
        self.probe.live.fetch_add(2, Ordering::SeqCst);
        let (task_sink, task_probe) = (sink.clone(), self.probe.clone());
        tokio::spawn(async move {
            task_sink.closed().await;
            task_probe.live.fetch_sub(1, Ordering::SeqCst);
        });
        *self.probe.sink.lock() = Some(sink);
        Ok(running())
    }
}
