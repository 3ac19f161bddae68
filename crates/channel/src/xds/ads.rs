//! The ADS streams to the bootstrap's xDS management servers (gRFC A27), shared by every channel of the
//! process that names the same servers and node in its bootstrap. A task runs one grpc-xds sans-IO
//! [`XdsClient`] per server in use over this crate's own [`Channel`] to that server (with its
//! connection backoff, keepalive and TLS): it opens `StreamAggregatedResources` once the channel is
//! READY, hands each response's resources to [`grpc_xds::resource::decode_response_with`] (with the bootstrap's
//! certificate provider names) (on tokio's
//! blocking pool, so a large response never holds up the runtime's other tasks and timers; the task
//! waits for it, so responses are handled in order), sends the ACKs, NACKs and subscription changes the
//! client asks for, and fires the does-not-exist timers. Nothing in the loop waits on a server: a stream
//! opens, and its requests are written (by a writer task behind a queue of four), while the task goes on
//! taking watches, reading responses and firing timers; requests the queue has no room for wait in the
//! sans-IO client, folded per type. A stream that could not start (the server unreachable) counts as
//! one that ended before any response: the next try waits for the backoff.
//!
//! A71 fallback (shared/spec/turn4.md §4.3): grpc-xds's [`ServerChoice`] says which server the watchers
//! get their resources from. The first server is used; when the server in use fails (its channel is
//! not READY, or its stream ends before any response) while a watched resource is not cached, the task
//! connects to the next one and subscribes everything there; all cached, it stays on the cache.
//! Higher-priority servers keep retrying, and the first response from one switches back to it and
//! closes the lower-priority servers' streams and channels. Watchers get connectivity errors only when
//! every server failed. At most [`grpc_xds::MAX_XDS_SERVERS`] servers.
//!
//! A65: `tls` channel creds give the server's channel a [`TlsConfig`] with the CA file's roots (the
//! platform's without one) and the client certificate and key (mTLS), read when that channel is built;
//! a stream opening `refresh_interval` or more after that gets a new channel, which reads them again
//! (an open stream keeps its connection). `unix:` server URIs are the channel's own `unix:` targets.
//!
//! Watchers ([`ResourceWatch`]) see the latest state of their resource in a one-value slot, so a control
//! plane flooding updates costs one slot per watch, never a queue. The task ends when the last
//! [`AdsClient`] handle is dropped, dropping every server's stream and channel. The clients' state sits
//! behind a mutex the task takes only between its awaits, so [`AdsClient::dump`] reads it at once (for
//! `Channel::xds_resources`, with the URI of the server in use), even while the task waits for a server.
//! Not here: per-authority server lists (authorities use the top-level list).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};

