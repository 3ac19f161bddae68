//! The ADS task (see `ads.rs`): each in-use management server's sans-IO client driven over one stream
//! at a time, A71's switches between servers (fall back, switch back), the does-not-exist timers, and
//! the responses decoded off the runtime. Not here: the watchers' slots and the per-server client state
//! (`ads_state.rs`), the channels and streams themselves (`ads_stream.rs`).

use std::future::Future;
use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
use grpc_xds::resource::{decode_response_with, DecodeContext, Resource, ResourceType};
use grpc_xds::{
    discovery_request, ChannelCreds, Decoded, Switch, WatchEvent, XdsClient, XdsServer,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::ads_state::{
    apply, ClientState, Command, Commands, ServerClient, SharedClient, Watchers,
};
use super::ads_stream::{next_event, open, room, server_channel, writer, AdsStream, StreamEvent};
use crate::channel::Channel;
use crate::wire::status::Status;

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
pub(super) async fn run(
    servers: Vec<XdsServer>,
    first: Result<Channel, Status>,
    built: Instant,
    node: core::Node,
    context: Arc<DecodeContext>,
    shared: SharedClient,
    mut commands: Commands,
) {
    let mut watchers = Watchers::default();
    let mut io: Vec<ServerIo> = servers.iter().map(|_| ServerIo::unused()).collect();
    io[0].channel = Some(first);
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
                    // The current server's cached value reaches the new watch before the check.
                    state.deliver(&watchers);
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
                    // a channel that reads them again (a new connection with the new identity); a
                    // channel that could not be built (the files unreadable) is tried again at each
                    // stream start, at the client's backoff.
                    if let ChannelCreds::Tls(files) = &config.channel_creds {
                        let stale = match &io.channel {
                            Some(Ok(_)) => io.built.elapsed() >= files.refresh_interval,
                            Some(Err(_)) => true,
                            None => false,
                        };
                        if stale {
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
