//! The etcd resolver against a real etcd (`interop::etcd`: Debian's `etcd-server` on loopback with a
//! temporary data directory) and real interop servers as backends, through a channel to
//! `etcd://127.0.0.1:PORT/NAME` with round_robin: both value formats, garbage ignored, the prefix not
//! leaking, a deleted key's traffic stopping and an added key's starting within a second, etcd killed
//! mid-run with no failed call, then restarted with a changed set. Without etcd the tests say so and pass,
//! unless `ETCD_REQUIRED` is set (CI). Every wait is bounded.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use grpc_channel::{Channel, Request, Status};
use grpc_etcd_resolver::EtcdResolverBuilder;
use interop::etcd::{Etcd, EtcdKv};
use interop::server::ServerHandle;
use interop_proto::paths;

const ROUND_ROBIN: &str = r#"{"loadBalancingConfig":[{"round_robin":{}}]}"#;

async fn backends(n: usize) -> Vec<ServerHandle> {
    let mut servers = Vec::new();
    for _ in 0..n {
        servers.push(
            interop::server::start(SocketAddr::from(([127, 0, 0, 1], 0)))
                .await
                .expect("an interop server"),
        );
    }
    servers
}

fn channel(etcd: &Etcd, name: &str) -> Channel {
    Channel::builder(format!("etcd://{}/{name}", etcd.addr))
        .resolver(
            EtcdResolverBuilder::new()
                .with_backoff(Duration::from_millis(100), Duration::from_secs(1)),
        )
        .default_service_config(ROUND_ROBIN)
        .service_config_lookup(false)
        .build()
        .expect("a channel to etcd://")
}

/// One call; the server that answered it.
async fn call(channel: &Channel) -> Result<String, Status> {
    let request = interop_proto::SimpleRequest {
        fill_server_id: true,
        ..interop_proto::SimpleRequest::default()
    };
    let response: grpc_channel::Response<interop_proto::SimpleResponse> = channel
        .unary(
            paths::UNARY_CALL,
            Request::new(request).with_timeout(Duration::from_secs(5)),
        )
        .await?;
    Ok(response.into_inner().server_id)
}

/// The servers `n` calls reached; every call must succeed.
async fn spread(channel: &Channel, n: usize) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for i in 0..n {
        match call(channel).await {
            Ok(id) => {
                seen.insert(id);
            }
            Err(status) => panic!("call {i} of {n} failed: {status}"),
        }
    }
    seen
}

fn ids(servers: &[&ServerHandle]) -> BTreeSet<String> {
    servers.iter().map(|s| s.addr.to_string()).collect()
}

