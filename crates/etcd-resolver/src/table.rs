//! The sans-IO core: the endpoints registered under one name, as a table from etcd key to endpoint that a
//! full read replaces and watch events change.
//!
//! The keys are those with the prefix `NAME/`, never `NAME` alone as a prefix (etcd's own grpc-go resolver
//! watches the bare name, so that `svc-a-old/x` leaks into `svc-a`). A value is decoded by `value.rs`; a
//! key whose value is not the naming convention's has no endpoint (logged with `tracing::warn!`, never
//! fatal), so the table is always a function of what etcd holds under the prefix, whether it was read
//! whole or followed event by event. An `Op` 1 value (etcd 3.4's delete) removes the key's endpoint like a
//! DELETE does.
//!
//! Bounds, so that a registry cannot make the table grow without limit: at most [`MAX_ENDPOINTS`] endpoints
//! (the first ones in key order of a full read, keys whose values are not endpoints taking no place; a PUT
//! of a new key into a full table is ignored and logged until the next full read), values of at most [`MAX_VALUE_BYTES`] and keys of at most [`MAX_KEY_BYTES`] (longer
//! ones are ignored and logged).
//!
//! [`Table::endpoints`] lists them in key order, an address that several keys name listed once (for its
//! first key). The table remembers the revision of its last full read and ignores events at or below it (a
//! watch started from `revision + 1` sends none; a restarted one might); events above it all apply, several
//! of one revision (a `Txn`, a ranged delete) included.
//!
//! Not here: talking to etcd, name resolution of host names, what to do with an empty list (`resolver.rs`).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use crate::value::{decode, Addr, Value};

/// The most keys the table holds.
pub const MAX_ENDPOINTS: usize = 4096;
/// The longest value the table decodes, in bytes.
pub const MAX_VALUE_BYTES: usize = 16 * 1024;
/// The longest key the table accepts, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;

/// One key's endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Its address.
    pub(crate) addr: Addr,
    /// Its `Metadata` as JSON text.
    pub(crate) metadata: Option<Arc<str>>,
}

/// One registered endpoint, as [`Table::endpoints`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Registered<'a> {
    /// The etcd key (lossily UTF-8).
    pub(crate) key: String,
    /// Its endpoint.
    pub(crate) entry: &'a Entry,
}

/// What an event did to the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Applied {
    /// The endpoints changed.
    Changed,
    /// They did not (same value, unknown key, stale or ignored event).
    Unchanged,
}

/// The endpoints under `NAME/`, by key.
#[derive(Clone, Debug)]
pub(crate) struct Table {
    prefix: Vec<u8>,
    entries: BTreeMap<Vec<u8>, Entry>,
    /// The revision of the last full read: events at or below it are already in the table.
    read_revision: i64,
    /// The newest revision the table reflects (the full read's, or a later event's).
    revision: i64,
}

/// A full read being decoded, page by page (so that only endpoints are kept, never the raw values), before
/// it replaces the table ([`Table::replace`]).
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    entries: BTreeMap<Vec<u8>, Entry>,
}

impl Snapshot {
    /// Whether the snapshot holds [`MAX_ENDPOINTS`] endpoints already (the rest of the read is ignored).
    pub(crate) fn is_full(&self) -> bool {
        self.entries.len() >= MAX_ENDPOINTS
    }

    /// The keys read so far, in key order.
    #[cfg(test)]
    pub(crate) fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.entries.keys().map(Vec::as_slice)
    }
}

impl Table {
    /// An empty table for the endpoints of `name` (the keys with prefix `name/`).
    pub(crate) fn new(name: &str) -> Table {
        let mut prefix = name.as_bytes().to_vec();
        prefix.push(b'/');
        Table {
            prefix,
            entries: BTreeMap::new(),
            read_revision: 0,
            revision: 0,
        }
    }

    /// The key prefix, `NAME/`.
    pub(crate) fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// The revision the table reflects (0 before the first full read).
    pub(crate) fn revision(&self) -> i64 {
        self.revision
    }

    /// Replaces everything with a full read of the prefix at `revision` (key-value pairs in key order).
    #[cfg(test)]
    pub(crate) fn replace_all(
        &mut self,
        revision: i64,
        kvs: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>,
    ) -> Applied {
        let mut snapshot = Snapshot::default();
        for (key, value) in kvs {
            if !self.add_to(&mut snapshot, key, &value) {
                break;
            }
        }
        self.replace(revision, snapshot)
    }

