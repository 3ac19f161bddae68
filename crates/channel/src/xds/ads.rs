//! The ADS stream to one xDS management server (gRFC A27), shared by every channel of the process that
//! names the same server and node in its bootstrap. A task runs grpc-xds's sans-IO [`XdsClient`] over this
//! crate's own [`Channel`] to the server (with its connection backoff, keepalive and TLS): it opens
//! `StreamAggregatedResources` once the channel is READY, hands each response's resources to
//! [`grpc_xds::resource::decode_response_with`] (on tokio's blocking pool, so a large response never holds up
//! the runtime's other tasks and timers; the task waits for it, so responses are handled in order),
//! sends the ACKs, NACKs and subscription changes the client asks for, and fires the does-not-exist
//! timers. Nothing in the loop waits on the server: a stream opens, and its
//! requests are written (by a writer task behind a queue of four), while the task goes on taking
//! watches, reading responses and firing timers; requests the queue has no room for wait in the sans-IO
//! client, folded per type. A stream that could not start (the server unreachable) counts as
//! one that ended before any response: every watcher gets the error and the next try waits for the
//! backoff.
//!
//! Watchers ([`ResourceWatch`]) see the latest state of their resource in a one-value slot, so a control
//! plane flooding updates costs one slot per watch, never a queue. The task ends when the last
//! [`AdsClient`] handle is dropped. The client's state sits behind a mutex the task takes only between
//! its awaits, so [`AdsClient::dump`] reads it at once (for `Channel::xds_resources`), even while the
//! task waits for the server. Not here: fallback to the bootstrap's next server (A71), xDS
//! credentials (the channel credentials are `insecure` or TLS with the platform roots).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};

use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use grpc_retry::SplitMix64;
use grpc_xds::resource::{decode_response_with, DecodeContext, Resource, ResourceType};
use grpc_xds::{
    discovery_request, node_proto, Bootstrap, ChannelCreds, Decoded, ResourceDump, UserAgent,
    WatchEvent, WatchId, XdsClient, XdsServer,
};
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

use crate::call::{RequestSender, Streaming};
use crate::channel::Channel;
use crate::conn::tls::TlsConfig;
use crate::request::Request;
use crate::wire::status::Status;

/// The ADS method.
const ADS_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";

/// What a watcher knows of its resource.
#[derive(Clone, Debug, Default)]
pub(crate) struct WatchState {
    /// The value in use, if any.
    pub(crate) value: Option<Arc<Resource>>,
    /// The last error (ambient while `value` is set).
    pub(crate) error: Option<String>,
    /// The resource does not exist.
    pub(crate) does_not_exist: bool,
}

enum Command {
    Watch {
        key: u64,
        resource_type: ResourceType,
        name: String,
        slot: watch::Sender<WatchState>,
        notify: Arc<Notify>,
    },
    Unwatch(u64),
}

type SharedClient = Arc<Mutex<XdsClient<Resource>>>;

/// A handle on the shared ADS stream to one server.
pub(crate) struct AdsClient {
    commands: mpsc::UnboundedSender<Command>,
    next_key: Mutex<u64>,
    /// The server's URI, as the bootstrap gives it.
    server_uri: String,
    client: SharedClient,
}

impl std::fmt::Debug for AdsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdsClient")
            .field("server_uri", &self.server_uri)
            .finish_non_exhaustive()
    }
}

/// One watch of a resource; dropping it unwatches.
pub(crate) struct ResourceWatch {
    key: u64,
    commands: mpsc::UnboundedSender<Command>,
    state: watch::Receiver<WatchState>,
}

impl ResourceWatch {
    /// The state now.
    pub(crate) fn state(&self) -> WatchState {
        self.state.borrow().clone()
    }

    /// Waits for the state to change; `false` once the ADS task is gone.
    #[cfg(test)]
    pub(crate) async fn changed(&mut self) -> bool {
        self.state.changed().await.is_ok()
    }
}

impl Drop for ResourceWatch {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Unwatch(self.key));
    }
}

type Registry = Mutex<Vec<(String, Weak<AdsClient>)>>;

