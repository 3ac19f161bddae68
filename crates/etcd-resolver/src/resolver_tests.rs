//! The resolver's compaction resync against a real etcd: the watch's start revision is compacted between
//! the full read and the watch (the test holds the task there), etcd cancels the watch with
//! `compact_revision`, and the resolver reads again and follows from the new revision; and the paged full
//! read of a prefix larger than a page.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use grpc_channel::{Channel, Request};
use interop::etcd::{Etcd, EtcdKv};
use interop_proto::paths;
use tokio::sync::Semaphore;

use super::EtcdResolverBuilder;

async fn reached(channel: &Channel, calls: usize) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for _ in 0..calls {
        let request = interop_proto::SimpleRequest {
            fill_server_id: true,
            ..interop_proto::SimpleRequest::default()
        };
        let response: grpc_channel::Response<interop_proto::SimpleResponse> = channel
            .unary(
                paths::UNARY_CALL,
                Request::new(request).with_timeout(Duration::from_secs(5)),
            )
            .await
            .expect("a call");
        seen.insert(response.into_inner().server_id);
    }
    seen
}

async fn converge(channel: &Channel, want: &[SocketAddr], limit: Duration) {
    let want: BTreeSet<String> = want.iter().map(ToString::to_string).collect();
    let start = Instant::now();
    loop {
        let seen = reached(channel, 2 * want.len()).await;
        if seen == want {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "the calls reach {seen:?}, not {want:?}"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_watch_revision_resyncs_with_a_full_read() {
    let Some(etcd) = Etcd::start() else { return };
    let kv = EtcdKv::new(etcd.addr);
    let mut servers = Vec::new();
    for _ in 0..3 {
        servers.push(
            interop::server::start(SocketAddr::from(([127, 0, 0, 1], 0)))
                .await
                .expect("an interop server"),
        );
    }
    let (a, b, c) = (servers[0].addr, servers[1].addr, servers[2].addr);
    kv.register("svc/a", a).await.expect("put");

    let hold = Arc::new(Semaphore::new(0));
    let mut builder = EtcdResolverBuilder::new();
    builder.hold_after_read = Some(hold.clone());
    let channel = Channel::builder(format!("etcd://{}/svc", etcd.addr))
        .resolver(builder)
        .default_service_config(r#"{"loadBalancingConfig":[{"round_robin":{}}]}"#)
        .build()
        .expect("a channel");
    // The first read published A; the task now waits before watching from that read's revision + 1.
    converge(&channel, &[a], Duration::from_secs(5)).await;

    // Meanwhile the set changes and etcd compacts past those changes.
    kv.register("svc/b", b).await.expect("put");
    let revision = kv.delete("svc/a").await.expect("delete");
    kv.compact(revision).await.expect("compact");
    // The watch starts at a compacted revision: etcd cancels it, and the second round's full read gives B.
    hold.add_permits(2);
    converge(&channel, &[b], Duration::from_secs(5)).await;

    // The new watch follows from there.
    kv.register("svc/c", c).await.expect("put");
    converge(&channel, &[b, c], Duration::from_secs(2)).await;
    assert_eq!(
        hold.available_permits(),
        0,
        "exactly two rounds: one compacted, one watching"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_full_read_pages_through_the_prefix_at_one_revision() {
    let Some(etcd) = Etcd::start() else { return };
    let kv = EtcdKv::new(etcd.addr);
    let keys = 2 * super::PAGE as usize + 7;
    for i in 0..keys {
        let value = format!(r#"{{"Addr":"10.0.{}.{}:1"}}"#, i >> 8, i & 0xff);
        kv.put(&format!("svc/{i:04}"), &value).await.expect("put");
    }
    // Neighbours of the prefix: not read.
    kv.put("svc", "v").await.expect("put");
    kv.put("svc0", "v").await.expect("put");
    let revision = kv.put("svc-old/x", "v").await.expect("put");
    let channel = Channel::builder(format!("ipv4:{}", etcd.addr))
        .build()
        .expect("a channel");
    let table = crate::table::Table::new("svc");
    let (read_at, snapshot) = super::read_prefix(&channel, &table).await.expect("a read");
    assert_eq!(read_at, revision);
    let read: Vec<String> = snapshot
        .keys()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    let want: Vec<String> = (0..keys).map(|i| format!("svc/{i:04}")).collect();
    assert_eq!(read, want);
}

#[tokio::test]
async fn a_stale_resolve_now_permit_does_not_cut_the_next_backoff() {
    let wake = tokio::sync::Notify::new();
    // resolve_now during a round: nobody waits, a permit is stored.
    wake.notify_one();
    super::drop_stale_permit(&wake).await;
    let cut = tokio::select! {
        biased;
        () = wake.notified() => true,
        () = std::future::ready(()) => false,
    };
    assert!(!cut, "the stale permit would have cut the backoff short");
    // Without a permit, nothing is waited for.
    super::drop_stale_permit(&wake).await;
}

#[test]
fn only_the_receive_limit_counts_as_too_large() {
    use grpc_channel::{Code, Status};
    let limit = Status::new(
        Code::ResourceExhausted,
        "response message larger than the limit (9000000 vs. 8388608 bytes: the channel's)",
    );
    assert!(super::too_large(&limit));
    let busy = Status::new(Code::ResourceExhausted, "etcdserver: too many requests");
    assert!(!super::too_large(&busy));
    assert!(!super::too_large(&Status::new(
        Code::Unavailable,
        "larger than the limit"
    )));
}
