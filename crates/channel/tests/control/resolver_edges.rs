//! Edges of the public resolver API (`grpc_channel::resolver`), written from outside the crate with public
//! items only: a per-channel override of `dns` and the bare `host:port` targets it should cover, a scheme
//! that is no URI scheme, gRFC A21 (an oversized config: the endpoints still apply; an invalid config after
//! a good one told to the resolver), target parsing (percent-encoding, a query), a host-name endpoint, the authority and TLS server name of a custom
//! target, a GOAWAY reaching a custom resolver, a burst of ResolveNow collapsing, very large intervals, no
//! resolver (or a task it spawned) outliving its channel, `close()` and calls waiting for a first result,
//! `update()` racing `close()`, and DNS refresh ending with the channel and never running sooner than the
//! minimum interval.

use grpc_test_support as support;

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::resolver::{
    Address, Endpoint, ResolverError, ResolverTarget, ResolverUpdate, UpdateError,
};
use grpc_channel::{Channel, Code, Request, ResolverOptions};
use interop::dns::TestDns;
use interop::server::{self};
use interop_proto::{paths, SimpleRequest, SimpleResponse};
use support::h2_server::{defaults, handler, H2Server};
use tokio::net::UdpSocket;
use tokio::time::Instant;

use super::plugins::{
    backends, channel_with, endpoint, two_loopbacks_one_name, until_all, which_within, Behaviour,
    Recording, PICK_FIRST, ROUND_ROBIN,
};

/// A port nothing listens on.
fn dead_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let a = l.local_addr().expect("addr");
    drop(l);
    a
}

/// One call (5 s deadline); the server that answered it.
async fn which(ch: &Channel) -> Result<String, grpc_channel::Status> {
    which_within(ch, DEADLINE).await
}

const DEADLINE: Duration = Duration::from_secs(5);

/// The target a resolver is built with for `text` (its build fails, so nothing waits).
async fn target_seen(scheme: &'static str, text: &str) -> ResolverTarget {
    let (builder, probe) = Recording::new(scheme, Vec::new());
    let builder = builder.behaving(Behaviour::FailBuild);
    let ch = Channel::builder(text)
        .resolver(builder)
        .build()
        .unwrap_or_else(|e| panic!("{text}: {e}"));
    let _ = which(&ch).await;
    let seen = probe.target.lock().clone();
    seen.unwrap_or_else(|| panic!("{text}: no resolver was built"))
}

// ---------------------------------------------------------------------------------------------------
// Which builder a target gets.

/// "A registered scheme also overrides a built-in one (`dns`, ...)", and "a target without a scheme is a
/// DNS name": a channel's own `dns` resolver must resolve `host:port` too (grpc-go: an unregistered
/// "scheme" falls back to the default scheme, whose builder is looked up in the registry, so an override
/// of `dns` covers bare targets).
#[tokio::test]
async fn a_dns_override_on_the_channel_also_resolves_bare_host_port_targets() {
    let servers = backends(1).await;
    let (builder, probe) = Recording::new("dns", vec![endpoint(servers[0].addr)]);
    let ch = Channel::builder("backend.invalid:50051")
        .resolver(builder)
        .resolver_options(ResolverOptions::default().with_query_timeout(Duration::from_secs(1)))
        .build()
        .expect("channel");
    let answered = which(&ch).await;
    assert_eq!(
        probe.builds.load(Ordering::SeqCst),
        1,
        "the channel's own dns resolver was not used for a bare host:port (the call: {answered:?})"
    );
    assert_eq!(answered.expect("call"), servers[0].addr.to_string());
}

