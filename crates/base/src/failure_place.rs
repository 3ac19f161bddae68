//! Where an attempt of a call failed, in gRFC A6's terms: the word the channel reports in, `grpc-transparent`
//! classifies HTTP/2 errors into, and `grpc-retry` decides on.

/// Where an attempt failed (gRFC A6 "Transparent Retries": the four places an RPC can fail).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailurePlace {
    /// The load balancer dropped the call: it fails at once, with no retry of any kind, and the throttle is
    /// not touched (no backend saw it).
    Dropped,
    /// The pick failed (e.g. TRANSIENT_FAILURE for a fail-fast call): the configured policy applies.
    PickFailed,
    /// The pick succeeded but nothing left the client: transparent retry, without limit until the deadline.
    NotSent,
    /// The server's HTTP/2 stack refused it before its application saw it (REFUSED_STREAM, GOAWAY above the
    /// stream): one transparent retry per call, never after an attempt was processed.
    Unprocessed,
    /// The server's application may have seen it (trailers, or a failure after the request went out): the
    /// configured policy applies.
    Processed,
    /// A local error that is nobody's failure, e.g. a request the HTTP/2 library refuses to send (malformed
    /// metadata): the call ends at once with this attempt's status; never retried, transparently or by policy,
    /// and never counted by the throttle.
    Local,
}