fn registry() -> &'static Registry {
    static REGISTRY: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(Registry::default)
}

impl AdsClient {
    /// The ADS stream to the bootstrap's (first) server, shared with every other channel of the process
    /// using the same server and node; started here if none runs. Must be called inside a tokio runtime.
    pub(crate) fn shared(bootstrap: &Bootstrap) -> Result<Arc<AdsClient>, Status> {
        let server = bootstrap
            .xds_servers
            .first()
            .ok_or_else(|| Status::unavailable("the xDS bootstrap names no server"))?;
        // The certificate provider names are part of the key: they decide which Clusters are valid.
        let context = Arc::new(DecodeContext::from_bootstrap(bootstrap));
        let key = format!(
            "{server:?} {:?} {:?}",
            bootstrap.node, context.certificate_providers
        );
        let mut registry = registry().lock();
        // Entries whose clients are gone, or whose task ended (a panic), go; a live one is shared.
        registry.retain(|(_, weak)| weak.upgrade().is_some_and(|c| !c.commands.is_closed()));
        if let Some(client) = registry
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, w)| w.upgrade())
        {
            return Ok(client);
        }
        let channel = server_channel(server)?;
        let node = node_proto(
            &bootstrap.node,
            &UserAgent {
                name: "grpc-rust-channel".to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
            },
        );
        let (commands, receiver) = mpsc::unbounded_channel();
        let seed = crate::control::clock_seed();
        let xds_client: SharedClient = Arc::new(Mutex::new(XdsClient::new(
            server.server_features,
            Instant::now().into_std(),
            Box::new(SplitMix64::new(seed)),
        )));
        let client = Arc::new(AdsClient {
            commands,
            next_key: Mutex::new(0),
            server_uri: server.server_uri.clone(),
            client: xds_client.clone(),
        });
        tokio::spawn(run(channel, node, context, xds_client, Commands(receiver)));
        registry.push((key, Arc::downgrade(&client)));
        Ok(client)
    }

    /// The management server's URI.
    pub(crate) fn server_uri(&self) -> &str {
        &self.server_uri
    }

    /// Every resource the client subscribes to (for every channel sharing it), as the sans-IO client
    /// reports them; its times are on tokio's clock.
    pub(crate) fn dump(&self) -> Vec<ResourceDump> {
        self.client.lock().dump()
    }

    /// Watches `name` of `resource_type`; `notify` is woken on each change of its state (one `Notify` can
    /// serve many watches).
    pub(crate) fn watch(
        &self,
        resource_type: ResourceType,
        name: &str,
        notify: Arc<Notify>,
    ) -> ResourceWatch {
        let key = {
            let mut next = self.next_key.lock();
            *next += 1;
            *next
        };
        let (slot, state) = watch::channel(WatchState::default());
        let sent = self.commands.send(Command::Watch {
            key,
            resource_type,
            name: name.to_owned(),
            slot,
            notify,
        });
        if let Err(mpsc::error::SendError(Command::Watch { slot, notify, .. })) = sent {
            task_ended(&slot, &notify);
        }
        ResourceWatch {
            key,
            commands: self.commands.clone(),
            state,
        }
    }
}

/// The channel to the management server, per its credentials.
fn server_channel(server: &XdsServer) -> Result<Channel, Status> {
    // Keepalive (grpc-go's for its xDS channel: 5 minutes, 20 s to answer) notices a stream a NAT or a
    // vanished server left silent, so it restarts instead of waiting for updates that never come.
    let mut builder = Channel::builder(server.server_uri.clone())
        .service_config_lookup(false)
        .keepalive_time(std::time::Duration::from_secs(300))
        .keepalive_timeout(std::time::Duration::from_secs(20));
    if let ChannelCreds::Tls(_) = server.channel_creds {
        builder = builder.tls(TlsConfig::new());
    }
    builder.build().map_err(|e| {
        Status::unavailable(format!(
            "cannot reach the xDS server {:?}: {e}",
            server.server_uri
        ))
    })
}

