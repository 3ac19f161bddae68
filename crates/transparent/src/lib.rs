//! Classifies how an attempt of a gRPC call on an h2 connection ended into the failure places of gRFC A6
//! ("Transparent Retries"), so that `grpc-retry` can decide what may be retried without knowing HTTP/2.
//!
//! The channel reports, with each h2 error, how far the attempt's stream had got ([`Progress`]). The rules,
//! each resting on an h2 0.4 behaviour that `tests/h2_behaviour.rs` plays over real sockets (a test there
//! fails if h2 changes it):
//!
//! | h2 error | progress | place |
//! |---|---|---|
//! | a user error (`MalformedHeaders`, e.g. a `connection` header in the metadata) | any | [`FailurePlace::Local`]: INTERNAL, never retried |
//! | anything else from `SendRequest::ready()` or `send_request()` | [`Progress::Opening`] | [`FailurePlace::NotSent`] |
//! | anything else while the stream waits in h2's local queue | [`Progress::QueuedLocally`] | [`FailurePlace::NotSent`] |
//! | RST_STREAM(REFUSED_STREAM) from the server | [`Progress::Opened`] | [`FailurePlace::Unprocessed`] |
//! | GOAWAY whose last-stream-id is below the stream | [`Progress::Opened`] | [`FailurePlace::Unprocessed`] |
//! | anything else | [`Progress::Opened`] | [`FailurePlace::Processed`] |
//!
//! A write that fails because the server reset the stream meanwhile is classified by the reset's reason
//! ([`classify_reset`]), not by h2's "inactive stream" user error.
//!
//! The h2 behaviours relied on:
//! * After a GOAWAY, h2 stores it as the connection's error and fails every later `send_request` and
//!   `SendRequest::ready()` with it (`ensure_no_conn_error`): no HEADERS of that stream are ever written, so
//!   the attempt never left the client. The same holds once the connection has closed (an I/O error).
//! * On a GOAWAY, h2 fails exactly the locally-initiated streams whose id is above the frame's last-stream-id,
//!   with a *remote* GOAWAY error (`recv_go_away`). Streams at or below it keep running; if the connection
//!   then ends, they fail with an I/O error ("broken pipe"), not the GOAWAY error, so they stay processed.
//! * A stream reset by the server arrives as a *remote* reset carrying the server's reason.
//! * A stream over the server's `MAX_CONCURRENT_STREAMS` waits in h2's pending-open queue, and while it does,
//!   `SendRequest::poll_ready()` on the handle that opened it is `Pending` (`poll_pending_open`). The channel
//!   reports [`Progress::QueuedLocally`] until that handle is seen ready.
//! * A request h2 refuses to encode is a *user* error: no reason, no I/O error, no reset, no GOAWAY.
//!
//! Where the rules are conservative: h2 moves a stream out of its local queue in the connection task, so a
//! stream that left the queue just before a GOAWAY, before the channel polled its handle again, is reported
//! never sent although its HEADERS may have been written; the GOAWAY says the server did not process it, so
//! retrying it is safe either way. A stream that left the client but whose `poll_ready()` was never
//! observed as pending is reported opened, so its GOAWAY or refusal gets the one transparent retry A6 allows
//! for "unprocessed" instead of the unlimited one.
//!
//! What this crate does not decide: a failed pick (the channel reports [`FailurePlace::PickFailed`] itself,
//! and [`FailurePlace::Dropped`] for a load-balancer drop), and status codes (the channel's status tables).

use grpc_base::FailurePlace;
use h2::Reason;

/// How far an attempt's stream had got when its error arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// No stream yet: `SendRequest::ready()` or `send_request()` failed.
    Opening,
    /// `send_request()` succeeded, but h2 holds the stream in its local queue (the server's
    /// `MAX_CONCURRENT_STREAMS` is reached): its HEADERS have not been written.
    QueuedLocally,
    /// The stream's HEADERS were handed to the connection: they may have reached the server.
    Opened,
}

/// Where an attempt that ended with `err` failed.
pub fn classify(err: &h2::Error, progress: Progress) -> FailurePlace {
    if is_user_error(err) {
        return FailurePlace::Local;
    }
    match progress {
        Progress::Opening | Progress::QueuedLocally => FailurePlace::NotSent,
        Progress::Opened if is_unprocessed(err) => FailurePlace::Unprocessed,
        Progress::Opened => FailurePlace::Processed,
    }
}

/// Where an attempt failed whose stream the server reset with `reason`, as h2's `SendStream::poll_reset`
/// reports it (a write to such a stream fails with a user error, "inactive stream", which says nothing of
/// the server's reason).
pub fn classify_reset(reason: Reason, progress: Progress) -> FailurePlace {
    match progress {
        Progress::Opening | Progress::QueuedLocally => FailurePlace::NotSent,
        Progress::Opened if reason == Reason::REFUSED_STREAM => FailurePlace::Unprocessed,
        Progress::Opened => FailurePlace::Processed,
    }
}

/// A request h2 refused to send (malformed headers and other API misuse): the caller's mistake, not the
/// network's.
pub fn is_user_error(err: &h2::Error) -> bool {
    err.reason().is_none() && !err.is_io() && !err.is_go_away() && !err.is_reset()
}

/// The server's HTTP/2 stack refused the stream before its application saw it: RST_STREAM(REFUSED_STREAM),
/// or a GOAWAY whose last-stream-id is below the stream (h2 reports only those streams with the GOAWAY).
fn is_unprocessed(err: &h2::Error) -> bool {
    err.is_remote()
        && (err.is_go_away() || (err.is_reset() && err.reason() == Some(Reason::REFUSED_STREAM)))
}
