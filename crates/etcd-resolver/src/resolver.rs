//! The `etcd` scheme's resolver: [`EtcdResolverBuilder`] (registered with the channel) and the task each
//! channel's resolver runs, which follows the keys `NAME/...` of etcd through a [`Table`].
//!
//! The task reads the prefix whole (a linearizable `Range`, paged by keys and, through RESOURCE_EXHAUSTED,
//! by bytes), publishes the endpoints, then watches the prefix from the read's revision + 1 (progress
//! notifications and fragments on, no `prev_kv`), applying each event and publishing when the endpoints
//! change. On any error (etcd unreachable, the watch canceled, a stream ended) the endpoints already
//! published stay (calls go on), the error is reported to the channel, and the task tries the next etcd
//! member at once, then, every member having failed, again after a backoff (1 s growing by 1.6 up to 30 s,
//! ±20 % jitter, by default), starting over with a full read; a compacted revision (the watch canceled with
//! `compact_revision`) or a watch response too large for the channel starts over at once (once in a row;
//! then after a backoff). `resolve_now` cuts a backoff short and, during a watch, looks the host names up
//! again. Dropping the resolver (the channel closed) ends the task and with it its channels to etcd.
//!
//! **No endpoint left.** An empty prefix (the last key deleted, or none ever registered) is not published
//! as an empty list: it is reported as an error, as gRPC treats "no addresses" (grpc-go's and grpc-java's
//! balancers keep their endpoints on a resolver's empty list the same way). Before any endpoint was known
//! calls fail UNAVAILABLE; after, the channel keeps the last endpoints and calls go on to them (a registry
//! emptied by a bad deploy or a lease storm does not take the traffic down with it), until a key is
//! registered again, which is followed as usual. To stop traffic to a backend, register its replacement
//! before deleting its key, or stop the backend.
//!
//! Host names in `Addr` are resolved (the system resolver, `tokio::net::lookup_host`) each time the list is
//! published; a name that does not resolve is left out and logged.
//!
//! Not here: the table and the values (`table.rs`, `value.rs`), the messages (`proto.rs`), the reconnect
//! delays (`backoff.rs`).

use std::sync::Arc;
use std::time::Duration;

use grpc_base::{Rng, SplitMix64};
use grpc_channel::resolver::{
    Address, Attributes, Endpoint, Resolver, ResolverBuilder, ResolverError, ResolverSink,
    ResolverTarget, ResolverUpdate, UpdateError,
};
use grpc_channel::{Channel, Code, Request, Status, TlsConfig};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::backoff::Backoff;
use crate::proto::{self, prefix_range_end, RangeRequest, WatchCreateRequest, WatchRequest};
use crate::table::{Applied, Snapshot, Table, MAX_ENDPOINTS};
use crate::value::Addr;

/// The attribute that carries an endpoint's `Metadata`, as JSON text (absent when `null` or missing).
pub const METADATA_ATTRIBUTE: &str = "etcd.metadata";
/// The attribute that carries the etcd key that registered the endpoint.
pub const KEY_ATTRIBUTE: &str = "etcd.key";

/// How many keys one `Range` page asks for at most (halved while a page is larger than
/// [`MAX_RESPONSE_BYTES`], grown back after).
const PAGE: i64 = 256;
/// The largest etcd response the resolver's channels accept. etcd's values are at most its request limit
/// (`--max-request-bytes`, 1.5 MiB by default), so a page of a few keys fits; a larger page fails with
/// RESOURCE_EXHAUSTED and is asked for again at half as many keys, down to one key; a single value
/// larger than this (a raised `--max-request-bytes`) is skipped, its key read with `keys_only`. A watch
/// response (fragmented by etcd at its request limit) larger than this ends the watch and resyncs with a
/// full read.
const MAX_RESPONSE_BYTES: usize = 8 << 20;
/// The most keys one full read scans, endpoints or not (keys whose values are not endpoints do not count
/// against [`MAX_ENDPOINTS`], but a read stops after this many keys).
const MAX_KEYS_SCANNED: usize = 64 * MAX_ENDPOINTS;
/// How long a `Range` may take.
const RANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long resolving one host name may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// Builds the resolvers of `etcd://HOST:PORT/NAME` targets: the endpoints of `NAME` are the keys under
/// `NAME/` in the etcd at `HOST:PORT` (plaintext), whose values are the JSON the etcd project's
/// `endpoints.Manager` writes (`{"Addr":"10.0.0.1:50051","Metadata":...}`, and etcd 3.4's form with `Op`).
///
/// ```no_run
/// use grpc_channel::Channel;
/// use grpc_etcd_resolver::EtcdResolverBuilder;
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// // Process-wide, for every channel:
/// grpc_channel::resolver::register(EtcdResolverBuilder::new()).expect("etcd is a URI scheme");
/// let channel = Channel::new("etcd://127.0.0.1:2379/my-service")?;
/// // Or for one channel, with three etcd members over TLS (the target's HOST:PORT is then ignored):
/// let etcd = EtcdResolverBuilder::new()
///     .with_endpoints(["etcd-0.internal:2379", "etcd-1.internal:2379", "etcd-2.internal:2379"])
///     .with_tls(grpc_channel::TlsConfig::new().ca_certificate_file("/etc/etcd/ca.pem"));
/// let channel = Channel::builder("etcd:///my-service").resolver(etcd).build()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct EtcdResolverBuilder {
    endpoints: Vec<String>,
    tls: Option<TlsConfig>,
    backoff_initial: Duration,
    backoff_max: Duration,
    seed: Option<u64>,
    /// Tests: each round waits for a permit between its full read and its watch.
    #[cfg(test)]
    pub(crate) hold_after_read: Option<Arc<tokio::sync::Semaphore>>,
}