    /// Decodes one key of a full read into `snapshot`; `false` once the snapshot is full (the key and
    /// those after it are ignored, logged). Keys whose values are not endpoints take no place.
    pub(crate) fn add_to(&self, snapshot: &mut Snapshot, key: Vec<u8>, value: &[u8]) -> bool {
        let Some(entry) = self.entry_for(&key, value) else {
            return true;
        };
        if snapshot.is_full() && !snapshot.entries.contains_key(&key) {
            tracing::warn!(
                key = %String::from_utf8_lossy(&key),
                "etcd resolver: more than {MAX_ENDPOINTS} endpoints under the prefix; ignoring the rest"
            );
            return false;
        }
        snapshot.entries.insert(key, entry);
        true
    }

    /// Replaces everything with a full read at `revision`.
    pub(crate) fn replace(&mut self, revision: i64, snapshot: Snapshot) -> Applied {
        let before = std::mem::replace(&mut self.entries, snapshot.entries);
        self.read_revision = revision;
        self.revision = revision;
        if before == self.entries {
            Applied::Unchanged
        } else {
            Applied::Changed
        }
    }

    /// A PUT of `key` at `revision`.
    pub(crate) fn put(&mut self, revision: i64, key: Vec<u8>, value: &[u8]) -> Applied {
        if !self.fresh(revision) {
            return Applied::Unchanged;
        }
        match self.entry_for(&key, value) {
            Some(entry) => {
                if self.entries.get(&key) == Some(&entry) {
                    return Applied::Unchanged;
                }
                if self.entries.len() >= MAX_ENDPOINTS && !self.entries.contains_key(&key) {
                    tracing::warn!(
                        key = %String::from_utf8_lossy(&key),
                        "etcd resolver: {MAX_ENDPOINTS} keys already; ignoring a new one"
                    );
                    return Applied::Unchanged;
                }
                self.entries.insert(key, entry);
                Applied::Changed
            }
            None => self.remove(&key),
        }
    }

    /// A DELETE of `key` at `revision`.
    pub(crate) fn delete(&mut self, revision: i64, key: &[u8]) -> Applied {
        if !self.fresh(revision) {
            return Applied::Unchanged;
        }
        self.remove(key)
    }

