//! The few etcd v3 messages this crate sends and reads (`etcdserverpb` of etcd's `api/etcdserverpb/rpc.proto`
//! and `mvccpb` of `api/mvccpb/kv.proto`), written by hand with only the fields it uses: a prefix `Range`,
//! a prefix `Watch` with progress notifications and fragments (no `prev_kv`: a DELETE's key is all the resolver needs). Unknown fields of etcd's responses are
//! skipped by prost, so newer etcd versions decode as well.
//!
//! Not here: writing keys (`Put`, `DeleteRange`, `Txn`), leases, authentication.

/// The path of the KV service's Range method.
pub(crate) const RANGE: &str = "/etcdserverpb.KV/Range";
/// The path of the Watch service's bidi Watch method.
pub(crate) const WATCH: &str = "/etcdserverpb.Watch/Watch";

/// `etcdserverpb.RangeRequest`: keys in `[key, range_end)`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub(crate) struct RangeRequest {
    /// The first key.
    #[prost(bytes = "vec", tag = "1")]
    pub(crate) key: Vec<u8>,
    /// The end of the range (exclusive).
    #[prost(bytes = "vec", tag = "2")]
    pub(crate) range_end: Vec<u8>,
    /// At most this many keys (0: no limit).
    #[prost(int64, tag = "3")]
    pub(crate) limit: i64,
    /// Read at this revision (0: the latest).
    #[prost(int64, tag = "4")]
    pub(crate) revision: i64,
    /// Member-local read (false: linearizable).
    #[prost(bool, tag = "7")]
    pub(crate) serializable: bool,
    /// Keys without their values.
    #[prost(bool, tag = "8")]
    pub(crate) keys_only: bool,
}

/// `etcdserverpb.ResponseHeader`.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub(crate) struct ResponseHeader {
    /// The store's revision when the response was made.
    #[prost(int64, tag = "3")]
    pub(crate) revision: i64,
}

/// `mvccpb.KeyValue`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub(crate) struct KeyValue {
    /// The key.
    #[prost(bytes = "vec", tag = "1")]
    pub(crate) key: Vec<u8>,
    /// The revision of the key's last change.
    #[prost(int64, tag = "3")]
    pub(crate) mod_revision: i64,
    /// The value.
    #[prost(bytes = "vec", tag = "5")]
    pub(crate) value: Vec<u8>,
}

/// `etcdserverpb.RangeResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RangeResponse {
    /// The header (its revision is the read's).
    #[prost(message, optional, tag = "1")]
    pub(crate) header: Option<ResponseHeader>,
    /// The keys read, in key order.
    #[prost(message, repeated, tag = "2")]
    pub(crate) kvs: Vec<KeyValue>,
    /// Whether the range has more keys than `limit` let through.
    #[prost(bool, tag = "3")]
    pub(crate) more: bool,
}

/// `etcdserverpb.WatchCreateRequest`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub(crate) struct WatchCreateRequest {
    /// The first key.
    #[prost(bytes = "vec", tag = "1")]
    pub(crate) key: Vec<u8>,
    /// The end of the range (exclusive).
    #[prost(bytes = "vec", tag = "2")]
    pub(crate) range_end: Vec<u8>,
    /// The first revision to report (inclusive; 0: from now).
    #[prost(int64, tag = "3")]
    pub(crate) start_revision: i64,
    /// Periodic event-less responses carrying the current revision.
    #[prost(bool, tag = "4")]
    pub(crate) progress_notify: bool,
    /// etcd splits a revision larger than its request limit into several responses.
    #[prost(bool, tag = "8")]
    pub(crate) fragment: bool,
}

/// `etcdserverpb.WatchRequest` (only its `create_request` arm).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub(crate) struct WatchRequest {
    /// Creates a watcher.
    #[prost(message, optional, tag = "1")]
    pub(crate) create_request: Option<WatchCreateRequest>,
}

/// `mvccpb.Event.EventType`: PUT.
pub(crate) const EVENT_PUT: i32 = 0;
/// `mvccpb.Event.EventType`: DELETE.
pub(crate) const EVENT_DELETE: i32 = 1;

/// `mvccpb.Event`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub(crate) struct Event {
    /// PUT (0) or DELETE (1).
    #[prost(int32, tag = "1")]
    pub(crate) r#type: i32,
    /// The key as it is after the event (a DELETE: the key, no value).
    #[prost(message, optional, tag = "2")]
    pub(crate) kv: Option<KeyValue>,
}

/// `etcdserverpb.WatchResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct WatchResponse {
    /// The header (its revision: the store's, for a progress notification).
    #[prost(message, optional, tag = "1")]
    pub(crate) header: Option<ResponseHeader>,
    /// The watcher this response is for.
    #[prost(int64, tag = "2")]
    pub(crate) watch_id: i64,
    /// The watcher was created.
    #[prost(bool, tag = "3")]
    pub(crate) created: bool,
    /// The watcher was canceled (compaction, or an error in `cancel_reason`).
    #[prost(bool, tag = "4")]
    pub(crate) canceled: bool,
    /// With `canceled`: the oldest revision still available, the start revision having been compacted.
    #[prost(int64, tag = "5")]
    pub(crate) compact_revision: i64,
    /// Why the watcher was canceled.
    #[prost(string, tag = "6")]
    pub(crate) cancel_reason: String,
    /// More responses of the same revision follow (asked for with `fragment`).
    #[prost(bool, tag = "7")]
    pub(crate) fragment: bool,
    /// The events, in revision order.
    #[prost(message, repeated, tag = "11")]
    pub(crate) events: Vec<Event>,
}

/// The end of the range of every key that starts with `prefix` (etcd's `GetPrefixRangeEnd`): the prefix with
/// its last byte below 0xFF incremented and what follows dropped; `"\0"` (every key from `prefix` on) when
/// every byte is 0xFF.
pub(crate) fn prefix_range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_the_last_byte_below_ff() {
        assert_eq!(prefix_range_end(b"svc/"), b"svc0");
        assert_eq!(prefix_range_end(b"a\xff"), b"b");
        assert_eq!(prefix_range_end(b"\xff\xff"), b"\0");
    }
}