impl Default for EtcdResolverBuilder {
    fn default() -> Self {
        EtcdResolverBuilder::new()
    }
}

impl EtcdResolverBuilder {
    /// A builder with the defaults: etcd at the target's `HOST:PORT` in plaintext, reconnect backoff from
    /// 1 s to 30 s.
    pub fn new() -> EtcdResolverBuilder {
        EtcdResolverBuilder {
            endpoints: Vec::new(),
            tls: None,
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
            seed: None,
            #[cfg(test)]
            hold_after_read: None,
        }
    }

    /// Talks to these etcd client endpoints (`host:port` each, a channel to each member; the resolver uses
    /// one at a time and fails over to the next) instead of the target's `HOST:PORT`, which may then be
    /// left out (`etcd:///NAME`). Over TLS each member is verified by its own host name (unless
    /// [`TlsConfig::server_name`] sets one name for all).
    #[must_use]
    pub fn with_endpoints(
        mut self,
        endpoints: impl IntoIterator<Item = impl Into<String>>,
    ) -> EtcdResolverBuilder {
        self.endpoints = endpoints.into_iter().map(Into::into).collect();
        self
    }

    /// Talks to etcd over TLS with this configuration (roots, a client certificate for etcd's
    /// `--client-cert-auth`, the server name).
    #[must_use]
    pub fn with_tls(mut self, tls: TlsConfig) -> EtcdResolverBuilder {
        self.tls = Some(tls);
        self
    }

    /// The reconnect backoff: the first delay after a failure, growing by 1.6 up to `max` (±20 % jitter).
    /// An `initial` below 10 ms is raised to 10 ms (a zero backoff would retry in a tight loop), and `max`
    /// below `initial` to `initial`.
    #[must_use]
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> EtcdResolverBuilder {
        self.backoff_initial = initial;
        self.backoff_max = max;
        self
    }

    /// Seeds the backoff's jitter (by default from the clock), for reproducible tests.
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> EtcdResolverBuilder {
        self.seed = Some(seed);
        self
    }

    /// The resolver's channels to etcd, one per member (so that over TLS each member is verified by its own
    /// host name: grpc-channel has no per-address server name).
    fn etcd_channels(&self, target: &ResolverTarget) -> Result<Vec<Channel>, ResolverError> {
        let invalid = |reason: &str| ResolverError::InvalidTarget {
            target: target.as_str().to_owned(),
            reason: reason.to_owned(),
        };
        let members: Vec<&str> =
            match self.endpoints.as_slice() {
                [] if target.authority().is_empty() => return Err(invalid(
                    "no etcd endpoint: write etcd://HOST:PORT/NAME or give the builder endpoints",
                )),
                [] => vec![target.authority()],
                several => several.iter().map(String::as_str).collect(),
            };
        members
            .into_iter()
            .map(|member| {
                let mut builder = Channel::builder(format!("dns:///{member}"))
                    .service_config_lookup(false)
                    .keepalive_time(Duration::from_secs(30))
                    .keepalive_timeout(Duration::from_secs(10))
                    .max_receive_message_size(MAX_RESPONSE_BYTES);
                if let Some(tls) = &self.tls {
                    builder = builder.tls(tls.clone());
                }
                builder.build().map_err(|e| {
                    ResolverError::Other(format!("the channel to etcd member {member:?}: {e}"))
                })
            })
            .collect()
    }
}

impl ResolverBuilder for EtcdResolverBuilder {
    fn scheme(&self) -> &str {
        "etcd"
    }

