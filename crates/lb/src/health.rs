//! Client-side health checking (gRFC A17, with A61's rule on which policies use it): the health of a
//! subchannel's current connection, as the `grpc.health.v1.Health/Watch` stream the channel runs on it
//! last reported. It is an overlay on the subchannel's connectivity, like ejection: a subchannel whose
//! connection is READY but whose [`Health`] is not [`Health::Serving`] looks CONNECTING ([`Health::Unknown`],
//! the first answer is awaited) or TRANSIENT_FAILURE ([`Health::NotServing`]) to its policy, and its
//! connection stays open. Ejection wins over health: an ejected subchannel looks TRANSIENT_FAILURE whatever
//! its health.
//!
//! Which policies use it (A61): only those that balance over several subchannels, here `round_robin`, and
//! only once the channel turned it on with [`LbPolicy::set_health_checking`](crate::LbPolicy::set_health_checking)
//! (the service config's `healthCheckConfig` and no local veto). A top-level `pick_first` never health
//! checks: it ignores the overlay, whatever the channel reports.
//!
//! Health belongs to a connection: it is [`Health::Unknown`] whenever a subchannel becomes READY (a new
//! connection starts a new Watch) and is reset when the connection is lost. A report for a subchannel that
//! is not READY is ignored.
//!
//! The channel maps the Watch to [`Health`] (A17):
//! * a response `SERVING` → [`Health::Serving`]; any other status (`NOT_SERVING`, `SERVICE_UNKNOWN`,
//!   `UNKNOWN`, an unparseable message) → [`Health::NotServing`];
//! * the call ends with `UNIMPLEMENTED` → [`Health::Serving`] (the server has no health service; log it once,
//!   and do not watch that connection again);
//! * the call ends with another status → [`Health::NotServing`], then [`Health::Unknown`] when the retry
//!   starts (backoff 1 s, ×1.6, ±20 %, 120 s; at once if the ended call received a message).
//!
//! Not here: the Watch stream, its backoff and its cancellation when the connection leaves READY (the
//! channel's), the service name (`grpc-service-config`), the unary `Check` method.

/// What the health Watch on a subchannel's current connection last said.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Health {
    /// No answer yet on this connection (or a new Watch is starting): a READY subchannel looks CONNECTING.
    #[default]
    Unknown,
    /// The backend serves the watched service: the subchannel shows its real state.
    Serving,
    /// The backend does not serve it (or the Watch failed): a READY subchannel looks TRANSIENT_FAILURE.
    NotServing,
}