/// The capacity of a stream's request queue. Requests wait in the sans-IO client (which folds them, one
/// per type) rather than here, so a server slow to read costs no memory.
const REQUEST_QUEUE: usize = 4;

/// An ADS stream: requests go out through a writer task, so a server slow to read them never stops this
/// task from reading responses, taking watches and firing timers.
struct Stream {
    requests: mpsc::Sender<DiscoveryRequest>,
    responses: Streaming<DiscoveryResponse>,
    /// Each request the writer has actually sent (its type and names), for A57's timers.
    sent: mpsc::UnboundedReceiver<(String, Vec<String>)>,
    writer: tokio::task::JoinHandle<()>,
}

/// The task's ADS stream through its life cycle: waiting (for the client's backoff and a watch), being
/// opened, open; it waits again when opening fails or the open stream ends.
// One per ADS task, as large as the `Option<Stream>` it replaces.
#[allow(clippy::large_enum_variant)]
enum AdsStream {
    /// No stream: the next opens at the client's next stream start, once a watch exists.
    Waiting,
    /// A stream being opened.
    Opening(Opening),
    /// The stream.
    Open(Stream),
}

/// What the stream brought.
// Made per event and taken apart at once: boxing the opened halves would cost an allocation per stream.
#[allow(clippy::large_enum_variant)]
enum StreamEvent {
    /// The stream being opened opened, or could not.
    Opened(Result<Opened, Status>),
    Response(Result<Option<DiscoveryResponse>, Status>),
    Sent(String, Vec<String>),
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.writer.abort();
    }
}

/// A stream being opened (the channel getting READY, then the call starting).
type Opening = Pin<Box<dyn Future<Output = Result<Opened, Status>> + Send>>;

/// An opened stream's two halves.
type Opened = (
    RequestSender<DiscoveryRequest>,
    Streaming<DiscoveryResponse>,
);

/// The task's watchers: each watch's slot and wake-up by key, and the key of each of the client's watch
/// ids. Should the task end while watches remain (it only ends by itself once every handle is gone, so
/// that is a panic), dropping this tells each of them: its slot keeps the value it had and gets the
/// error, so a resolver still waiting for a resource fails its channel instead of waiting forever.
#[derive(Default)]
pub(crate) struct Watchers {
    slots: HashMap<u64, (WatchId, watch::Sender<WatchState>, Arc<Notify>)>,
    keys: HashMap<WatchId, u64>,
}

#[cfg(test)]
impl Watchers {
    /// Adds a watch's slot, as the task does for a `Watch` command.
    pub(crate) fn insert(
        &mut self,
        key: u64,
        id: WatchId,
        slot: watch::Sender<WatchState>,
        notify: Arc<Notify>,
    ) {
        self.keys.insert(id, key);
        self.slots.insert(key, (id, slot, notify));
    }
}

/// The task's command queue. Should the task end (or never run: its runtime shut down first), dropping
/// this closes the queue and tells each watch still waiting in it, as [`Watchers`] does for the others.
struct Commands(mpsc::UnboundedReceiver<Command>);

impl Drop for Commands {
    fn drop(&mut self) {
        self.0.close();
        while let Ok(command) = self.0.try_recv() {
            if let Command::Watch { slot, notify, .. } = command {
                task_ended(&slot, &notify);
            }
        }
    }
}

/// The error every remaining watch gets when the task ends.
pub(crate) const TASK_ENDED: &str = "xDS: the ADS client task ended";

impl Drop for Watchers {
    fn drop(&mut self) {
        for (_, slot, notify) in self.slots.values() {
            task_ended(slot, notify);
        }
    }
}

/// Tells a watch the task ended: its slot keeps its value and gets [`TASK_ENDED`]; its owner is woken.
fn task_ended(slot: &watch::Sender<WatchState>, notify: &Notify) {
    slot.send_modify(|state| state.error = Some(TASK_ENDED.to_owned()));
    notify.notify_one();
}