    /// The endpoints, in key order, each address once.
    pub(crate) fn endpoints(&self) -> Vec<Registered<'_>> {
        let mut seen = HashSet::new();
        self.entries
            .iter()
            .filter(|(_, entry)| seen.insert(&entry.addr))
            .map(|(key, entry)| Registered {
                key: String::from_utf8_lossy(key).into_owned(),
                entry,
            })
            .collect()
    }

    /// Whether an event at `revision` is newer than the last full read (several events of one revision,
    /// a `Txn` or a ranged delete, all are); if so, the table's revision moves to it.
    fn fresh(&mut self, revision: i64) -> bool {
        if revision <= self.read_revision {
            return false;
        }
        self.revision = self.revision.max(revision);
        true
    }

    fn remove(&mut self, key: &[u8]) -> Applied {
        match self.entries.remove(key) {
            Some(_) => Applied::Changed,
            None => Applied::Unchanged,
        }
    }

    /// The endpoint `value` gives `key`, if it gives one (else why not is logged).
    fn entry_for(&self, key: &[u8], value: &[u8]) -> Option<Entry> {
        let shown = || String::from_utf8_lossy(key);
        if !key.starts_with(&self.prefix) || key.len() == self.prefix.len() {
            tracing::warn!(key = %shown(), "etcd resolver: a key outside the prefix; ignored");
            return None;
        }
        if key.len() > MAX_KEY_BYTES {
            tracing::warn!(
                key = %shown(),
                "etcd resolver: a key longer than {MAX_KEY_BYTES} bytes; ignored"
            );
            return None;
        }
        if value.len() > MAX_VALUE_BYTES {
            tracing::warn!(
                key = %shown(),
                bytes = value.len(),
                "etcd resolver: a value longer than {MAX_VALUE_BYTES} bytes; ignored"
            );
            return None;
        }
        match decode(value) {
            Ok(Value::Add { addr, metadata }) => Some(Entry { addr, metadata }),
            Ok(Value::Delete) => None,
            Err(error) => {
                tracing::warn!(key = %shown(), %error, "etcd resolver: a value that is not an endpoint; ignored");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, addr: &str) -> (Vec<u8>, Vec<u8>) {
        (
            key.as_bytes().to_vec(),
            format!(r#"{{"Addr":"{addr}","Metadata":null}}"#).into_bytes(),
        )
    }

    fn addrs(table: &Table) -> Vec<String> {
        table
            .endpoints()
            .iter()
            .map(|r| r.entry.addr.to_string())
            .collect()
    }

    #[test]
    fn the_prefix_is_the_name_and_a_slash() {
        let mut table = Table::new("svc-a");
        assert_eq!(table.prefix(), b"svc-a/");
        table.replace_all(
            5,
            [
                kv("svc-a", "10.0.0.9:1"),
                kv("svc-a-old/x", "10.0.0.8:1"),
                kv("svc-a/", "10.0.0.7:1"),
                kv("svc-a/b", "10.0.0.2:1"),
                kv("svc-a/a", "10.0.0.1:1"),
            ],
        );
        assert_eq!(addrs(&table), ["10.0.0.1:1", "10.0.0.2:1"]);
        assert_eq!(table.revision(), 5);
        assert_eq!(
            table.put(6, b"svc-a-old/y".to_vec(), br#"{"Addr":"10.0.0.3:1"}"#),
            Applied::Unchanged
        );
    }

    #[test]
    fn put_adds_updates_and_delete_removes_in_key_order() {
        let mut table = Table::new("s");
        assert_eq!(table.replace_all(1, []), Applied::Unchanged);
        let (k, v) = kv("s/b", "10.0.0.2:1");
        assert_eq!(table.put(2, k.clone(), &v), Applied::Changed);
        assert_eq!(table.put(3, k.clone(), &v), Applied::Unchanged);
        let (k2, v2) = kv("s/a", "10.0.0.1:1");
        assert_eq!(table.put(4, k2, &v2), Applied::Changed);
        assert_eq!(addrs(&table), ["10.0.0.1:1", "10.0.0.2:1"]);
        let (_, v3) = kv("s/b", "10.0.0.3:1");
        assert_eq!(table.put(5, k.clone(), &v3), Applied::Changed);
        assert_eq!(addrs(&table), ["10.0.0.1:1", "10.0.0.3:1"]);
        assert_eq!(table.delete(6, &k), Applied::Changed);
        assert_eq!(table.delete(7, &k), Applied::Unchanged);
        assert_eq!(addrs(&table), ["10.0.0.1:1"]);
    }

    #[test]
    fn op_1_removes_and_garbage_means_no_endpoint() {
        let mut table = Table::new("s");
        table.replace_all(1, [kv("s/a", "10.0.0.1:1"), kv("s/b", "10.0.0.2:1")]);
        assert_eq!(
            table.put(2, b"s/a".to_vec(), br#"{"Op":1,"Addr":"10.0.0.1:1"}"#),
            Applied::Changed
        );
        assert_eq!(table.put(3, b"s/b".to_vec(), b"garbage"), Applied::Changed);
        assert!(table.endpoints().is_empty());
        assert_eq!(table.put(4, b"s/c".to_vec(), b"{}"), Applied::Unchanged);
        // The same store read whole gives the same table.
        let mut read = Table::new("s");
        read.replace_all(
            4,
            [
                (b"s/a".to_vec(), br#"{"Op":1,"Addr":"10.0.0.1:1"}"#.to_vec()),
                (b"s/b".to_vec(), b"garbage".to_vec()),
                (b"s/c".to_vec(), b"{}".to_vec()),
            ],
        );
        assert!(read.endpoints().is_empty());
    }

    /// etcd gives every change of one transaction the same revision: `endpoints.Manager::Update` commits
    /// all its ops in one `Txn`, and a prefix delete (`etcdctl del --prefix svc/`) removes every key at
    /// one revision. Every event of that revision must apply, not only the first.
    #[test]
    fn events_of_one_revision_all_apply() {
        let mut table = Table::new("s");
        table.replace_all(1, [kv("s/a", "10.0.0.1:1"), kv("s/b", "10.0.0.2:1")]);
        // One DeleteRange of the prefix at revision 5.
        assert_eq!(table.delete(5, b"s/a"), Applied::Changed);
        assert_eq!(
            table.delete(5, b"s/b"),
            Applied::Changed,
            "the second delete of revision 5 was taken for a stale event"
        );
        assert!(addrs(&table).is_empty(), "left: {:?}", addrs(&table));
        // One Txn of two puts at revision 6.
        let (k, v) = kv("s/c", "10.0.0.3:1");
        assert_eq!(table.put(6, k, &v), Applied::Changed);
        let (k, v) = kv("s/d", "10.0.0.4:1");
        assert_eq!(table.put(6, k, &v), Applied::Changed);
        assert_eq!(addrs(&table), ["10.0.0.3:1", "10.0.0.4:1"]);
    }

    #[test]
    fn stale_events_are_ignored() {
        let mut table = Table::new("s");
        table.replace_all(10, [kv("s/a", "10.0.0.1:1")]);
        assert_eq!(table.delete(10, b"s/a"), Applied::Unchanged);
        let (k, v) = kv("s/b", "10.0.0.2:1");
        assert_eq!(table.put(9, k, &v), Applied::Unchanged);
        assert_eq!(addrs(&table), ["10.0.0.1:1"]);
    }

    #[test]
    fn a_full_read_after_compaction_replaces_everything() {
        let mut table = Table::new("s");
        table.replace_all(3, [kv("s/a", "10.0.0.1:1"), kv("s/b", "10.0.0.2:1")]);
        // Events were lost to compaction: the resync reads the store at its new revision.
        assert_eq!(
            table.replace_all(20, [kv("s/b", "10.0.0.2:1"), kv("s/c", "10.0.0.3:1")]),
            Applied::Changed
        );
        assert_eq!(addrs(&table), ["10.0.0.2:1", "10.0.0.3:1"]);
        assert_eq!(
            table.replace_all(21, [kv("s/b", "10.0.0.2:1"), kv("s/c", "10.0.0.3:1")]),
            Applied::Unchanged
        );
    }

    #[test]
    fn metadata_and_duplicates() {
        let mut table = Table::new("s");
        table.replace_all(
            1,
            [
                (
                    b"s/a".to_vec(),
                    br#"{"Addr":"10.0.0.1:1","Metadata":{"zone":"z"}}"#.to_vec(),
                ),
                kv("s/b", "10.0.0.1:1"),
            ],
        );
        let endpoints = table.endpoints();
        assert_eq!(endpoints.len(), 1);
        assert_eq!(endpoints[0].key, "s/a");
        assert_eq!(
            endpoints[0].entry.metadata.as_deref(),
            Some(r#"{"zone":"z"}"#)
        );
    }

    #[test]
    fn at_most_max_endpoints_keys() {
        let mut table = Table::new("s");
        let kvs = (0..=MAX_ENDPOINTS).map(|i| {
            kv(
                &format!("s/{i:05}"),
                &format!("10.{}.{}.{}:1", i >> 16, (i >> 8) & 0xff, i & 0xff),
            )
        });
        table.replace_all(1, kvs);
        let endpoints = table.endpoints();
        assert_eq!(endpoints.len(), MAX_ENDPOINTS);
        assert_eq!(
            endpoints[MAX_ENDPOINTS - 1].key,
            format!("s/{:05}", MAX_ENDPOINTS - 1)
        );
        // Full: a new key is ignored, an existing one still changes, and a freed place takes a new key.
        let (k, v) = kv("s/zzz", "10.200.0.1:1");
        assert_eq!(table.put(2, k.clone(), &v), Applied::Unchanged);
        let (k0, v0) = kv("s/00000", "10.200.0.2:1");
        assert_eq!(table.put(3, k0.clone(), &v0), Applied::Changed);
        assert_eq!(table.delete(4, &k0), Applied::Changed);
        assert_eq!(table.put(5, k, &v), Applied::Changed);
        assert_eq!(table.endpoints().len(), MAX_ENDPOINTS);
    }

    #[test]
    fn values_and_keys_at_their_bounds() {
        let mut table = Table::new("s");
        let value = |len: usize| {
            let head = r#"{"Addr":"10.0.0.1:1","Metadata":""#;
            let tail = r#""}"#;
            let mut v = head.as_bytes().to_vec();
            v.resize(len - tail.len(), b'x');
            v.extend_from_slice(tail.as_bytes());
            assert_eq!(v.len(), len);
            v
        };
        assert_eq!(
            table.put(1, b"s/a".to_vec(), &value(MAX_VALUE_BYTES)),
            Applied::Changed
        );
        assert_eq!(
            table.put(2, b"s/b".to_vec(), &value(MAX_VALUE_BYTES + 1)),
            Applied::Unchanged
        );
        let long_key = |len: usize| {
            let mut k = b"s/".to_vec();
            k.resize(len, b'k');
            k
        };
        let (_, v) = kv("", "10.0.0.2:1");
        assert_eq!(table.put(3, long_key(MAX_KEY_BYTES), &v), Applied::Changed);
        let (_, v) = kv("", "10.0.0.3:1");
        assert_eq!(
            table.put(4, long_key(MAX_KEY_BYTES + 1), &v),
            Applied::Unchanged
        );
        assert_eq!(table.endpoints().len(), 2);
    }
}
