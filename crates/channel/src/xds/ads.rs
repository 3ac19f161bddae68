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
//! Higher-priority servers keep retrying, and the first response from one (as in grpc-go, even one
//! whose resources are all rejected) switches back to it and closes the lower-priority servers'
//! streams and channels. The watchers' slots are one cache across servers: a server's error never
//! clears a value a watcher has, and a new watch of a resource another watch has is filled from it.
//! Watchers get connectivity errors only when every server failed. At most
//! [`grpc_xds::MAX_XDS_SERVERS`] servers.
//!
//! A65: `tls` channel creds give the server's channel a [`TlsConfig`] with the CA file's roots (the
//! platform's without one) and the client certificate and key (mTLS), read when that channel is built;
//! a stream opening `refresh_interval` or more after that gets a new channel, which reads them again
//! (an open stream keeps its connection). Files that cannot be read or hold no usable PEM fail a lone
//! server's client at once, naming the file; with more servers that server counts as failing (A71
//! falls back) and its channel is built again at each stream start. `unix:` server URIs are the
//! channel's own `unix:` targets.
//!
//! Watchers ([`ResourceWatch`]) see the latest state of their resource in a one-value slot, so a control
//! plane flooding updates costs one slot per watch, never a queue. The task ends when the last
//! [`AdsClient`] handle is dropped, dropping every server's stream and channel. The clients' state sits
//! behind a mutex the task takes only between its awaits, so [`AdsClient::dump`] reads it at once (for
//! `Channel::xds_resources`, with the URI of the server in use), even while the task waits for a server.
//!
//! This file holds the shared handle and the watches; the watchers' slots and the per-server client
//! state are in `ads_state.rs`, the server channels (A65) and streams in `ads_stream.rs`, the task loop
//! in `ads_task.rs`. Not here: per-authority server lists (authorities use the top-level list).

use std::sync::{Arc, Weak};

use grpc_xds::resource::{DecodeContext, ResourceType};
use grpc_xds::{node_proto, Bootstrap, ResourceDump, ServerChoice, UserAgent};
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

#[cfg(test)]
pub(crate) use super::ads_state::TASK_ENDED;
use super::ads_state::{task_ended, ClientState, Command, Commands, ServerClient, SharedClient};
pub(crate) use super::ads_state::{WatchState, Watchers};
use super::ads_stream::server_channel;
#[cfg(test)]
pub(crate) use super::ads_task::off_runtime;
use super::ads_task::run;
use crate::wire::status::Status;

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
        // A65 + A71: a first server whose channel cannot be built (its `tls` files unreadable or
        // invalid) is a failing server the client falls back from, as one it cannot connect to; a lone
        // server's error fails the client at once, naming the file.
        let channel = server_channel(&servers[0]);
        if let (Err(status), 1) = (&channel, servers.len()) {
            return Err(status.clone());
        }
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
