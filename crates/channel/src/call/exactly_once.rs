//! The client side of exactly-once calls (`grpc-exactly-once`, after Kudu): a call that opts in
//! ([`ChannelBuilder::exactly_once`](crate::ChannelBuilder::exactly_once) or
//! [`Request::with_exactly_once`](crate::Request::with_exactly_once)) carries a request id on every
//! attempt, retries and hedges alike: the channel's client id (128 random bits), the call's sequence number
//! (the same on every attempt), the channel's first incomplete sequence number (the lowest of its exactly-once
//! calls still in flight, a watermark that lets the server forget older results) and the attempt number, as
//! the binary metadata `exactly-once-request-id-bin`. A server with a `ResultTracker` then runs the call at
//! most once and answers every attempt with that result.

use std::collections::BTreeSet;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use grpc_exactly_once::RequestId;
use http::HeaderValue;
use parking_lot::Mutex;

pub(crate) use grpc_exactly_once::HEADER;

/// A channel's client id, its next sequence number and its calls in flight.
pub(crate) struct Client {
    client_id: Bytes,
    next_seq: AtomicU64,
    in_flight: Mutex<BTreeSet<u64>>,
}

impl Client {
    pub(crate) fn new() -> Arc<Client> {
        Arc::new(Client {
            client_id: random_id(),
            next_seq: AtomicU64::new(1),
            in_flight: Mutex::new(BTreeSet::new()),
        })
    }

    /// A new call: its sequence number, counted in flight until the returned guard drops.
    pub(crate) fn start_call(self: &Arc<Self>) -> CallId {
        let seq_no = self.next_seq.fetch_add(1, Ordering::Relaxed);
        self.in_flight.lock().insert(seq_no);
        CallId {
            client: self.clone(),
            seq_no,
        }
    }
}

/// One exactly-once call: in flight for its channel until dropped.
pub(crate) struct CallId {
    client: Arc<Client>,
    seq_no: u64,
}

impl CallId {
    /// The `exactly-once-request-id-bin` value for the attempt numbered `attempt_no` (from 1).
    pub(crate) fn header(&self, attempt_no: u32) -> Option<HeaderValue> {
        let first_incomplete = self
            .client
            .in_flight
            .lock()
            .first()
            .copied()
            .unwrap_or(self.seq_no)
            .min(self.seq_no);
        let id = RequestId {
            client_id: self.client.client_id.clone(),
            seq_no: self.seq_no,
            first_incomplete_seq_no: first_incomplete,
            attempt_no,
        };
        HeaderValue::try_from(crate::wire::metadata::encode_bin(&id.to_bytes())).ok()
    }
}

impl Drop for CallId {
    fn drop(&mut self) {
        self.client.in_flight.lock().remove(&self.seq_no);
    }
}

/// 16 bytes no other channel (of this process or another) is likely to have: the process's randomly keyed
/// hasher (std seeds it from the operating system) over the time, the process id and a counter.
fn random_id() -> Bytes {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let state = std::collections::hash_map::RandomState::new();
    let nanos = u128::from(crate::control::clock_seed());
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut out = Vec::with_capacity(16);
    for half in 0..2u64 {
        let mut h = state.build_hasher();
        h.write_u128(nanos);
        h.write_u32(std::process::id());
        h.write_u64(count);
        h.write_u64(half);
        out.extend_from_slice(&h.finish().to_be_bytes());
    }
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_the_watermark_of_the_calls_in_flight() {
        let client = Client::new();
        let first = client.start_call();
        let second = client.start_call();
        let decode = |v: HeaderValue| {
            let bytes = crate::wire::metadata::decode_bin(v.as_bytes()).expect("base64");
            RequestId::from_bytes(&bytes).expect("an id")
        };
        let id = decode(second.header(2).expect("value"));
        assert_eq!(
            (id.seq_no, id.first_incomplete_seq_no, id.attempt_no),
            (2, 1, 2)
        );
        assert_eq!(id.client_id.len(), 16);
        drop(first);
        let id = decode(second.header(3).expect("value"));
        assert_eq!(id.first_incomplete_seq_no, 2, "the first call ended");
        assert_ne!(Client::new().client_id, client.client_id);
    }
}