/// The task: the sans-IO client driven over one stream at a time. It locks the client for each step,
/// never across an await.
async fn run(
    channel: Channel,
    node: core::Node,
    context: Arc<DecodeContext>,
    shared: SharedClient,
    mut commands: Commands,
) {
    let mut watchers = Watchers::default();
    let Watchers { slots, keys } = &mut watchers;
    let mut stream = AdsStream::Waiting;
    loop {
        let now = Instant::now().into_std();
        let (queue_full, timer, next_start) = {
            let mut client = shared.lock();
            // Requests go into the stream's queue while it has room; the rest wait in the client.
            let mut queue_full = None;
            let mut closed = false;
            if let AdsStream::Open(open) = &stream {
                loop {
                    match open.requests.try_reserve() {
                        Ok(permit) => match client.next_request() {
                            Some(request) => permit.send(discovery_request(&request, &node)),
                            None => break,
                        },
                        Err(mpsc::error::TrySendError::Full(())) => {
                            queue_full = Some(open.requests.clone());
                            break;
                        }
                        Err(mpsc::error::TrySendError::Closed(())) => {
                            closed = true;
                            break;
                        }
                    }
                }
            }
            if closed {
                client.stream_ended(now, "the ADS stream stopped taking requests");
                stream = AdsStream::Waiting;
            }
            while let Some((id, event)) = client.poll_event() {
                if let Some((_, slot, notify)) = keys.get(&id).and_then(|k| slots.get(k)) {
                    slot.send_modify(|state| apply(state, event));
                    notify.notify_one();
                }
            }
            let timer = client.poll_timeout().map(Instant::from_std);
            let next_start = match &stream {
                AdsStream::Waiting => client.next_stream_start().map(Instant::from_std),
                AdsStream::Opening(_) | AdsStream::Open(_) => None,
            };
            (queue_full, timer, next_start)
        };
        tokio::select! {
            command = commands.0.recv() => match command {
                None => return,
                Some(Command::Watch { key, resource_type, name, slot, notify }) => {
                    let id = shared.lock().watch(resource_type, &name);
                    keys.insert(id, key);
                    slots.insert(key, (id, slot, notify));
                }
                Some(Command::Unwatch(key)) => {
                    if let Some((id, _, _)) = slots.remove(&key) {
                        keys.remove(&id);
                        shared.lock().unwatch(id);
                    }
                }
            },
            event = next_event(&mut stream), if !matches!(stream, AdsStream::Waiting) => {
                let now = Instant::now().into_std();
                let response = match event {
                    StreamEvent::Opened(opened) => {
                        let mut client = shared.lock();
                        client.stream_started(now);
                        stream = match opened {
                            Ok((requests, responses)) => AdsStream::Open(writer(requests, responses)),
                            Err(status) => {
                                client.stream_ended(now, &status.to_string());
                                AdsStream::Waiting
                            }
                        };
                        continue;
                    }
                    StreamEvent::Sent(type_url, names) => {
                        shared.lock().request_sent(&type_url, &names, now);
                        continue;
                    }
                    StreamEvent::Response(response) => response,
                };
                match response {
                    Ok(Some(response)) => {
                        let context = context.clone();
                        let decoded = off_runtime(move || {
                            let resources = decode_resources(&response, &context);
                            (response, resources)
                        })
                        .await;
                        // Only when the runtime shuts down (or decoding panicked): the task ends, and
                        // its watches get the error.
                        let Some((response, resources)) = decoded else {
                            return;
                        };
                        handle_response(&shared, Instant::now().into_std(), response, resources);
                    }
                    Ok(None) => {
                        shared.lock().stream_ended(now, "the server ended the stream");
                        stream = AdsStream::Waiting;
                    }
                    Err(status) => {
                        shared.lock().stream_ended(now, &status.to_string());
                        stream = AdsStream::Waiting;
                    }
                }
            }
            () = room(queue_full), if queue_full.is_some() => {}
            () = sleep_until(timer), if timer.is_some() => {
                shared.lock().handle_timeout(Instant::now().into_std());
            }
            () = sleep_until(next_start), if next_start.is_some() && !slots.is_empty() => {
                stream = AdsStream::Opening(open(channel.clone()));
            }
        }
    }
}

