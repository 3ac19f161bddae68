//! Endpoints pushed by the application (grpc-go's manual resolver; tonic's `Channel::balance_channel` with
//! `Change::Insert` / `Change::Remove`): [`manual`] gives a [`ResolverBuilder`] to register for a scheme and
//! the [`PushedEndpoints`] handle through which the application sets and changes the endpoint list (and the
//! service config) of the channels that use it. Built on the public resolver API only.
//!
//! Not here: the API itself (`resolver_api.rs`).

use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::control::resolver_api::{
    Endpoint, Resolver, ResolverBuilder, ResolverError, ResolverSink, ResolverTarget,
    ResolverUpdate, UpdateError,
};

/// A resolver builder for `scheme` and the handle that feeds it.
///
/// ```
/// use grpc_channel::resolver::{manual, Address, Endpoint};
/// use grpc_channel::Channel;
///
/// # fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let (resolver, endpoints) = manual("pushed");
/// endpoints.set(vec![Endpoint::new(Address::Tcp("127.0.0.1:50051".parse()?))])?;
/// let channel = Channel::builder("pushed:///backends").resolver(resolver).build()?;
/// // Later: another backend, then one gone.
/// endpoints.insert("b", Endpoint::new(Address::Tcp("127.0.0.1:50052".parse()?)))?;
/// endpoints.remove("127.0.0.1:50051")?;
/// # let _ = channel;
/// # Ok(()) }
/// ```
#[doc(alias("balance_channel", "balance_list"))]
pub fn manual(scheme: impl Into<String>) -> (ManualResolverBuilder, PushedEndpoints) {
    let shared = Arc::new(Mutex::new(Pushed::default()));
    (
        ManualResolverBuilder {
            scheme: scheme.into().to_ascii_lowercase(),
            shared: shared.clone(),
        },
        PushedEndpoints { shared },
    )
}

/// What the application pushed, and the channels that follow it.
#[derive(Default)]
struct Pushed {
    /// The endpoints by key, in the order they were first inserted.
    endpoints: Vec<(String, Endpoint)>,
    service_config: Option<String>,
    /// The sinks of the channels using it, by resolver id.
    sinks: Vec<(u64, ResolverSink)>,
    next_id: u64,
}

impl Pushed {
    fn update(&self) -> ResolverUpdate {
        let mut update =
            ResolverUpdate::new(self.endpoints.iter().map(|(_, e)| e.clone()).collect());
        update.service_config = self.service_config.clone();
        update
    }

    /// Sends the current list to every channel: `Rejected` if one rejected it (closed ones are forgotten).
    fn push(&mut self) -> Result<(), UpdateError> {
        if self.endpoints.is_empty() {
            return Err(UpdateError::Rejected(
                "no endpoints: the channels keep the ones they have".to_owned(),
            ));
        }
        let update = self.update();
        let mut result = Ok(());
        self.sinks
            .retain(|(_, sink)| match sink.update(update.clone()) {
                Ok(()) => true,
                Err(UpdateError::Closed) => false,
                Err(e) => {
                    result = Err(e);
                    true
                }
            });
        result
    }
}

/// The resolver builder of [`manual`]: register it on a channel
/// ([`ChannelBuilder::resolver`](crate::ChannelBuilder::resolver)) or process-wide
/// ([`register`](crate::resolver::register)). Every channel built with it follows the same
/// [`PushedEndpoints`]; the target's authority and endpoint are not used.
pub struct ManualResolverBuilder {
    scheme: String,
    shared: Arc<Mutex<Pushed>>,
}

impl fmt::Debug for ManualResolverBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualResolverBuilder")
            .field("scheme", &self.scheme)
            .finish_non_exhaustive()
    }
}

impl ResolverBuilder for ManualResolverBuilder {
    fn scheme(&self) -> &str {
        &self.scheme
    }

    fn build(
        &self,
        _target: &ResolverTarget,
        sink: ResolverSink,
    ) -> Result<Box<dyn Resolver>, ResolverError> {
        let mut pushed = self.shared.lock();
        if !pushed.endpoints.is_empty() {
            // A rejected first update (an invalid config) is already what the channel's calls see.
            let _ = sink.update(pushed.update());
        }
        let id = pushed.next_id;
        pushed.next_id += 1;
        pushed.sinks.push((id, sink));
        Ok(Box::new(ManualResolver {
            id,
            shared: self.shared.clone(),
        }))
    }
}