/// A builder whose scheme can never match a target (not an RFC 3986 scheme: `_`) is refused with a
/// reason naming it: per channel by `build()`, process-wide by `register`.
#[tokio::test]
async fn a_resolver_scheme_that_is_no_uri_scheme_is_refused_with_a_reason() {
    let (builder, probe) = Recording::new("my_reg", Vec::new());
    let text = Channel::builder("my_reg:///svc")
        .resolver(builder)
        .build()
        .expect_err("no target can name my_reg")
        .to_string();
    assert!(
        text.contains("\"my_reg\"") && text.contains("scheme") && !text.contains("port"),
        "a registered scheme that cannot be used: the error should say so, not: {text}"
    );
    assert_eq!(probe.builds.load(Ordering::SeqCst), 0);
    let (builder, _probe) = Recording::new("my_reg", Vec::new());
    match grpc_channel::resolver::register(builder) {
        Err(ResolverError::InvalidScheme(scheme)) => assert_eq!(scheme, "my_reg"),
        other => panic!("registered a scheme no target can name: {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------------
// Target parsing.

/// A target is a URI: its path is percent-decoded (grpc-go's `Target.Endpoint()` is `URL.Path`, decoded).
#[tokio::test]
async fn a_custom_targets_endpoint_is_percent_decoded() {
    let t = target_seen("pct", "pct://reg:1/team%2Fsvc%20a").await;
    assert_eq!(t.authority(), "reg:1");
    assert_eq!(t.endpoint(), "team/svc a", "{t:?}");
}

/// A query is not part of the endpoint (grpc-go: `URL.Path` has no query; the query is `URL.RawQuery`).
#[tokio::test]
async fn a_custom_targets_query_is_not_part_of_its_endpoint() {
    let t = target_seen("qry", "qry:///svc?region=eu").await;
    assert_eq!(t.endpoint(), "svc", "{t:?}");
    assert_eq!(t.query(), "region=eu", "{t:?}");
}

#[tokio::test]
async fn custom_target_forms_and_an_unknown_schemes_error() {
    let t = target_seen("etcd", "etcd://127.0.0.1:2379/svc/a").await;
    assert_eq!(
        (t.scheme(), t.authority(), t.endpoint()),
        ("etcd", "127.0.0.1:2379", "svc/a")
    );
    let t = target_seen("etcd", "Etcd:///svc").await;
    assert_eq!(
        (t.scheme(), t.authority(), t.endpoint()),
        ("etcd", "", "svc")
    );
    let t = target_seen("etcd", "etcd:svc").await;
    assert_eq!(
        (t.scheme(), t.authority(), t.endpoint()),
        ("etcd", "", "svc")
    );
    let e = Channel::new("unknown-reg://h:1/svc")
        .expect_err("unknown scheme")
        .to_string();
    assert!(
        e.contains("\"unknown-reg\"") && e.contains("dns"),
        "the error names the scheme and the known ones: {e}"
    );
}

// ---------------------------------------------------------------------------------------------------
// What the channel does with an update.

/// gRFC A21: an invalid config keeps the last good one and "the resolver always returns the address list
/// whether or not parsing failed": the new endpoints apply. A config over the size limit is a config the
/// channel will not parse; its update's endpoints are thrown away with it.
#[tokio::test]
async fn an_oversized_config_keeps_the_last_good_one_but_the_new_endpoints_apply() {
    let servers = backends(2).await;
    let (builder, probe) = Recording::new("big-config", vec![endpoint(servers[0].addr)]);
    let ch = channel_with("big-config:///svc", builder);
    assert_eq!(which(&ch).await.expect("call"), servers[0].addr.to_string());
    let huge = format!(r#"{{"x":"{}"}}"#, "a".repeat(300 * 1024));
    let result = probe
        .sink()
        .update(ResolverUpdate::new(vec![endpoint(servers[1].addr)]).with_service_config(huge));
    // The same update with a (small) invalid config: the endpoints apply.
    let mut seen = HashSet::new();
    for _ in 0..20 {
        seen.insert(which(&ch).await.expect("call"));
    }
    assert!(
        seen.contains(&servers[1].addr.to_string()) && !seen.contains(&servers[0].addr.to_string()),
        "the update's endpoints were dropped with its oversized config (update: {result:?}); calls went to {seen:?}"
    );
}

// ---------------------------------------------------------------------------------------------------
// ResolveNow.

/// A backend on `addr` answering its name; [`H2Server::drain`] sends a graceful GOAWAY.
fn named_backend(listener: tokio::net::TcpListener, name: &'static str) -> H2Server {
    H2Server::serve_tcp(
        listener,
        defaults,
        handler(move |mut stream| async move {
            stream.ok(name.as_bytes());
        }),
    )
}

#[tokio::test]
async fn a_goaway_reaches_a_custom_resolver_as_resolve_now() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let backend = named_backend(listener, "a");
    let (builder, probe) = Recording::new("goaway", vec![endpoint(addr)]);
    let builder = builder.config(PICK_FIRST);
    let ch = channel_with("goaway:///svc", builder);
    let r = ch
        .unary_raw(
            "/goaway.Svc/Unary",
            Request::new(Bytes::new()).with_timeout(Duration::from_secs(5)),
        )
        .await
        .expect("call");
    assert_eq!(&r.into_message()[..], b"a");
    assert_eq!(probe.resolve_now.load(Ordering::SeqCst), 0);
    backend.drain();
    for _ in 0..500 {
        if probe.resolve_now.load(Ordering::SeqCst) > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("a GOAWAY never reached the custom resolver");
}

/// 40 endpoints that refuse connections all fail at once: their ResolveNow requests collapse into one now
/// and one deferred to the end of the minimum interval.
#[tokio::test(start_paused = true)]
async fn a_burst_of_resolve_now_collapses_within_the_min_interval() {
    let dead: Vec<Endpoint> = (0..40).map(|_| endpoint(dead_addr())).collect();
    let (builder, probe) = Recording::new("burst", dead);
    let builder = builder.config(ROUND_ROBIN);
    let ch = Channel::builder("burst:///svc")
        .resolver(builder)
        .resolver_options(ResolverOptions::default().with_min_interval(Duration::from_secs(10)))
        .build()
        .expect("channel");
    ch.connect();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let early = probe.resolve_now.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let later = probe.resolve_now.load(Ordering::SeqCst);
    assert!(
        (1..=1).contains(&early) && (1..=2).contains(&later),
        "{early} by 5 s, {later} by 15 s"
    );
}

// ---------------------------------------------------------------------------------------------------
// Life cycle.

/// Twenty channels, used then dropped (or closed, or dropped while a wait-for-ready call waits for a first
/// result): every resolver and every task one spawned ends.
#[tokio::test]
async fn no_resolver_or_task_it_spawned_outlives_its_channel() {
    let servers = backends(1).await;
    let mut probes = Vec::new();
    for i in 0..20 {
        let publishes = i % 4 != 3;
        let first = if publishes {
            vec![endpoint(servers[0].addr)]
        } else {
            Vec::new()
        };
        let (builder, probe) = Recording::new("leak", first);
        let ch = channel_with("leak:///svc", builder);
        match i % 4 {
            0 => {
                which(&ch).await.expect("call");
                drop(ch);
            }
            1 => {
                which(&ch).await.expect("call");
                ch.close();
                drop(ch);
            }
            2 => {
                let clone = ch.clone();
                which(&clone).await.expect("call");
                drop(clone);
                drop(ch);
            }
            _ => {
                let waiting = {
                    let ch = ch.clone();
                    tokio::spawn(async move {
                        let req = Request::new(SimpleRequest::default()).with_wait_for_ready(true);
                        ch.unary::<_, SimpleResponse>(paths::UNARY_CALL, req).await
                    })
                };
                while probe.builds.load(Ordering::SeqCst) == 0 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                waiting.abort();
                let _ = waiting.await;
                drop(ch);
            }
        }
        probes.push(probe);
    }
    let live = || -> isize { probes.iter().map(|p| p.live.load(Ordering::SeqCst)).sum() };
    let deadline = Instant::now() + Duration::from_secs(10);
    while live() != 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(live(), 0, "resolvers or their tasks still alive");
    assert!(probes.iter().all(|p| p.sink().is_closed()));
}

/// A resolver thread updating as fast as it can while the channel closes: no panic, no hang, and once
/// `close()` returned every update says `Closed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_racing_close_ends_in_closed() {
    let servers = backends(2).await;
    for _ in 0..10 {
        let (builder, probe) = Recording::new("race", vec![endpoint(servers[0].addr)]);
        let ch = channel_with("race:///svc", builder);
        which(&ch).await.expect("call");
        let sink = probe.sink();
        let stop = Arc::new(AtomicBool::new(false));
        let hammer = {
            let (sink, stop) = (sink.clone(), stop.clone());
            let eps = [endpoint(servers[0].addr), endpoint(servers[1].addr)];
            std::thread::spawn(move || {
                let mut n = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let _ = sink.update(ResolverUpdate::new(vec![eps[n % 2].clone()]));
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        ch.close();
        assert_eq!(
            sink.update(ResolverUpdate::new(vec![endpoint(servers[0].addr)])),
            Err(UpdateError::Closed)
        );
        stop.store(true, Ordering::SeqCst);
        hammer.join().expect("no panic in update");
        let status = which(&ch).await.expect_err("closed");
        assert_ne!(status.code(), Code::Ok);
    }
}

// ---------------------------------------------------------------------------------------------------
// DNS refresh, counted at a relay in front of the test DNS server.

/// A UDP relay to `upstream` counting the queries it passes.
async fn counting_relay(upstream: SocketAddr) -> (SocketAddr, Arc<AtomicUsize>) {
    let front = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("bind"));
    let addr = front.local_addr().expect("addr");
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        loop {
            let Ok((n, client)) = front.recv_from(&mut buf).await else {
                return;
            };
            counted.fetch_add(1, Ordering::SeqCst);
            let query = buf[..n].to_vec();
            let front = front.clone();
            tokio::spawn(async move {
                let back = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
                let _ = back.send_to(&query, upstream).await;
                let mut answer = vec![0u8; 4096];
                if let Ok(Ok((m, _))) =
                    tokio::time::timeout(Duration::from_secs(2), back.recv_from(&mut answer)).await
                {
                    let _ = front.send_to(&answer[..m], client).await;
                }
            });
        }
    });
    (addr, count)
}

#[tokio::test(start_paused = true)]
async fn dns_refresh_is_never_sooner_than_the_min_interval_and_ends_with_the_channel() {
    let first = server::start("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("server");
    let dns = TestDns::start().await.expect("dns");
    dns.add_a("svc.test", Ipv4Addr::new(127, 0, 0, 1)).await;
    let (relay, queries) = counting_relay(dns.addr).await;
    let ch = Channel::builder(format!("dns://{relay}/svc.test:{}", first.addr.port()))
        .resolver_options(
            ResolverOptions::default()
                .with_min_interval(Duration::from_secs(5))
                .with_refresh_interval(Some(Duration::from_millis(100))),
        )
        .build()
        .expect("channel");
    assert_eq!(which(&ch).await.expect("call"), first.addr.to_string());
    let per_resolution = queries.load(Ordering::SeqCst);
    assert!(per_resolution > 0);
    // 30 s: at most one resolution per 5 s (6 more), not one per 100 ms.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let after = queries.load(Ordering::SeqCst);
    assert!(
        after <= per_resolution * 8,
        "{after} queries in 30 s ({per_resolution} per resolution)"
    );
    assert!(after > per_resolution, "refresh ran: {after}");
    // Closed: no query any more.
    ch.close();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let at_close = queries.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        queries.load(Ordering::SeqCst),
        at_close,
        "the DNS refresh outlived close()"
    );
    // Dropped (never closed): the same.
    let ch = Channel::builder(format!("dns://{relay}/svc.test:{}", first.addr.port()))
        .resolver_options(
            ResolverOptions::default()
                .with_min_interval(Duration::from_secs(5))
                .with_refresh_interval(Some(Duration::from_secs(5))),
        )
        .build()
        .expect("channel");
    which(&ch).await.expect("call");
    drop(ch);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let at_drop = queries.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        queries.load(Ordering::SeqCst),
        at_drop,
        "the DNS refresh outlived the channel"
    );
}

// ---------------------------------------------------------------------------------------------------
// What a registry hands a resolver.

/// A registry names its backends `host:port` (etcd's `Addr`, Consul, Kubernetes pod names): the public
/// `Address::Name` carries that, and grpc-go dials such an address by resolving it. Here a name is only
/// connected through a proxy; without one every connection attempt fails ("no proxy to resolve") and so
/// does every call.
#[tokio::test]
async fn a_host_name_endpoint_from_a_resolver_is_connected_without_a_proxy() {
    let servers = backends(1).await;
    let name = Endpoint::new(Address::Name {
        host: "localhost".into(),
        port: servers[0].addr.port(),
    });
    let (builder, _probe) = Recording::new("names", vec![name]);
    let ch = Channel::builder("names:///svc")
        .resolver(builder)
        .no_proxy()
        .build()
        .expect("channel");
    match which(&ch).await {
        Ok(id) => assert_eq!(id, servers[0].addr.to_string()),
        Err(status) => panic!(
            "a host:port endpoint from a resolver cannot be reached: {:?} {}",
            status.code(),
            status.message()
        ),
    }
}

/// A21 and grpc-go (`updateResolverStateAndUnlock`: `ret = balancer.ErrBadResolverState` whenever the
/// config does not parse, the previous one kept or not): the resolver learns that its config was not
/// used, so a polling resolver retries it with backoff. Here the update says `Ok` while the channel keeps
/// the previous config.
#[tokio::test]
async fn an_invalid_config_after_a_good_one_is_reported_to_the_resolver() {
    let servers = backends(2).await;
    let (builder, probe) = Recording::new("bad-after-good", vec![endpoint(servers[0].addr)]);
    let builder = builder.config(ROUND_ROBIN);
    let ch = channel_with("bad-after-good:///svc", builder);
    which(&ch).await.expect("call");
    let result = probe.sink().update(
        ResolverUpdate::new(vec![endpoint(servers[0].addr), endpoint(servers[1].addr)])
            .with_service_config(r#"{"loadBalancingConfig":[{"no_such_policy":{}}]}"#),
    );
    // The endpoints apply all the same (A21), under the previous config (round_robin).
    until_all(&ch, &[servers[0].addr, servers[1].addr], Some(DEADLINE)).await;
    assert!(
        matches!(result, Err(UpdateError::Rejected(_))),
        "the resolver is not told its config was not used: {result:?}"
    );
}

/// The channel's authority (and TLS server name) for `scheme:///NAME` is NAME, as in grpc-go; when NAME is
/// no valid authority (`team/payments`, a common registry key) a TLS channel has no name to verify its
/// backends against: it is refused unless the application names one (`ChannelBuilder::authority` or
/// `TlsConfig::server_name`), never verified as a name the application did not give (`localhost`).
#[tokio::test]
async fn a_tls_channel_to_a_custom_target_does_not_verify_backends_as_localhost() {
    use interop::tls::{server_config, TestCa, Usage};
    let ca = TestCa::new("resolver edges CA").expect("CA");
    let leaf = ca.issue(&["localhost"], Usage::Server).expect("leaf");
    let config = server_config(&leaf, &[b"h2"], None).expect("server config");
    let server = interop::server::start_tls("127.0.0.1:0".parse().expect("addr"), config)
        .await
        .expect("server");
    let tls = || grpc_channel::TlsConfig::new().ca_certificate_pem(ca.cert_pem.clone());
    let (builder, _probe) = Recording::new("tls-reg", vec![endpoint(server.addr)]);
    let refused = Channel::builder("tls-reg:///team/payments")
        .resolver(builder)
        .tls(tls())
        .build()
        .expect_err("no name to verify")
        .to_string();
    assert!(
        refused.contains("team/payments") && refused.contains("authority"),
        "{refused}"
    );
    // A name the application gives is verified: a wrong one fails, the right one passes.
    let (builder, _probe) = Recording::new("tls-reg", vec![endpoint(server.addr)]);
    let ch = Channel::builder("tls-reg:///team/payments")
        .resolver(builder)
        .tls(tls())
        .authority("payments.example:443")
        .build()
        .expect("an explicit authority");
    assert!(which(&ch).await.is_err(), "verified as payments.example");
    let (builder, _probe) = Recording::new("tls-reg", vec![endpoint(server.addr)]);
    let ch = Channel::builder("tls-reg:///team/payments")
        .resolver(builder)
        .tls(tls().server_name("localhost"))
        .build()
        .expect("an explicit server name");
    assert_eq!(which(&ch).await.expect("call"), server.addr.to_string());
    // Plaintext keeps a harmless default.
    let (builder, _probe) = Recording::new("plain-reg", vec![endpoint(server.addr)]);
    Channel::builder("plain-reg:///team/payments")
        .resolver(builder)
        .build()
        .expect("plaintext");
}

/// `close()` "stops the resolver: calls still waiting for a first result fail UNAVAILABLE". They do only
/// when the last sink goes; a resolver's task that still holds a clone (blocked on its registry's watch,
/// say, until the registry next speaks) keeps calls with no deadline waiting after the channel closed.
#[tokio::test(start_paused = true)]
async fn close_ends_calls_waiting_for_a_first_result_while_a_sink_clone_lives() {
    let (builder, probe) = Recording::new("held-sink", Vec::new());
    let ch = channel_with("held-sink:///svc", builder);
    let call = |wait_for_ready: bool| {
        let ch = ch.clone();
        tokio::spawn(async move {
            let req = Request::new(SimpleRequest::default()).with_wait_for_ready(wait_for_ready);
            ch.unary::<_, SimpleResponse>(paths::UNARY_CALL, req).await
        })
    };
    let (fail_fast, wait_for_ready) = (call(false), call(true));
    while probe.builds.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The test keeps the sink, as a resolver task blocked on its registry would.
    let _held = probe.sink();
    ch.close();
    for (name, call) in [("fail-fast", fail_fast), ("wait-for-ready", wait_for_ready)] {
        let ended = tokio::time::timeout(Duration::from_secs(5), call).await;
        let status = ended
            .unwrap_or_else(|_| {
                panic!("a {name} call still waits for resolution 5 s after close()")
            })
            .expect("task")
            .expect_err("closed");
        assert_eq!(status.code(), Code::Unavailable, "{name}: {status:?}");
    }
}

/// A minimum interval the application sets very large ("never again", read from a config file as
/// `u64::MAX` seconds): the channel computes `last + min_interval` for the second ResolveNow, which
/// overflows `Instant` and panics in the channel's event loop. The channel must stay usable: a live
/// backend pushed afterwards gets calls.
#[tokio::test(start_paused = true)]
async fn a_huge_min_interval_does_not_panic_the_channel() {
    let servers = backends(1).await;
    let (builder, probe) = Recording::new("huge-interval", vec![endpoint(dead_addr())]);
    let builder = builder.config(ROUND_ROBIN);
    let ch = Channel::builder("huge-interval:///svc")
        .resolver(builder)
        .resolver_options(ResolverOptions::default().with_min_interval(Duration::MAX))
        .build()
        .expect("channel");
    ch.connect();
    // Connection attempts fail again and again (backoff 1 s, 1.6 s, ...), each asking for a ResolveNow.
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(probe.resolve_now.load(Ordering::SeqCst) >= 1);
    probe
        .sink()
        .update(ResolverUpdate::new(vec![endpoint(servers[0].addr)]))
        .expect("update");
    let answered = tokio::time::timeout(Duration::from_secs(30), which(&ch)).await;
    assert!(
        matches!(&answered, Ok(Ok(id)) if *id == servers[0].addr.to_string()),
        "the channel no longer works after the second ResolveNow: {answered:?}"
    );
}

/// The same overflow in DNS refresh: `with_refresh_interval(Some(Duration::MAX))` ("practically never")
/// panics the DNS resolver's task right after its first success (`last + every`), after which the name is
/// never resolved again: a failure's ResolveNow finds nobody, and a moved backend is never found.
#[tokio::test(start_paused = true)]
async fn a_huge_refresh_interval_does_not_kill_the_dns_resolver() {
    assert!(
        moved_backend_found(Some(Duration::MAX)).await,
        "the DNS resolver never resolved again after its first success"
    );
}

/// The same move without refresh: found through the failure's ResolveNow.
#[tokio::test(start_paused = true)]
async fn without_refresh_a_moved_backend_is_found_after_a_failure() {
    assert!(moved_backend_found(None).await);
}

/// A DNS channel to a backend that moves from 127.0.0.1 to 127.0.0.2: whether calls reach the new one
/// within 60 s.
async fn moved_backend_found(refresh: Option<Duration>) -> bool {
    let (first, second, dns) = two_loopbacks_one_name(None).await;
    let ch = Channel::builder(format!("dns://{}/svc.test:{}", dns.addr, first.addr.port()))
        .resolver_options(
            ResolverOptions::default()
                .with_min_interval(Duration::from_secs(1))
                .with_refresh_interval(refresh),
        )
        .build()
        .expect("channel");
    assert_eq!(which(&ch).await.expect("call"), first.addr.to_string());
    // The backend moves: DNS names only the second, and the first goes away.
    dns.remove("svc.test", interop::dns::RecordType::A).await;
    dns.add_a("svc.test", Ipv4Addr::new(127, 0, 0, 2)).await;
    first.shutdown();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if which(&ch).await.ok() == Some(second.addr.to_string()) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// A ResolveNow the channel defers to the end of the minimum interval waits in a task of the channel's;
/// closing or dropping the channel stops it (it did not: the chaos soak counted one task per dropped
/// channel, asleep for the rest of the 30 s interval).
#[tokio::test(start_paused = true)]
async fn dropping_the_channel_stops_a_deferred_resolve_now() {
    let runtime = tokio::runtime::Handle::current();
    let before = runtime.metrics().num_alive_tasks();
    // round_robin reconnects after each backoff, and each failure asks for a re-resolution: the first
    // goes through, the next ones inside the 30 s interval are deferred.
    let ch = Channel::builder(format!("ipv4:{}", dead_addr()))
        .default_service_config(r#"{"loadBalancingConfig":[{"round_robin":{}}]}"#)
        .build()
        .expect("channel");
    ch.connect();
    tokio::time::sleep(Duration::from_secs(5)).await;
    drop(ch);
    let mut alive = runtime.metrics().num_alive_tasks();
    for _ in 0..50 {
        if alive <= before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        alive = runtime.metrics().num_alive_tasks();
    }
    assert!(
        alive <= before,
        "{alive} tasks 5 s after the channel was dropped, {before} before it was built"
    );
}
