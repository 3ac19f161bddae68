//! What an idle in-flight call keeps: its future is most of it (with the task it is spawned in), so a change
//! that keeps a large value across an await (or awaits a large future inline) fails here.
//! `RUSTFLAGS=-Zprint-type-sizes` on nightly shows what each state of a future holds.
//!
//! A unary future keeps its arguments (the request most of all) for the whole call, and across its waits
//! little more: a boxed resolution wait, the retry driver, a boxed receiving half. Before that was so, it was
//! 3,952 B for `unary_raw` and 4,456 B with the interop `SimpleRequest`; now about the request plus 250 B.

use bytes::Bytes;
use grpc_channel::{Channel, Request};
use interop_proto::{paths, SimpleRequest, SimpleResponse};

/// The most a unary future may hold besides its request: the retry driver (152 B), what makes the receiving
/// half (32 B), the method path, the codec, the channel and the state, with room for a compiler's layout.
const OVER_THE_REQUEST: usize = 320;

/// A channel that is never used: making a call's future runs nothing.
fn channel() -> Channel {
    Channel::builder("127.0.0.1:1")
        .build()
        .expect("a valid target")
}

#[test]
fn a_unary_future_holds_little_more_than_its_request() {
    let channel = channel();
    let raw = channel.unary_raw(paths::UNARY_CALL, Request::new(Bytes::new()));
    let request = std::mem::size_of::<Request<Bytes>>();
    assert!(
        std::mem::size_of_val(&raw) <= request + OVER_THE_REQUEST,
        "unary_raw's future is {} B, its request {request} B",
        std::mem::size_of_val(&raw)
    );
    let prost = channel
        .unary::<_, SimpleResponse>(paths::UNARY_CALL, Request::new(SimpleRequest::default()));
    let request = std::mem::size_of::<Request<SimpleRequest>>();
    assert!(
        std::mem::size_of_val(&prost) <= request + OVER_THE_REQUEST,
        "unary's future is {} B, its request {request} B",
        std::mem::size_of_val(&prost)
    );
}