/// One channel's use of a [`ManualResolverBuilder`]: forgets the channel when dropped.
struct ManualResolver {
    id: u64,
    shared: Arc<Mutex<Pushed>>,
}

impl Resolver for ManualResolver {}

impl Drop for ManualResolver {
    fn drop(&mut self) {
        self.shared.lock().sinks.retain(|(id, _)| *id != self.id);
    }
}

/// The handle of [`manual`]: sets and changes the endpoints (and service config) of every channel using
/// its builder, at once. Cheap to clone. Endpoints set before a channel starts are its first result; until
/// there are some, its calls wait (wait-for-ready) or stay queued until their deadline.
///
/// Each change sends the whole list. An empty list is an error result, as from any resolver: the channels
/// keep the endpoints they have (remove them by inserting the new ones first). Each method returns
/// `Err(UpdateError::Rejected)` when a channel could not use the result (no endpoints, an invalid first
/// service config with no default); the change is kept all the same and sent again with the next one.
#[derive(Clone)]
pub struct PushedEndpoints {
    shared: Arc<Mutex<Pushed>>,
}

impl fmt::Debug for PushedEndpoints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pushed = self.shared.lock();
        f.debug_struct("PushedEndpoints")
            .field("endpoints", &pushed.endpoints)
            .field("channels", &pushed.sinks.len())
            .finish_non_exhaustive()
    }
}

impl PushedEndpoints {
    /// Replaces the whole list; each endpoint's key is its address list as text (`127.0.0.1:50051`, or
    /// `a,b` for several), for [`PushedEndpoints::remove`]. Duplicates are kept once.
    pub fn set(&self, endpoints: Vec<Endpoint>) -> Result<(), UpdateError> {
        let mut pushed = self.shared.lock();
        pushed.endpoints.clear();
        for e in endpoints {
            let key = e.to_string();
            upsert(&mut pushed.endpoints, key, e);
        }
        pushed.push()
    }

    /// Adds `endpoint` under `key`, or replaces the endpoint of that key in place (tonic's
    /// `Change::Insert`).
    pub fn insert(&self, key: impl Into<String>, endpoint: Endpoint) -> Result<(), UpdateError> {
        let mut pushed = self.shared.lock();
        upsert(&mut pushed.endpoints, key.into(), endpoint);
        pushed.push()
    }

    /// Removes the endpoint of `key` (tonic's `Change::Remove`); nothing is sent when there is none.
    pub fn remove(&self, key: &str) -> Result<(), UpdateError> {
        let mut pushed = self.shared.lock();
        let before = pushed.endpoints.len();
        pushed.endpoints.retain(|(k, _)| k != key);
        if pushed.endpoints.len() == before {
            return Ok(());
        }
        pushed.push()
    }

    /// Sets the service config (JSON text, gRFC A21's rules: an invalid one keeps the last good one) sent
    /// with the endpoints from now on; `None` goes back to the channel's default.
    pub fn set_service_config(&self, json: Option<String>) -> Result<(), UpdateError> {
        let mut pushed = self.shared.lock();
        pushed.service_config = json;
        if pushed.endpoints.is_empty() {
            return Ok(());
        }
        pushed.push()
    }

    /// The endpoints as last set, with their keys.
    pub fn endpoints(&self) -> Vec<(String, Endpoint)> {
        self.shared.lock().endpoints.clone()
    }

    /// How many channels follow this handle now (a closed or dropped channel stops following it).
    pub fn channels(&self) -> usize {
        let mut pushed = self.shared.lock();
        pushed.sinks.retain(|(_, sink)| !sink.is_closed());
        pushed.sinks.len()
    }
}

fn upsert(list: &mut Vec<(String, Endpoint)>, key: String, endpoint: Endpoint) {
    match list.iter_mut().find(|(k, _)| *k == key) {
        Some(slot) => slot.1 = endpoint,
        None => list.push((key, endpoint)),
    }
}