    fn build(
        &self,
        target: &ResolverTarget,
        sink: ResolverSink,
    ) -> Result<Box<dyn Resolver>, ResolverError> {
        let name = target.endpoint();
        if name.is_empty() || name.ends_with('/') {
            return Err(ResolverError::InvalidTarget {
                target: target.as_str().to_owned(),
                reason: "no service name: write etcd://HOST:PORT/NAME".to_owned(),
            });
        }
        let channels = self.etcd_channels(target)?;
        let wake = Arc::new(Notify::new());
        let seed = self.seed.unwrap_or_else(clock_seed);
        let task = Watcher {
            channels,
            member: 0,
            members_failed: 0,
            table: Table::new(name),
            sink,
            backoff: Backoff::new(self.backoff_initial, self.backoff_max),
            rng: SplitMix64::new(seed),
            wake: wake.clone(),
            published: None,
            name: name.to_owned(),
            #[cfg(test)]
            hold_after_read: self.hold_after_read.clone(),
        };
        Ok(Box::new(EtcdResolver {
            task: tokio::spawn(task.run()),
            wake,
        }))
    }
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id()).rotate_left(32)
}

/// A running etcd resolver: its task follows etcd until the resolver is dropped.
struct EtcdResolver {
    task: JoinHandle<()>,
    wake: Arc<Notify>,
}

impl Resolver for EtcdResolver {
    fn resolve_now(&mut self) {
        // A task waiting out a backoff tries again at once; a running watch looks its host names up again.
        self.wake.notify_one();
    }
}

impl Drop for EtcdResolver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Why a read-then-watch round ended.
enum RoundEnd {
    /// The watch's start revision was compacted: read again at once.
    Compacted(i64),
    /// A watch response was larger than [`MAX_RESPONSE_BYTES`]: read again at once (the new watch starts
    /// past it).
    TooLarge(String),
    /// etcd failed or could not be reached.
    Failed(String),
    /// The channel is gone.
    Closed,
}

/// The task of one resolver.
struct Watcher {
    /// A channel per etcd member.
    channels: Vec<Channel>,
    /// The member in use.
    member: usize,
    /// How many members failed in a row (the task backs off once all did).
    members_failed: usize,
    table: Table,
    sink: ResolverSink,
    backoff: Backoff,
    rng: SplitMix64,
    wake: Arc<Notify>,
    /// The last list published (`Some(empty)`: the empty prefix was reported).
    published: Option<Vec<Endpoint>>,
    name: String,
    #[cfg(test)]
    hold_after_read: Option<Arc<tokio::sync::Semaphore>>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        for channel in &self.channels {
            channel.close();
        }
    }
}