/// Opens a stream once the channel is READY; a failure counts as a stream that ended before any
/// response.
fn open(channel: Channel) -> Opening {
    Box::pin(async move {
        channel.ready().await?;
        channel.streaming(ADS_PATH, Request::new(())).await
    })
}

/// Starts the stream's writer task: it sends the queued requests in order, reports each once it has
/// actually left, and stops at the first the call does not take (the call has ended; its status comes
/// with the responses).
fn writer(
    mut sender: RequestSender<DiscoveryRequest>,
    responses: Streaming<DiscoveryResponse>,
) -> Stream {
    let (requests, mut queue) = mpsc::channel::<DiscoveryRequest>(REQUEST_QUEUE);
    // One report per request, and requests come through a queue of four: bounded by the writer's pace.
    let (reports, sent) = mpsc::unbounded_channel();
    let writer = tokio::spawn(async move {
        while let Some(request) = queue.recv().await {
            let report = (request.type_url.clone(), request.resource_names.clone());
            // A57: the request counts as sent once written within the stream's flow-control window.
            if sender.send(request).await.is_err() || sender.flushed().await.is_err() {
                return;
            }
            if reports.send(report).is_err() {
                return;
            }
        }
    });
    Stream {
        requests,
        responses,
        sent,
        writer,
    }
}

/// Ready once the stream's request queue (`requests`) has room again.
async fn room(requests: Option<mpsc::Sender<DiscoveryRequest>>) {
    match requests {
        // A permit taken and dropped at once: the room stays for the next pass of the loop.
        Some(requests) => drop(requests.reserve().await),
        None => std::future::pending().await,
    }
}

/// The next event of the stream being opened, or of the open stream; never while waiting.
async fn next_event(stream: &mut AdsStream) -> StreamEvent {
    match stream {
        AdsStream::Opening(opening) => StreamEvent::Opened(opening.await),
        AdsStream::Open(open) => {
            let Stream {
                responses, sent, ..
            } = open;
            tokio::select! {
                Some((type_url, names)) = sent.recv() => StreamEvent::Sent(type_url, names),
                response = responses.message() => StreamEvent::Response(response),
            }
        }
        AdsStream::Waiting => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Runs `work` (a response's decoding: protobuf, validation, regex compilation, bounded per response
/// but long for a large RDS or EDS) on tokio's blocking pool, so the runtime's workers, the only one of
/// a current-thread runtime included, go on with other tasks and timers meanwhile (`block_in_place`
/// would not do: it panics on a current-thread runtime). The caller awaits it before anything else, so
/// responses are still handled one at a time, in order. `None` if it could not finish: the runtime is
/// shutting down, or `work` panicked.
pub(crate) async fn off_runtime<T, F>(work: F) -> Option<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    tokio::task::spawn_blocking(work).await.ok()
}

/// The resources of a response, decoded and validated (the sans-IO parse).
fn decode_resources(
    response: &DiscoveryResponse,
    context: &DecodeContext,
) -> Vec<Decoded<Resource>> {
    match ResourceType::from_type_url(&response.type_url) {
        Some(resource_type) => decode_response_with(resource_type, &response.resources, context),
        None => Vec::new(),
    }
}

fn handle_response(
    client: &SharedClient,
    now: std::time::Instant,
    response: DiscoveryResponse,
    decoded: Vec<Decoded<Resource>>,
) {
    client.lock().handle_response(
        now,
        &response.type_url,
        &response.version_info,
        &response.nonce,
        decoded,
    );
}

fn apply(state: &mut WatchState, event: WatchEvent<Resource>) {
    match event {
        WatchEvent::Changed(value) => {
            state.value = Some(value);
            state.error = None;
            state.does_not_exist = false;
        }
        WatchEvent::DoesNotExist => {
            state.value = None;
            state.does_not_exist = true;
        }
        WatchEvent::Error(e) => {
            state.value = None;
            state.error = Some(e);
        }
        WatchEvent::AmbientError(e) => state.error = Some(e),
    }
}