/// Calls until `n` calls in a row reach exactly `want` (every call must succeed), within `limit` of
/// `since`; returns how long it took.
async fn converge(
    channel: &Channel,
    want: &BTreeSet<String>,
    since: Instant,
    limit: Duration,
) -> Duration {
    loop {
        let seen = spread(channel, 2 * want.len()).await;
        if &seen == want {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < limit,
            "after {:?} the calls still reach {seen:?}, not {want:?}",
            since.elapsed()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_formats_round_robin_and_garbage_and_other_prefixes_ignored() {
    let Some(etcd) = Etcd::start() else { return };
    let kv = EtcdKv::new(etcd.addr);
    let servers = backends(3).await;
    let (a, b, c) = (&servers[0], &servers[1], &servers[2]);
    // etcd ≥ 3.5's endpoints.Manager format, and 3.4's with Op 0.
    kv.register(&format!("svc/{}", a.addr), a.addr)
        .await
        .expect("put");
    kv.put(
        &format!("svc/{}", b.addr),
        &format!(
            r#"{{"Op":0,"Addr":"{}","Metadata":{{"zone":"z1"}}}}"#,
            b.addr
        ),
    )
    .await
    .expect("put");
    // Not endpoints of svc: garbage values, an Op 1, and keys of other names sharing the prefix "svc".
    kv.put("svc/garbage", "not json").await.expect("put");
    kv.put("svc/no-addr", r#"{"Metadata":1}"#)
        .await
        .expect("put");
    kv.put("svc/deleted", &format!(r#"{{"Op":1,"Addr":"{}"}}"#, c.addr))
        .await
        .expect("put");
    kv.register(&format!("svc-old/{}", c.addr), c.addr)
        .await
        .expect("put");
    kv.register("svc", c.addr).await.expect("put");

    let channel = channel(&etcd, "svc");
    let seen = spread(&channel, 20).await;
    assert_eq!(
        seen,
        ids(&[a, b]),
        "round_robin over both registrations only"
    );

    // A garbage write later is ignored too; the channel goes on.
    kv.put("svc/garbage-2", "{\"Addr\":").await.expect("put");
    assert_eq!(spread(&channel, 10).await, ids(&[a, b]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_key_stops_and_an_added_key_starts_within_a_second() {
    let Some(etcd) = Etcd::start() else { return };
    let kv = EtcdKv::new(etcd.addr);
    let servers = backends(3).await;
    let (a, b, c) = (&servers[0], &servers[1], &servers[2]);
    kv.register("svc/a", a.addr).await.expect("put");
    kv.register("svc/b", b.addr).await.expect("put");
    let channel = channel(&etcd, "svc");
    assert_eq!(spread(&channel, 10).await, ids(&[a, b]));

    let start = Instant::now();
    kv.delete("svc/b").await.expect("delete");
    let took = converge(&channel, &ids(&[a]), start, Duration::from_secs(1)).await;
    eprintln!("the deleted key's traffic stopped after {took:?}");

    let start = Instant::now();
    kv.register("svc/c", c.addr).await.expect("put");
    let took = converge(&channel, &ids(&[a, c]), start, Duration::from_secs(1)).await;
    eprintln!("the added key's traffic started after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_killed_calls_go_on_then_restarted_with_a_changed_set() {
    let Some(mut etcd) = Etcd::start() else {
        return;
    };
    let kv = EtcdKv::new(etcd.addr);
    let servers = backends(3).await;
    let (a, b, c) = (&servers[0], &servers[1], &servers[2]);
    kv.register("svc/a", a.addr).await.expect("put");
    kv.register("svc/b", b.addr).await.expect("put");
    let channel = channel(&etcd, "svc");
    assert_eq!(spread(&channel, 10).await, ids(&[a, b]));

    // etcd crashes: the channel keeps its endpoints and no call fails, for longer than several backoffs.
    etcd.kill();
    let until = Instant::now() + Duration::from_secs(3);
    let mut calls = 0;
    while Instant::now() < until {
        assert_eq!(spread(&channel, 10).await, ids(&[a, b]));
        calls += 10;
    }
    eprintln!("{calls} calls while etcd was down, none failed");

    // Back on the same data, with a changed set: the resolver resynchronises and follows it.
    etcd.restart();
    kv.delete("svc/a").await.expect("delete");
    kv.register("svc/c", c.addr).await.expect("put");
    let start = Instant::now();
    let took = converge(&channel, &ids(&[b, c]), start, Duration::from_secs(15)).await;
    eprintln!("the channel followed the changed set {took:?} after the writes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_prefix_fails_calls_until_a_key_is_added() {
    let Some(etcd) = Etcd::start() else { return };
    let kv = EtcdKv::new(etcd.addr);
    let servers = backends(1).await;
    let channel = channel(&etcd, "svc");
    let status = call(&channel).await.expect_err("no endpoint yet");
    assert_eq!(status.code(), grpc_channel::Code::Unavailable, "{status}");
    assert!(status.message().contains("no endpoint"), "{status}");
    kv.register("svc/a", servers[0].addr).await.expect("put");
    // Calls fail until the watch brings the key (milliseconds), then reach it.
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        match call(&channel).await {
            Ok(id) => {
                assert_eq!(id, servers[0].addr.to_string());
                break;
            }
            Err(status) => assert!(Instant::now() < until, "still failing: {status}"),
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_without_a_name_fails_the_calls() {
    let channel = Channel::builder("etcd://127.0.0.1:1/")
        .resolver(EtcdResolverBuilder::new())
        .build();
    let status = match channel {
        Err(error) => {
            assert!(error.to_string().contains("NAME"), "{error}");
            return;
        }
        Ok(channel) => call(&channel).await.expect_err("no name"),
    };
    assert_eq!(status.code(), grpc_channel::Code::Unavailable, "{status}");
    assert!(status.message().contains("NAME"), "{status}");
}

/// Waits (5 s at most) until etcd counts `n` watchers; panics with `what` (given the count seen) if not.
async fn watchers_become(etcd: &Etcd, n: u64, what: &str) {
    let until = Instant::now() + Duration::from_secs(5);
    while etcd_watchers(etcd) != Some(n) {
        assert!(Instant::now() < until, "{what}: {:?}", etcd_watchers(etcd));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// etcd's gauge of its watchers (`etcd_debugging_mvcc_watcher_total` on `/metrics`).
fn etcd_watchers(etcd: &Etcd) -> Option<u64> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(etcd.addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        etcd.addr
    )
    .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("etcd_debugging_mvcc_watcher_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_channel_stops_the_watch() {
    let Some(etcd) = Etcd::start() else { return };
    let kv = EtcdKv::new(etcd.addr);
    let servers = backends(1).await;
    kv.register("svc/a", servers[0].addr).await.expect("put");
    let channel = channel(&etcd, "svc");
    assert_eq!(spread(&channel, 2).await, ids(&[&servers[0]]));
    watchers_become(&etcd, 1, "no watcher in etcd").await;
    channel.close();
    watchers_become(&etcd, 0, "the watch outlived the channel, watchers").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_etcd_endpoints_one_of_them_down() {
    let Some(etcd) = Etcd::start() else { return };
    let kv = EtcdKv::new(etcd.addr);
    let servers = backends(2).await;
    kv.register("svc/a", servers[0].addr).await.expect("put");
    kv.register("svc/b", servers[1].addr).await.expect("put");
    // A member that is down (nothing listens on port 1) and the live one by host name.
    let resolver = EtcdResolverBuilder::new()
        .with_endpoints([
            "127.0.0.1:1".to_owned(),
            format!("localhost:{}", etcd.addr.port()),
        ])
        .with_backoff(Duration::from_millis(100), Duration::from_secs(1));
    let channel = Channel::builder("etcd:///svc")
        .resolver(resolver)
        .default_service_config(ROUND_ROBIN)
        .build()
        .expect("a channel to etcd:///svc");
    assert_eq!(spread(&channel, 10).await, ids(&[&servers[0], &servers[1]]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_over_tls() {
    let ca = interop::tls::TestCa::new("etcd test CA").expect("a CA");
    let server = ca
        .issue(&["localhost", "127.0.0.1"], interop::tls::Usage::Server)
        .expect("a server certificate");
    let Some(etcd) = Etcd::start_with(Some((&server.cert_pem, &server.key_pem))) else {
        return;
    };
    let tls = || grpc_channel::TlsConfig::new().ca_certificate_pem(ca.cert_pem.clone());
    let kv = EtcdKv::with_tls(etcd.addr, Some(tls().server_name("localhost")));
    let servers = backends(1).await;
    kv.register("svc/a", servers[0].addr).await.expect("put");
    let channel = Channel::builder(format!("etcd://localhost:{}/svc", etcd.addr.port()))
        .resolver(EtcdResolverBuilder::new().with_tls(tls()))
        .build()
        .expect("a channel");
    assert_eq!(spread(&channel, 3).await, ids(&[&servers[0]]));
}

// ---------------------------------------------------------------------------------------------------
// Writes the tests above do not make: a Txn (what `endpoints.Manager::Update` commits) and a ranged
// DeleteRange (`etcdctl del --prefix`), each of several keys at one revision.

fn registration(addr: SocketAddr) -> String {
    format!(r#"{{"Addr":"{addr}","Metadata":null}}"#)
}

/// Calls until `2 * want.len()` calls in a row succeed and reach exactly `want`, within `limit`; failed
/// calls are retried (the channel may not know an endpoint yet). Panics with what it saw last.
async fn reaches_within(channel: &Channel, want: &BTreeSet<String>, limit: Duration) {
    let start = Instant::now();
    loop {
        let mut seen = BTreeSet::new();
        let mut failed = None;
        for _ in 0..2 * want.len() {
            match call(channel).await {
                Ok(id) => {
                    seen.insert(id);
                }
                Err(status) => {
                    failed = Some(status);
                    break;
                }
            }
        }
        let last = match failed {
            None if &seen == want => return,
            None => format!("the calls reach {seen:?}"),
            Some(status) => format!("a call failed: {status}"),
        };
        assert!(
            start.elapsed() < limit,
            "after {:?}, not {want:?}: {last}",
            start.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `endpoints.Manager::Update` adds several endpoints in one Txn: one revision, several PUT events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_txn_adding_two_endpoints_adds_both() {
    let Some(etcd) = Etcd::start() else { return };
    let kv = EtcdKv::new(etcd.addr);
    let servers = backends(3).await;
    let (a, b, c) = (&servers[0], &servers[1], &servers[2]);
    kv.register("svc/a", a.addr).await.expect("put");
    let channel = channel(&etcd, "svc");
    reaches_within(&channel, &ids(&[a]), Duration::from_secs(5)).await;
    kv.txn_put(&[
        ("svc/b".to_owned(), registration(b.addr)),
        ("svc/c".to_owned(), registration(c.addr)),
    ])
    .await
    .expect("a txn");
    reaches_within(&channel, &ids(&[a, b, c]), Duration::from_secs(1)).await;
}

/// `etcdctl del --prefix`-like: one DeleteRange removes two keys at one revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ranged_delete_of_two_keys_removes_both() {
    let Some(etcd) = Etcd::start() else { return };
    let kv = EtcdKv::new(etcd.addr);
    let servers = backends(3).await;
    let (a, b, c) = (&servers[0], &servers[1], &servers[2]);
    kv.register("svc/a", a.addr).await.expect("put");
    kv.register("svc/b", b.addr).await.expect("put");
    kv.register("svc/c", c.addr).await.expect("put");
    let channel = channel(&etcd, "svc");
    reaches_within(&channel, &ids(&[a, b, c]), Duration::from_secs(5)).await;
    // [svc/a, svc/c): svc/a and svc/b, at one revision.
    kv.delete_range("svc/a", "svc/c").await.expect("a delete");
    reaches_within(&channel, &ids(&[c]), Duration::from_secs(1)).await;
}

/// Values past `MAX_VALUE_BYTES` are "ignored and logged": a few of etcd's largest values (1.5 MiB
/// requests by default) must not stop the resolver from reading the valid key beside them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_values_under_the_prefix_do_not_hide_the_valid_ones() {
    let Some(etcd) = Etcd::start() else { return };
    let kv = EtcdKv::new(etcd.addr);
    let servers = backends(1).await;
    let big = "x".repeat(1400 * 1024);
    for i in 0..7 {
        kv.put(&format!("svc/big-{i}"), &big)
            .await
            .expect("a large put");
    }
    kv.register("svc/z", servers[0].addr).await.expect("put");
    let channel = channel(&etcd, "svc");
    reaches_within(&channel, &ids(&[&servers[0]]), Duration::from_secs(5)).await;
}

/// Keys whose values are not endpoints hold no place in the table, and the table is "a function of
/// what etcd holds under the prefix, whether it was read whole or followed event by event": so a valid
/// key after many garbage keys is one of the endpoints after a full read too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_keys_do_not_hide_a_valid_key_from_the_full_read() {
    let Some(etcd) = Etcd::start() else { return };
    let kv = EtcdKv::new(etcd.addr);
    let servers = backends(1).await;
    let garbage = grpc_etcd_resolver::MAX_ENDPOINTS + 300;
    let keys: Vec<(String, String)> = (0..garbage)
        .map(|i| (format!("svc/g{i:05}"), "not json".to_owned()))
        .collect();
    for chunk in keys.chunks(128) {
        kv.txn_put(chunk).await.expect("a txn");
    }
    kv.register("svc/z", servers[0].addr).await.expect("put");
    let channel = channel(&etcd, "svc");
    reaches_within(&channel, &ids(&[&servers[0]]), Duration::from_secs(5)).await;
}

/// Deleting the last key keeps the documented gRPC behaviour: an empty set is an error result, the
/// channel keeps its last endpoints (as grpc-go's and grpc-java's balancers do on a resolver's empty
/// list), so calls go on to the last endpoint; a key registered again is followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_last_key_keeps_the_last_endpoint_until_a_key_is_registered_again() {
    let Some(etcd) = Etcd::start() else { return };
    let kv = EtcdKv::new(etcd.addr);
    let servers = backends(2).await;
    let (a, b) = (&servers[0], &servers[1]);
    kv.register("svc/a", a.addr).await.expect("put");
    let channel = channel(&etcd, "svc");
    reaches_within(&channel, &ids(&[a]), Duration::from_secs(5)).await;
    kv.delete("svc/a").await.expect("delete");
    // Past the time a change takes to arrive, calls still reach the last endpoint.
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        assert_eq!(
            call(&channel)
                .await
                .expect("a call after the last key's delete"),
            a.addr.to_string()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    kv.register("svc/b", b.addr).await.expect("put");
    reaches_within(&channel, &ids(&[b]), Duration::from_secs(1)).await;
}

/// Dropping the channel (no `close`) ends the resolver's watch in etcd too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_channel_stops_the_watch() {
    let Some(etcd) = Etcd::start() else { return };
    let kv = EtcdKv::new(etcd.addr);
    let servers = backends(1).await;
    kv.register("svc/a", servers[0].addr).await.expect("put");
    let channel = channel(&etcd, "svc");
    assert_eq!(spread(&channel, 2).await, ids(&[&servers[0]]));
    watchers_become(&etcd, 1, "no watcher").await;
    drop(channel);
    watchers_become(&etcd, 0, "the watch outlived the dropped channel, watchers").await;
}

/// Several members over TLS: each member is verified against its own host name (as etcd's clientv3
/// does), not all against the first member's. The certificate names `localhost` only; the first
/// member (down) is `127.0.0.1:1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_members_over_tls_each_verified_by_its_own_name() {
    let ca = interop::tls::TestCa::new("etcd test CA").expect("a CA");
    let server = ca
        .issue(&["localhost"], interop::tls::Usage::Server)
        .expect("a server certificate");
    let Some(etcd) = Etcd::start_with(Some((&server.cert_pem, &server.key_pem))) else {
        return;
    };
    let tls = || grpc_channel::TlsConfig::new().ca_certificate_pem(ca.cert_pem.clone());
    let kv = EtcdKv::with_tls(etcd.addr, Some(tls().server_name("localhost")));
    let servers = backends(1).await;
    kv.register("svc/a", servers[0].addr).await.expect("put");
    let resolver = EtcdResolverBuilder::new()
        .with_endpoints([
            "127.0.0.1:1".to_owned(),
            format!("localhost:{}", etcd.addr.port()),
        ])
        .with_tls(tls())
        .with_backoff(Duration::from_millis(100), Duration::from_secs(1));
    let channel = Channel::builder("etcd:///svc")
        .resolver(resolver)
        .build()
        .expect("a channel to etcd:///svc");
    reaches_within(&channel, &ids(&[&servers[0]]), Duration::from_secs(10)).await;
}

/// The watch asks for `prev_kv` (unused: a DELETE is applied by its key) so that one ranged delete of a
/// few large values sends etcd's previous values back in one response past the resolver's 8 MiB limit:
/// the watch fails and the next change waits out a backoff (5 s here) instead of arriving at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_large_values_does_not_break_the_watch() {
    let Some(etcd) = Etcd::start() else { return };
    let kv = EtcdKv::new(etcd.addr);
    let servers = backends(2).await;
    let (a, b) = (&servers[0], &servers[1]);
    kv.register("svc/a", a.addr).await.expect("put");
    let channel = Channel::builder(format!("etcd://{}/svc", etcd.addr))
        .resolver(
            EtcdResolverBuilder::new().with_backoff(Duration::from_secs(5), Duration::from_secs(5)),
        )
        .default_service_config(ROUND_ROBIN)
        .service_config_lookup(false)
        .build()
        .expect("a channel");
    reaches_within(&channel, &ids(&[a]), Duration::from_secs(5)).await;
    let big = "x".repeat(1400 * 1024);
    for i in 0..7 {
        kv.put(&format!("svc/big-{i}"), &big)
            .await
            .expect("a large put");
    }
    kv.delete_range("svc/big-", "svc/big.")
        .await
        .expect("a delete");
    kv.register("svc/b", b.addr).await.expect("put");
    reaches_within(&channel, &ids(&[a, b]), Duration::from_secs(1)).await;
}

/// "An address that several keys name listed once": a key naming a backend by host name and another
/// by IP are one backend, which round_robin must not weigh twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_backend_by_ip_and_by_host_name_is_listed_once() {
    let Some(etcd) = Etcd::start() else { return };
    let kv = EtcdKv::new(etcd.addr);
    let servers = backends(2).await;
    let (a, b) = (&servers[0], &servers[1]);
    kv.register("svc/a", a.addr).await.expect("put");
    kv.put(
        "svc/a-by-name",
        &format!(r#"{{"Addr":"localhost:{}"}}"#, a.addr.port()),
    )
    .await
    .expect("put");
    kv.register("svc/b", b.addr).await.expect("put");
    let channel = channel(&etcd, "svc");
    reaches_within(&channel, &ids(&[a, b]), Duration::from_secs(5)).await;
    let mut to_a = 0;
    for _ in 0..60 {
        if call(&channel).await.expect("a call") == a.addr.to_string() {
            to_a += 1;
        }
    }
    assert_eq!(
        to_a, 30,
        "{to_a} of 60 calls went to the backend two keys name"
    );
}

/// The data directory of the etcd serving `etcd.addr` (read from its command line in /proc).
fn etcd_data_dir(etcd: &Etcd) -> Option<std::path::PathBuf> {
    let listen = format!("--listen-client-urls={}", etcd.url());
    for entry in std::fs::read_dir("/proc").ok()? {
        let Ok(cmdline) = std::fs::read(entry.ok()?.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.contains(&listen) {
            return args
                .iter()
                .find_map(|a| a.strip_prefix("--data-dir="))
                .map(Into::into);
        }
    }
    None
}

/// etcd comes back as a new cluster (its data lost) on the same address: its revision starts again
/// far below the one the resolver followed, and the resolver follows the new store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_back_as_a_new_cluster_with_a_lower_revision() {
    let Some(mut etcd) = Etcd::start() else {
        return;
    };
    let kv = EtcdKv::new(etcd.addr);
    let servers = backends(2).await;
    let (a, b) = (&servers[0], &servers[1]);
    for i in 0..50 {
        kv.put(&format!("other/{i}"), "v").await.expect("put");
    }
    kv.register("svc/a", a.addr).await.expect("put");
    let channel = channel(&etcd, "svc");
    reaches_within(&channel, &ids(&[a]), Duration::from_secs(5)).await;
    let data = etcd_data_dir(&etcd).expect("etcd's data directory");
    etcd.kill();
    std::fs::remove_dir_all(&data).expect("etcd's data removed");
    etcd.restart();
    let revision = kv.register("svc/b", b.addr).await.expect("put");
    assert!(revision < 10, "a new store: revision {revision}");
    reaches_within(&channel, &ids(&[b]), Duration::from_secs(10)).await;
}