impl Watcher {
    async fn run(mut self) {
        let sink = self.sink.clone();
        let mut resyncs_in_a_row = 0u32;
        loop {
            let end = tokio::select! {
                end = self.round() => end,
                () = sink.closed() => RoundEnd::Closed,
            };
            match end {
                RoundEnd::Closed => return,
                RoundEnd::Compacted(revision) => {
                    tracing::info!(
                        name = %self.name,
                        revision,
                        "etcd resolver: the watch's revision was compacted; reading the endpoints again"
                    );
                    self.members_failed = 0;
                    resyncs_in_a_row += 1;
                    if resyncs_in_a_row == 1 {
                        continue;
                    }
                }
                RoundEnd::TooLarge(error) => {
                    tracing::warn!(
                        name = %self.name,
                        %error,
                        "etcd resolver: a watch response was too large; reading the endpoints again"
                    );
                    self.members_failed = 0;
                    resyncs_in_a_row += 1;
                    if resyncs_in_a_row == 1 {
                        continue;
                    }
                }
                RoundEnd::Failed(error) => {
                    resyncs_in_a_row = 0;
                    // The next member at once, until every member failed in a row; then the error is
                    // reported and the task backs off.
                    self.member = (self.member + 1) % self.channels.len();
                    self.members_failed += 1;
                    if self.members_failed < self.channels.len() {
                        tracing::warn!(name = %self.name, %error, "etcd resolver: an etcd member failed; trying the next");
                        continue;
                    }
                    self.members_failed = 0;
                    tracing::warn!(name = %self.name, %error, "etcd resolver: etcd failed; retrying after a backoff");
                    self.sink
                        .report_error(format!("etcd resolver for {:?}: {error}", self.name));
                }
            }
            // A resolve_now given while a round ran (a permit left in `wake`) must not cut this backoff.
            drop_stale_permit(&self.wake).await;
            let delay = self.backoff.next_delay(&mut self.rng as &mut dyn Rng);
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.wake.notified() => {}
                () = sink.closed() => return,
            }
        }
    }

    /// Reads the prefix whole, publishes, then watches from the next revision until something fails.
    async fn round(&mut self) -> RoundEnd {
        let channel = self.channels[self.member].clone();
        let (revision, snapshot) = match read_prefix(&channel, &self.table).await {
            Ok(read) => read,
            Err(status) => return RoundEnd::Failed(format!("reading the prefix: {status}")),
        };
        self.table.replace(revision, snapshot);
        if let Some(end) = self.publish().await {
            return end;
        }
        #[cfg(test)]
        if let Some(hold) = &self.hold_after_read {
            if let Ok(permit) = hold.acquire().await {
                permit.forget();
            }
        }
        let (mut sender, mut responses) = match channel
            .streaming::<WatchRequest, proto::WatchResponse>(proto::WATCH, Request::new(()))
            .await
        {
            Ok(call) => call,
            Err(status) => return RoundEnd::Failed(format!("starting the watch: {status}")),
        };
        let prefix = self.table.prefix().to_vec();
        let create = WatchRequest {
            create_request: Some(WatchCreateRequest {
                range_end: prefix_range_end(&prefix),
                key: prefix,
                start_revision: revision + 1,
                progress_notify: true,
                fragment: true,
            }),
        };
        if let Err(status) = sender.send(create).await {
            return RoundEnd::Failed(format!("starting the watch: {status}"));
        }
        // `sender` stays open for the whole watch: etcd ends a watch stream whose client half-closed.
        let mut changed = false;
        loop {
            let message = tokio::select! {
                message = responses.message() => message,
                () = self.wake.notified() => {
                    // resolve_now: look the host names up again (published if they changed).
                    if let Some(end) = self.publish().await {
                        return end;
                    }
                    continue;
                }
            };
            let response = match message {
                Ok(Some(response)) => response,
                Ok(None) => return RoundEnd::Failed("the watch stream ended".to_owned()),
                Err(status) if too_large(&status) => {
                    return RoundEnd::TooLarge(format!("the watch: {status}"))
                }
                Err(status) => return RoundEnd::Failed(format!("the watch: {status}")),
            };
            if response.canceled {
                if response.compact_revision > 0 {
                    return RoundEnd::Compacted(response.compact_revision);
                }
                return RoundEnd::Failed(format!(
                    "the watch was canceled: {}",
                    response.cancel_reason
                ));
            }
            if response.created {
                // etcd is reached and followed again.
                self.backoff.reset();
                self.members_failed = 0;
            }
            for event in response.events {
                let Some(kv) = event.kv else { continue };
                // A DELETE carries its key, all the table needs (no `prev_kv`).
                let applied = match event.r#type {
                    proto::EVENT_PUT => self.table.put(kv.mod_revision, kv.key, &kv.value),
                    proto::EVENT_DELETE => self.table.delete(kv.mod_revision, &kv.key),
                    _ => Applied::Unchanged,
                };
                changed |= applied == Applied::Changed;
            }
            // A revision split in fragments is published whole, after its last fragment.
            if changed && !response.fragment {
                changed = false;
                if let Some(end) = self.publish().await {
                    return end;
                }
            }
        }
    }

    /// Publishes the table's endpoints if they changed; `Some` if the round must end.
    async fn publish(&mut self) -> Option<RoundEnd> {
        let mut endpoints = Vec::new();
        for registered in self.table.endpoints() {
            let mut attributes = Attributes::new().with(KEY_ATTRIBUTE, registered.key.as_str());
            if let Some(metadata) = &registered.entry.metadata {
                attributes = attributes.with(METADATA_ATTRIBUTE, &**metadata);
            }
            let endpoint = match &registered.entry.addr {
                Addr::Socket(addr) => Some(Endpoint::new(Address::Tcp(*addr))),
                Addr::Name { host, port } => lookup(host, *port).await,
            };
            if let Some(endpoint) = endpoint {
                endpoints.push(endpoint.with_attributes(attributes));
            }
        }
        if self.published.as_ref() == Some(&endpoints) {
            return None;
        }
        self.published = Some(endpoints.clone());
        if endpoints.is_empty() {
            self.sink.report_error(format!(
                "etcd resolver: no endpoint registered under {:?} (revision {})",
                String::from_utf8_lossy(self.table.prefix()),
                self.table.revision()
            ));
            return None;
        }
        tracing::debug!(name = %self.name, count = endpoints.len(), revision = self.table.revision(), "etcd resolver: publishing");
        match self.sink.update(ResolverUpdate::new(endpoints)) {
            Ok(()) => None,
            Err(UpdateError::Closed) => Some(RoundEnd::Closed),
            Err(error) => {
                tracing::warn!(name = %self.name, %error, "etcd resolver: the channel rejected the endpoints");
                None
            }
        }
    }
}