use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use grpc_retry::SplitMix64;
use grpc_xds::resource::{decode_response_with, DecodeContext, Resource, ResourceType};
use grpc_xds::{
    discovery_request, node_proto, Bootstrap, CertificateFiles, ChannelCreds, Decoded,
    ResourceDump, ServerChoice, Switch, UserAgent, WatchEvent, WatchId, XdsClient, XdsServer,
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

/// One server's sans-IO client and the watches it holds.
struct ServerClient {
    client: XdsClient<Resource>,
    /// The client's watch id of each watcher key, and back.
    ids: HashMap<u64, WatchId>,
    keys: HashMap<WatchId, u64>,
}

impl ServerClient {
    /// A client for `server`, watching every resource `watchers` watch.
    fn new(server: &XdsServer, now: std::time::Instant, watchers: &Watchers) -> ServerClient {
        let seed = crate::control::clock_seed();
        let mut client = ServerClient {
            client: XdsClient::new(server.server_features, now, Box::new(SplitMix64::new(seed))),
            ids: HashMap::new(),
            keys: HashMap::new(),
        };
        for (key, watch) in &watchers.slots {
            client.watch(*key, watch.resource_type, &watch.name);
        }
        client
    }

    fn watch(&mut self, key: u64, resource_type: ResourceType, name: &str) {
        let id = self.client.watch(resource_type, name);
        self.ids.insert(key, id);
        self.keys.insert(id, key);
    }

    fn unwatch(&mut self, key: u64) {
        if let Some(id) = self.ids.remove(&key) {
            self.keys.remove(&id);
            self.client.unwatch(id);
        }
    }
}

/// The clients of the servers in use and the choice among them (A71), behind the mutex
/// [`AdsClient::dump`] reads.
struct ClientState {
    choice: ServerChoice,
    /// Each server's URI.
    uris: Vec<String>,
    /// Each server's client while it is in use.
    servers: Vec<Option<ServerClient>>,
}

impl ClientState {
    /// Hands every client's events to the watchers: only the current server's, and of those no error
    /// while [`ServerChoice::errors_withheld`] (a server to fall back to is left).
    fn deliver(&mut self, watchers: &Watchers) {
        let current = self.choice.current();
        let withheld = self.choice.errors_withheld();
        for (i, server) in self.servers.iter_mut().enumerate() {
            let Some(server) = server else { continue };
            while let Some((id, event)) = server.client.poll_event() {
                let error = matches!(event, WatchEvent::Error(_) | WatchEvent::AmbientError(_));
                if i != current || (error && withheld) {
                    continue;
                }
                if let Some(watch) = server.keys.get(&id).and_then(|k| watchers.slots.get(k)) {
                    watch.slot.send_modify(|state| apply(state, event));
                    watch.notify.notify_one();
                }
            }
        }
    }
}

type SharedClient = Arc<Mutex<ClientState>>;

/// A handle on the shared ADS stream to the bootstrap's servers.
pub(crate) struct AdsClient {
    commands: mpsc::UnboundedSender<Command>,
    next_key: Mutex<u64>,
    client: SharedClient,
}

impl std::fmt::Debug for AdsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdsClient")
            .field("server_uri", &self.server_uri())
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
    /// The ADS stream to the bootstrap's servers (the first, then others as A71 falls back), shared
    /// with every other channel of the process using the same servers and node; started here if none
    /// runs. Must be called inside a tokio runtime.
    pub(crate) fn shared(bootstrap: &Bootstrap) -> Result<Arc<AdsClient>, Status> {
        let servers = &bootstrap.xds_servers;
        let choice =
            ServerChoice::new(servers.len()).map_err(|e| Status::unavailable(e.to_string()))?;
        // The certificate provider names are part of the key: they decide which Clusters are valid.
        let context = Arc::new(DecodeContext::from_bootstrap(bootstrap));
        let key = format!(
            "{servers:?} {:?} {:?}",
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
        let channel = server_channel(&servers[0])?;
        let node = node_proto(
            &bootstrap.node,
            &UserAgent {
                name: "grpc-rust-channel".to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
            },
        );
        let (commands, receiver) = mpsc::unbounded_channel();
        let mut clients: Vec<Option<ServerClient>> = servers.iter().map(|_| None).collect();
        clients[0] = Some(ServerClient::new(
            &servers[0],
            Instant::now().into_std(),
            &Watchers::default(),
        ));
        let state: SharedClient = Arc::new(Mutex::new(ClientState {
            choice,
            uris: servers.iter().map(|s| s.server_uri.clone()).collect(),
            servers: clients,
        }));
        let client = Arc::new(AdsClient {
            commands,
            next_key: Mutex::new(0),
            client: state.clone(),
        });
        tokio::spawn(run(
            servers.clone(),
            channel,
            Instant::now(),
            node,
            context,
            state,
            Commands(receiver),
        ));
        registry.push((key, Arc::downgrade(&client)));
        Ok(client)
    }

    /// The URI of the management server resources come from now (A71: the first reachable one).
    pub(crate) fn server_uri(&self) -> String {
        let state = self.client.lock();
        state.uris[state.choice.current()].clone()
    }

    /// Every resource the client subscribes to (for every channel sharing it), as the sans-IO client of
    /// the server in use reports them; its times are on tokio's clock.
    pub(crate) fn dump(&self) -> Vec<ResourceDump> {
        let state = self.client.lock();
        state.servers[state.choice.current()]
            .as_ref()
            .map(|s| s.client.dump())
            .unwrap_or_default()
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

/// The channel to a management server, per its credentials: A65's `tls` reads the CA file (the
/// platform's roots without one) and the client certificate and key (mTLS) when the channel is built,
/// so a fallback server's files are read when the client falls back to it. An unreadable or invalid
/// file fails the build, with a status naming it.
fn server_channel(server: &XdsServer) -> Result<Channel, Status> {
    // Keepalive (grpc-go's for its xDS channel: 5 minutes, 20 s to answer) notices a stream a NAT or a
    // vanished server left silent, so it restarts instead of waiting for updates that never come.
    let mut builder = Channel::builder(server.server_uri.clone())
        .service_config_lookup(false)
        .keepalive_time(std::time::Duration::from_secs(300))
        .keepalive_timeout(std::time::Duration::from_secs(20));
    if let ChannelCreds::Tls(files) = &server.channel_creds {
        builder = builder.tls(tls_config(files));
    }
    builder.build().map_err(|e| {
        Status::unavailable(format!(
            "cannot reach the xDS server {:?}: {e}",
            server.server_uri
        ))
    })
}

/// A65: the TLS configuration of `tls` channel creds.
fn tls_config(files: &CertificateFiles) -> TlsConfig {
    let mut tls = TlsConfig::new();
    if let Some(ca) = &files.ca_certificate_file {
        tls = tls.ca_certificate_file(ca.clone());
    }
    if let (Some(cert), Some(key)) = (&files.certificate_file, &files.private_key_file) {
        tls = tls.identity_files(cert.clone(), key.clone());
    }
    tls
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

/// A watch the task holds: what it watches, its slot and its wake-up.
pub(crate) struct WatchSlot {
    resource_type: ResourceType,
    name: String,
    slot: watch::Sender<WatchState>,
    notify: Arc<Notify>,
}

/// The task's watchers: each watch by key (each server's client maps its own watch ids to these keys).
/// Should the task end while watches remain (it only ends by itself once every handle is gone, so that
/// is a panic), dropping this tells each of them: its slot keeps the value it had and gets the error, so
/// a resolver still waiting for a resource fails its channel instead of waiting forever.
#[derive(Default)]
pub(crate) struct Watchers {
    slots: HashMap<u64, WatchSlot>,
}

impl Watchers {
    /// Adds a watch's slot, as the task does for a `Watch` command.
    pub(crate) fn insert(
        &mut self,
        key: u64,
        resource_type: ResourceType,
        name: &str,
        slot: watch::Sender<WatchState>,
        notify: Arc<Notify>,
    ) {
        self.slots.insert(
            key,
            WatchSlot {
                resource_type,
                name: name.to_owned(),
                slot,
                notify,
            },
        );
    }

    /// A71's "cached": every watched resource has a value, or is known not to exist.
    fn all_cached(&self) -> bool {
        self.slots.values().all(|w| {
            let state = w.slot.borrow();
            state.value.is_some() || state.does_not_exist
        })
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
        for watch in self.slots.values() {
            task_ended(&watch.slot, &watch.notify);
        }
    }
}

/// Tells a watch the task ended: its slot keeps its value and gets [`TASK_ENDED`]; its owner is woken.
fn task_ended(slot: &watch::Sender<WatchState>, notify: &Notify) {
    slot.send_modify(|state| state.error = Some(TASK_ENDED.to_owned()));
    notify.notify_one();
}

/// The task's I/O with one server: its channel (built when the server comes into use; the build's
/// error stands for it if it failed) and its stream.
struct ServerIo {
    channel: Option<Result<Channel, Status>>,
    /// When the channel was built (its TLS files read).
    built: Instant,
    stream: AdsStream,
    /// The open stream got a response (A71: a stream that ends without one is a failure).
    responded: bool,
}

impl ServerIo {
    /// A server not in use: no channel, no stream.
    fn unused() -> ServerIo {
        ServerIo {
            channel: None,
            built: Instant::now(),
            stream: AdsStream::Waiting,
            responded: false,
        }
    }
}

/// Makes a switch of server (A71): a fallback server gets a client watching everything and a channel;
/// a switch back closes the lower-priority servers (dropping their streams and channels) and gives the
/// watchers the restored server's cached values.
fn make_switch(
    switch: Switch,
    state: &mut ClientState,
    io: &mut [ServerIo],
    servers: &[XdsServer],
    watchers: &Watchers,
) {
    match switch {
        Switch::FallBack { to } => {
            tracing::debug!(server = %servers[to].server_uri, "xDS: falling back to the next management server");
            state.servers[to] = Some(ServerClient::new(
                &servers[to],
                Instant::now().into_std(),
                watchers,
            ));
            io[to] = ServerIo {
                channel: Some(server_channel(&servers[to])),
                built: Instant::now(),
                stream: AdsStream::Waiting,
                responded: false,
            };
        }
        Switch::Restore { to, close } => {
            tracing::debug!(server = %servers[to].server_uri, "xDS: back to a higher-priority management server");
            for k in close {
                state.servers[k] = None;
                io[k] = ServerIo::unused();
            }
            if let Some(server) = &state.servers[to] {
                for watch in watchers.slots.values() {
                    if let Some(value) = server.client.cached(watch.resource_type, &watch.name) {
                        watch
                            .slot
                            .send_modify(|s| apply(s, WatchEvent::Changed(value.clone())));
                        watch.notify.notify_one();
                    }
                }
            }
        }
    }
}

/// Server `i`'s stream (or its opening) ended at `now`: its client is told, and, if it had no
/// response, the choice (which may fall back).
#[allow(clippy::too_many_arguments)]
fn stream_ended(
    i: usize,
    now: std::time::Instant,
    reason: &str,
    state: &mut ClientState,
    io: &mut [ServerIo],
    servers: &[XdsServer],
    watchers: &Watchers,
) {
    let responded = io[i].responded;
    io[i].stream = AdsStream::Waiting;
    io[i].responded = false;
    if let Some(server) = state.servers[i].as_mut() {
        server.client.stream_ended(now, reason);
    }
    if !responded {
        if let Some(switch) = state.choice.failed(i, watchers.all_cached()) {
            make_switch(switch, state, io, servers, watchers);
        }
    }
}

/// The task: each in-use server's sans-IO client driven over one stream at a time, the choice among
/// them (A71) deciding whose resources the watchers get. It locks the clients for each step, never
/// across an await.
async fn run(
    servers: Vec<XdsServer>,
    first: Channel,
    built: Instant,
    node: core::Node,
    context: Arc<DecodeContext>,
    shared: SharedClient,
    mut commands: Commands,
) {
    let mut watchers = Watchers::default();
    let mut io: Vec<ServerIo> = servers.iter().map(|_| ServerIo::unused()).collect();
    io[0].channel = Some(Ok(first));
    io[0].built = built;
    loop {
        let now = Instant::now().into_std();
        let (queue_full, timer, next_start) = {
            let mut guard = shared.lock();
            let state = &mut *guard;
            // Requests go into each stream's queue while it has room; the rest wait in the client.
            let mut queue_full = None;
            for i in 0..io.len() {
                let Some(server) = state.servers[i].as_mut() else {
                    continue;
                };
                let mut closed = false;
                if let AdsStream::Open(open) = &io[i].stream {
                    loop {
                        match open.requests.try_reserve() {
                            Ok(permit) => match server.client.next_request() {
                                Some(request) => permit.send(discovery_request(&request, &node)),
                                None => break,
                            },
                            Err(mpsc::error::TrySendError::Full(())) => {
                                queue_full = queue_full.or_else(|| Some(open.requests.clone()));
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
                    let reason = "the ADS stream stopped taking requests";
                    stream_ended(i, now, reason, state, &mut io, &servers, &watchers);
                }
            }
            state.deliver(&watchers);
            let timer = state
                .servers
                .iter()
                .flatten()
                .filter_map(|s| s.client.poll_timeout())
                .min()
                .map(Instant::from_std);
            let next_start = state
                .servers
                .iter()
                .zip(&io)
                .filter(|(_, io)| matches!(io.stream, AdsStream::Waiting))
                .filter_map(|(s, _)| s.as_ref()?.client.next_stream_start())
                .min()
                .map(Instant::from_std);
            (queue_full, timer, next_start)
        };
        tokio::select! {
            command = commands.0.recv() => match command {
                None => return,
                Some(Command::Watch { key, resource_type, name, slot, notify }) => {
                    let mut guard = shared.lock();
                    let state = &mut *guard;
                    for server in state.servers.iter_mut().flatten() {
                        server.watch(key, resource_type, &name);
                    }
                    watchers.insert(key, resource_type, &name, slot, notify);
                    // A watch the cache lacks while the server in use fails: A71 falls back.
                    if let Some(switch) = state.choice.check(watchers.all_cached()) {
                        make_switch(switch, state, &mut io, &servers, &watchers);
                    }
                }
                Some(Command::Unwatch(key)) => {
                    if watchers.slots.remove(&key).is_some() {
                        for server in shared.lock().servers.iter_mut().flatten() {
                            server.unwatch(key);
                        }
                    }
                }
            },
            (i, event) = next_event_any(&mut io) => {
                let now = Instant::now().into_std();
                let response = match event {
                    StreamEvent::Opened(opened) => {
                        let mut guard = shared.lock();
                        let state = &mut *guard;
                        if let Some(server) = state.servers[i].as_mut() {
                            server.client.stream_started(now);
                        }
                        io[i].responded = false;
                        match opened {
                            Ok((requests, responses)) => {
                                io[i].stream = AdsStream::Open(writer(requests, responses));
                            }
                            Err(status) => {
                                let reason = status.to_string();
                                stream_ended(i, now, &reason, state, &mut io, &servers, &watchers);
                            }
                        }
                        continue;
                    }
                    StreamEvent::Sent(type_url, names) => {
                        if let Some(server) = shared.lock().servers[i].as_mut() {
                            server.client.request_sent(&type_url, &names, now);
                        }
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
                        let now = Instant::now().into_std();
                        let mut guard = shared.lock();
                        let state = &mut *guard;
                        if let Some(server) = state.servers[i].as_mut() {
                            handle_response(&mut server.client, now, response, resources);
                        }
                        io[i].responded = true;
                        if let Some(switch) = state.choice.responded(i) {
                            make_switch(switch, state, &mut io, &servers, &watchers);
                        }
                    }
                    Ok(None) => {
                        let reason = "the server ended the stream";
                        stream_ended(i, now, reason, &mut shared.lock(), &mut io, &servers, &watchers);
                    }
                    Err(status) => {
                        let reason = status.to_string();
                        stream_ended(i, now, &reason, &mut shared.lock(), &mut io, &servers, &watchers);
                    }
                }
            }
            () = room(queue_full), if queue_full.is_some() => {}
            () = sleep_until(timer), if timer.is_some() => {
                let now = Instant::now().into_std();
                for server in shared.lock().servers.iter_mut().flatten() {
                    server.client.handle_timeout(now);
                }
            }
            () = sleep_until(next_start), if next_start.is_some() && !watchers.slots.is_empty() => {
                let now = Instant::now().into_std();
                let refresh = |io: &mut ServerIo, config: &XdsServer| {
                    // A65: a stream opening `refresh_interval` after its channel read the TLS files gets
                    // a channel that reads them again (a new connection with the new identity).
                    if let ChannelCreds::Tls(files) = &config.channel_creds {
                        if io.channel.is_some() && io.built.elapsed() >= files.refresh_interval {
                            io.channel = Some(server_channel(config));
                            io.built = Instant::now();
                        }
                    }
                };
                let state = shared.lock();
                for ((server, io), config) in state.servers.iter().zip(io.iter_mut()).zip(&servers) {
                    let due = server
                        .as_ref()
                        .and_then(|s| s.client.next_stream_start())
                        .is_some_and(|at| at <= now);
                    if due && matches!(io.stream, AdsStream::Waiting) {
                        refresh(io, config);
                        io.stream = AdsStream::Opening(open(io.channel.as_ref()));
                    }
                }
            }
        }
    }
}

/// Opens a stream once the channel is READY; a failure (a channel that could not be built included)
/// counts as a stream that ended before any response.
fn open(channel: Option<&Result<Channel, Status>>) -> Opening {
    let channel = match channel {
        Some(Ok(channel)) => Ok(channel.clone()),
        Some(Err(status)) => Err(status.clone()),
        None => Err(Status::unavailable("xDS: no channel to the server")),
    };
    Box::pin(async move {
        let channel = channel?;
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

/// The next event of any server's stream (the first server's first); never while every one waits.
async fn next_event_any(io: &mut [ServerIo]) -> (usize, StreamEvent) {
    let mut events: Vec<_> = io
        .iter_mut()
        .enumerate()
        .filter(|(_, s)| !matches!(s.stream, AdsStream::Waiting))
        .map(|(i, s)| Box::pin(async move { (i, next_event(&mut s.stream).await) }))
        .collect();
    std::future::poll_fn(|cx| {
        for event in &mut events {
            if let std::task::Poll::Ready(ready) = event.as_mut().poll(cx) {
                return std::task::Poll::Ready(ready);
            }
        }
        std::task::Poll::Pending
    })
    .await
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
    client: &mut XdsClient<Resource>,
    now: std::time::Instant,
    response: DiscoveryResponse,
    decoded: Vec<Decoded<Resource>>,
) {
    client.handle_response(
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
