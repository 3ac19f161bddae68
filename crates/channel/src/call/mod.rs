//! One call on the wire: the request HEADERS, the request messages (the [`RequestSender`] half), and the
//! response headers, messages and trailers (the [`Streaming`] half), per `doc/PROTOCOL-HTTP2.md`.
//!
//! The two halves share the h2 send stream, because only it can send RST_STREAM: the receiving half resets the
//! stream with CANCEL when the call is cancelled, dropped, past its deadline, or the response is malformed.
//!
//! How a response becomes a status: the response headers and trailers as `wire/response.rs` says; no trailers at
//! all: INTERNAL;
//! * a stream reset or a dead connection: [`Status::from_h2`];
//! * a bad message prefix or a truncated message: INTERNAL; a message over the limit, as it arrives or once
//!   decompressed: RESOURCE_EXHAUSTED (naming the limit);
//! * a compressed message under `identity`, under an encoding the call did not advertise in
//!   `grpc-accept-encoding`, or under one this crate lacks: INTERNAL (`doc/compression.md`).
//!
//! A call cancelled locally ends CANCELLED, or DEADLINE_EXCEEDED once its deadline has passed (naming the
//! connection it waited for and the last connection error, if it never got one: `connection_wait.rs`).
//!
//! The call layer, above `control` (its attempts pick from the control plane): before commit the call's
//! [`driver`] runs grpc-retry's A6 state machine over [`attempt`]s, each writing its request through
//! [`send_stream`]; at commit it hands the chosen attempt's stream to the call's halves (`sender.rs`,
//! `streaming.rs`, sharing `shared.rs`; the `writer.rs` task writes after commit). Beside them: the call's
//! exactly-once request id ([`exactly_once`]) and what the channel tells about its calls ([`telemetry`]).
//! Not here: setting a call up (interceptors, resolution, method config: `channel.rs`, above).

pub(crate) mod attempt;
pub(crate) mod connection_wait;
pub(crate) mod driver;
pub(crate) mod exactly_once;
pub(crate) mod send_stream;
mod sender;
mod shared;
mod streaming;
pub(crate) mod telemetry;
mod writer;

pub use sender::RequestSender;
pub(crate) use shared::{CancelOnDrop, Committed, Input, Shared, SharedRef};

/// For a retry driver in a task of its own, once it is done: hands the committed attempt (or the call's
/// status) over to the call's halves, and starts the writer task if that attempt left messages to write.
pub(crate) fn hand_over(
    shared: &SharedRef,
    result: Result<Committed, crate::wire::status::Status>,
) {
    let mut s = shared.lock();
    s.hand_over(result);
    writer::start(shared, &mut s);
}
pub(crate) use streaming::ReceiveRules;
pub use streaming::Streaming;
