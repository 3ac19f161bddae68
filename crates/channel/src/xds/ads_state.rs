//! The ADS task's state (see `ads.rs`): what each watcher knows of its resource (a one-value slot per
//! watch), the task's watchers and command queue, and the sans-IO [`XdsClient`] of each management
//! server in use with the A71 [`ServerChoice`] among them, which hands the current server's events to
//! the watchers. One resource cache for the watchers across servers (as grpc-go's): an error never
//! clears a value a watcher has, whichever server gave it. Not here: the streams (`ads_stream.rs`)
//! and the task driving them (`ads_task.rs`).

use std::collections::HashMap;
use std::sync::Arc;

use grpc_retry::SplitMix64;
use grpc_xds::resource::{Resource, ResourceType};
use grpc_xds::{ServerChoice, WatchEvent, WatchId, XdsClient, XdsServer};
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch, Notify};

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

pub(super) enum Command {
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
pub(super) struct ServerClient {
    pub(super) client: XdsClient<Resource>,
    /// The client's watch id of each watcher key, and back.
    pub(super) ids: HashMap<u64, WatchId>,
    pub(super) keys: HashMap<WatchId, u64>,
}

impl ServerClient {
    /// A client for `server`, watching every resource `watchers` watch.
    pub(super) fn new(
        server: &XdsServer,
        now: std::time::Instant,
        watchers: &Watchers,
    ) -> ServerClient {
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

    pub(super) fn watch(&mut self, key: u64, resource_type: ResourceType, name: &str) {
        let id = self.client.watch(resource_type, name);
        self.ids.insert(key, id);
        self.keys.insert(id, key);
    }

    pub(super) fn unwatch(&mut self, key: u64) {
        if let Some(id) = self.ids.remove(&key) {
            self.keys.remove(&id);
            self.client.unwatch(id);
        }
    }
}

/// The clients of the servers in use and the choice among them (A71), behind the mutex
/// [`AdsClient::dump`] reads.
pub(super) struct ClientState {
    pub(super) choice: ServerChoice,
    /// Each server's URI.
    pub(super) uris: Vec<String>,
    /// Each server's client while it is in use.
    pub(super) servers: Vec<Option<ServerClient>>,
}

impl ClientState {
    /// Hands every client's events to the watchers: only the current server's, and of those no error
    /// while [`ServerChoice::errors_withheld`] (a server to fall back to is left).
    pub(super) fn deliver(&mut self, watchers: &Watchers) {
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

pub(super) type SharedClient = Arc<Mutex<ClientState>>;

/// A watch the task holds: what it watches, its slot and its wake-up.
pub(crate) struct WatchSlot {
    pub(super) resource_type: ResourceType,
    pub(super) name: String,
    pub(super) slot: watch::Sender<WatchState>,
    pub(super) notify: Arc<Notify>,
}

/// The task's watchers: each watch by key (each server's client maps its own watch ids to these keys).
/// Should the task end while watches remain (it only ends by itself once every handle is gone, so that
/// is a panic), dropping this tells each of them: its slot keeps the value it had and gets the error, so
/// a resolver still waiting for a resource fails its channel instead of waiting forever.
#[derive(Default)]
pub(crate) struct Watchers {
    pub(super) slots: HashMap<u64, WatchSlot>,
}

impl Watchers {
    /// Adds a watch's slot, as the task does for a `Watch` command. A resource another watch already
    /// has (a value, or known not to exist) fills the new slot at once: the watchers' slots are the
    /// cache A71 speaks of, whichever server filled them.
    pub(crate) fn insert(
        &mut self,
        key: u64,
        resource_type: ResourceType,
        name: &str,
        slot: watch::Sender<WatchState>,
        notify: Arc<Notify>,
    ) {
        let known = self
            .slots
            .values()
            .filter(|w| w.resource_type == resource_type && w.name == name)
            .map(|w| w.slot.borrow().clone())
            .find(|state| state.value.is_some() || state.does_not_exist);
        if let Some(known) = known {
            slot.send_replace(known);
            notify.notify_one();
        }
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
    pub(super) fn all_cached(&self) -> bool {
        self.slots.values().all(|w| {
            let state = w.slot.borrow();
            state.value.is_some() || state.does_not_exist
        })
    }
}

/// The task's command queue. Should the task end (or never run: its runtime shut down first), dropping
/// this closes the queue and tells each watch still waiting in it, as [`Watchers`] does for the others.
pub(super) struct Commands(pub(super) mpsc::UnboundedReceiver<Command>);

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
pub(super) fn task_ended(slot: &watch::Sender<WatchState>, notify: &Notify) {
    slot.send_modify(|state| state.error = Some(TASK_ENDED.to_owned()));
    notify.notify_one();
}

/// Applies a server's event to a watcher's state. No error clears a value: a server's
/// [`WatchEvent::Error`] means that server has no value, while the watcher may have one from another
/// server (a fallback server's, when the restored one rejects its first version).
pub(super) fn apply(state: &mut WatchState, event: WatchEvent<Resource>) {
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
        // A server's error for a resource it never gave a value: the value another server gave (the
        // watchers' one cache across servers, as grpc-go's) stays in use, with the error ambient.
        WatchEvent::Error(e) | WatchEvent::AmbientError(e) => state.error = Some(e),
    }
}
