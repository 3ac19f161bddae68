//! Exactly-once gRPC calls, after Kudu's design ("exactly-once RPC semantics"): gRFC A6 may run a call
//! more than once on the server (every hedge, every retry after a processed failure), which is only safe for
//! idempotent methods. With a request id on every attempt and a result tracker on the server, a write runs
//! at most once and every attempt gets its result.
//!
//! * [`RequestId`] (`proto/exactly_once/request_id.proto`): client id, sequence number, the client's first
//!   incomplete sequence number (a watermark for garbage collection) and the attempt number, sent by
//!   grpc-channel as the metadata [`HEADER`] on every attempt of a call that opted in.
//! * [`Tracker`]: the sans-IO state machine (NEW, IN_PROGRESS, COMPLETED, STALE, and REFUSED for what it
//!   will not take; see its module docs).
//! * [`ResultTracker`]: the tracker for async servers (h2, tonic or anything else): `execute(id, handler)`;
//!   its refusals carry the gRPC code to answer with ([`ExecuteError::code`]).
//!
//! Memory is bounded whatever clients send ([`Config`]): cached responses by bytes and by count, tombstones
//! (dropped responses whose duplicates are refused) per client and in all, client records by count, client
//! ids to exactly [`CLIENT_ID_LEN`] bytes. An evicted tombstone still refuses its duplicates through its
//! client's *forgotten mark*; a new client past the cap is refused with RESOURCE_EXHAUSTED rather than any
//! record being forgotten early (see [`tracker`]).
//!
//! Not here: persistence (results live in memory: a restarted server forgets them), and replication. A
//! client silent for longer than `client_ttl` is forgotten and a duplicate from it runs again, as in Kudu.

mod request_id;
mod service;
pub mod tracker;

pub use request_id::{RequestId, CLIENT_ID_LEN, HEADER};
pub use service::{ExecuteError, ResultTracker, Source};
pub use tracker::{Config, Decision, Refusal, Stale, Stats, Tracker};