/// A linearizable read of every key under the table's prefix at one revision, page by page, each page
/// decoded into a [`Snapshot`] as it comes (at most [`MAX_ENDPOINTS`] endpoints; at most
/// [`MAX_KEYS_SCANNED`] keys read; a page at most [`MAX_RESPONSE_BYTES`], fewer keys asked for while it is
/// larger).
async fn read_prefix(channel: &Channel, table: &Table) -> Result<(i64, Snapshot), Status> {
    let range_end = prefix_range_end(table.prefix());
    let mut key = table.prefix().to_vec();
    let mut revision = 0;
    let mut snapshot = Snapshot::default();
    let mut page = PAGE;
    let mut scanned = 0usize;
    loop {
        let request = RangeRequest {
            key: key.clone(),
            range_end: range_end.clone(),
            limit: page,
            revision,
            serializable: false,
            keys_only: false,
        };
        let response = match range(channel, request).await {
            Ok(response) => response,
            Err(status) if too_large(&status) && page > 1 => {
                page /= 2;
                continue;
            }
            Err(status) if too_large(&status) => {
                // One value alone is larger than a response may be: skip its key.
                let request = RangeRequest {
                    key: key.clone(),
                    range_end: range_end.clone(),
                    limit: 1,
                    revision,
                    serializable: false,
                    keys_only: true,
                };
                let mut response = range(channel, request).await?;
                if revision == 0 {
                    revision = response.header.map_or(0, |h| h.revision);
                }
                let Some(kv) = response.kvs.pop() else {
                    return Ok((revision, snapshot));
                };
                tracing::warn!(
                    key = %String::from_utf8_lossy(&kv.key),
                    "etcd resolver: a value larger than {MAX_RESPONSE_BYTES} bytes; ignored"
                );
                scanned += 1;
                if !response.more || scanned >= MAX_KEYS_SCANNED {
                    return Ok((revision, snapshot));
                }
                key = kv.key;
                key.push(0);
                continue;
            }
            Err(status) => return Err(status),
        };
        if revision == 0 {
            // The later pages read at the first one's revision: one consistent snapshot.
            revision = response.header.map_or(0, |h| h.revision);
        }
        let more = response.more;
        let last = response.kvs.last().map(|kv| kv.key.clone());
        scanned += response.kvs.len();
        for kv in response.kvs {
            if !table.add_to(&mut snapshot, kv.key, &kv.value) {
                return Ok((revision, snapshot));
            }
        }
        page = (page * 2).min(PAGE);
        match last {
            Some(_) if more && scanned >= MAX_KEYS_SCANNED => {
                tracing::warn!(
                    "etcd resolver: more than {MAX_KEYS_SCANNED} keys under the prefix; ignoring the rest"
                );
                return Ok((revision, snapshot));
            }
            Some(mut last) if more => {
                last.push(0);
                key = last;
            }
            _ => return Ok((revision, snapshot)),
        }
    }
}

/// Whether `status` is this side's receive limit refusing a response (not etcd's own RESOURCE_EXHAUSTED,
/// "too many requests", which is a failure to retry after a backoff).
fn too_large(status: &Status) -> bool {
    status.code() == Code::ResourceExhausted && status.message().contains("larger than the limit")
}

/// Takes the permit a `notify_one` left in `wake` while nobody waited, if any.
async fn drop_stale_permit(wake: &Notify) {
    tokio::select! {
        biased;
        () = wake.notified() => {}
        () = std::future::ready(()) => {}
    }
}

/// One `Range` call.
async fn range(channel: &Channel, request: RangeRequest) -> Result<proto::RangeResponse, Status> {
    Ok(channel
        .unary(
            proto::RANGE,
            Request::new(request).with_timeout(RANGE_TIMEOUT),
        )
        .await?
        .into_inner())
}

/// One endpoint of every address `host` resolves to, or `None` (logged).
async fn lookup(host: &str, port: u16) -> Option<Endpoint> {
    let found = tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host((host, port))).await;
    match found {
        Ok(Ok(addrs)) => Endpoint::from_addresses(addrs.map(Address::Tcp)),
        Ok(Err(error)) => {
            tracing::warn!(host, %error, "etcd resolver: a host name did not resolve; left out");
            None
        }
        Err(_) => {
            tracing::warn!(
                host,
                "etcd resolver: a host name did not resolve in time; left out"
            );
            None
        }
    }
}

#[cfg(test)]
#[path = "resolver_tests.rs"]
mod tests;
