//! The resolver against a real DNS server on loopback (an in-process hickory-server). Timing tests use
//! tokio's paused clock as the injected clock: the clock jumps to the next timer when every task waits.

// The test reads the (paused) clock in the channel's place; clippy.toml bans it in the library.
#![allow(clippy::disallowed_methods)]

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use grpc_retry::SplitMix64;
use grpc_service_config::{
    ConfigResult, ConfigSelector, Decision, DnsResolver, LbConfig, ParseOptions, Resolution,
    ResolveError, ResolverOptions, ResolverTask, ServiceConfig,
};
use interop::dns::{silent, TestDns};
use tokio::time::Instant;

const HOST: &str = "svc.test";
const RR: &str = r#"[{"serviceConfig":{"loadBalancingPolicy":"round_robin"}}]"#;

fn options() -> ResolverOptions {
    ResolverOptions::default().with_query_timeout(Duration::from_secs(2))
}

async fn resolve_with(dns: SocketAddr, host: &str, options: ResolverOptions) -> Resolution {
    let r = DnsResolver::new(host, 50051, Some(dns), options).expect("resolver");
    r.resolve(&mut SplitMix64::new(1)).await
}

async fn resolve(dns: &TestDns, host: &str) -> Resolution {
    resolve_with(dns.addr, host, options()).await
}

fn addrs(r: &Resolution) -> Vec<SocketAddr> {
    r.addresses.clone().expect("addresses")
}

fn lb(r: &Resolution) -> &'static str {
    match &r.config {
        ConfigResult::Config(c) => match c.lb_policy() {
            LbConfig::RoundRobin => "round_robin",
            _ => "pick_first",
        },
        ConfigResult::None => "none",
        ConfigResult::Invalid(_) => "invalid",
        ConfigResult::LookupFailed(_) => "lookup failed",
    }
}

#[tokio::test]
async fn several_a_records() {
    let dns = TestDns::start().await.expect("dns");
    for i in 1..=3 {
        dns.add_a(HOST, Ipv4Addr::new(127, 0, 0, i)).await;
    }
    let r = resolve(&dns, HOST).await;
    let mut got = addrs(&r);
    got.sort();
    let want: Vec<SocketAddr> = (1..=3)
        .map(|i| SocketAddr::from(([127, 0, 0, i], 50051)))
        .collect();
    assert_eq!(got, want);
    assert_eq!(lb(&r), "none", "no TXT record: no config");
}

#[tokio::test]
async fn a_and_aaaa_records() {
    let dns = TestDns::start().await.expect("dns");
    dns.add_a(HOST, Ipv4Addr::LOCALHOST).await;
    dns.add_aaaa(HOST, Ipv6Addr::LOCALHOST).await;
    let got = addrs(&resolve(&dns, HOST).await);
    assert!(
        got.contains(&SocketAddr::from((Ipv4Addr::LOCALHOST, 50051))),
        "{got:?}"
    );
    assert!(
        got.contains(&SocketAddr::from((Ipv6Addr::LOCALHOST, 50051))),
        "{got:?}"
    );
}

#[tokio::test]
async fn unknown_host_has_no_addresses() {
    let dns = TestDns::start().await.expect("dns");
    let r = resolve(&dns, "nobody.test").await;
    assert!(
        matches!(r.addresses, Err(ResolveError::NoAddresses { .. })),
        "{:?}",
        r.addresses
    );
}

#[tokio::test]
async fn service_config_from_a_txt_record_split_over_several_strings() {
    let dns = TestDns::start().await.expect("dns");
    dns.add_a(HOST, Ipv4Addr::LOCALHOST).await;
    // Over 255 bytes: the record holds several strings, which must be joined with no separator.
    let long = format!(
        r#"[{{"clientLanguage":["rust"],"serviceConfig":{{"loadBalancingPolicy":"round_robin","methodConfig":[{{"name":[{{"service":"{}"}}],"timeout":"7s"}}]}}}}]"#,
        "a".repeat(300)
    );
    dns.set_service_config(HOST, &long).await;
    let r = resolve(&dns, HOST).await;
    assert_eq!(lb(&r), "round_robin");
    let ConfigResult::Config(c) = &r.config else {
        panic!("{:?}", r.config)
    };
    let path = format!("/{}/M", "a".repeat(300));
    assert_eq!(
        c.method_config(&path).and_then(|m| m.timeout),
        Some(Duration::from_secs(7))
    );
}

#[tokio::test]
async fn txt_record_without_the_prefix_is_no_config() {
    let dns = TestDns::start().await.expect("dns");
    dns.add_a(HOST, Ipv4Addr::LOCALHOST).await;
    dns.set_txt("_grpc_config.svc.test", &["v=spf1 -all"]).await;
    assert_eq!(lb(&resolve(&dns, HOST).await), "none");
}

#[tokio::test]
async fn nxdomain_for_the_txt_name_is_no_config() {
    let dns = TestDns::start().await.expect("dns");
    dns.add_a(HOST, Ipv4Addr::LOCALHOST).await;
    let r = resolve(&dns, HOST).await;
    assert!(r.addresses.is_ok());
    assert_eq!(lb(&r), "none");
}

#[tokio::test]
async fn txt_lookups_can_be_turned_off_and_are_never_made_for_ip_literals_or_localhost() {
    let dns = TestDns::start().await.expect("dns");
    dns.add_a(HOST, Ipv4Addr::LOCALHOST).await;
    dns.set_service_config(HOST, RR).await;
    let off = options().with_txt_lookups(false);
    assert_eq!(lb(&resolve_with(dns.addr, HOST, off).await), "none");
    let literal = resolve(&dns, "127.0.0.7").await;
    assert_eq!(
        addrs(&literal),
        vec![SocketAddr::from(([127, 0, 0, 7], 50051))]
    );
    assert_eq!(lb(&literal), "none");
    dns.set_service_config("localhost", RR).await;
    let r = resolve_with(dns.addr, "localhost", options()).await;
    assert_eq!(lb(&r), "none", "A10: no TXT lookup for localhost");
}

#[tokio::test]
async fn a_bad_config_after_a_good_one_keeps_the_good_one() {
    let dns = TestDns::start().await.expect("dns");
    dns.add_a(HOST, Ipv4Addr::new(127, 0, 0, 1)).await;
    dns.set_service_config(HOST, RR).await;
    let mut selector = ConfigSelector::new(None);
    let first = resolve(&dns, HOST).await;
    let Decision::Use(good) = selector.update(first.config) else {
        panic!("good config used")
    };
    assert_eq!(good.lb_policy(), &LbConfig::RoundRobin);

    dns.set_service_config(
        HOST,
        r#"[{"serviceConfig":{"loadBalancingPolicy":"bogus"}}]"#,
    )
    .await;
    dns.add_a(HOST, Ipv4Addr::new(127, 0, 0, 2)).await;
    let second = resolve(&dns, HOST).await;
    assert_eq!(
        addrs(&second).len(),
        2,
        "the new addresses are still applied"
    );
    match selector.update(second.config) {
        Decision::KeepPrevious(kept, error) => {
            assert_eq!(kept, good);
            assert_eq!(error.path, "$[0].serviceConfig.loadBalancingPolicy");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_first_config_that_is_bad_uses_the_default_or_fails() {
    let dns = TestDns::start().await.expect("dns");
    dns.add_a(HOST, Ipv4Addr::LOCALHOST).await;
    dns.set_service_config(
        HOST,
        r#"[{"serviceConfig":{"methodConfig":[{"name":[{}],"timeout":"x"}]}}]"#,
    )
    .await;
    let r = resolve(&dns, HOST).await;
    let mut without = ConfigSelector::new(None);
    assert!(matches!(
        without.update(r.config.clone()),
        Decision::Fail(_)
    ));
    let default = ServiceConfig::parse(
        r#"{"loadBalancingPolicy":"round_robin"}"#,
        ParseOptions::default(),
    )
    .expect("ok");
    let mut with = ConfigSelector::new(Some(default.clone()));
    assert_eq!(with.update(r.config), Decision::Use(Arc::new(default)));
}

#[tokio::test(start_paused = true)]
async fn a_server_that_does_not_answer_times_out_and_resolution_backs_off() {
    let (_socket, addr) = silent().await.expect("socket");
    let resolver = DnsResolver::new(HOST, 443, Some(addr), options()).expect("resolver");
    let handle = ResolverTask::spawn(resolver, Box::new(SplitMix64::new(5)));
    let mut updates = handle.updates();
    let start = Instant::now();
    let mut at = Vec::new();
    for _ in 0..4 {
        updates.changed().await.expect("update");
        let r = updates.borrow_and_update().clone().expect("resolution");
        assert!(r.addresses.is_err(), "{:?}", r.addresses);
        at.push(start.elapsed().as_secs_f64());
    }
    // Each resolution waits out its query timeouts (2 s per query; hickory makes two here, so the first
    // result comes at 4 s), then the next starts after a backoff of 1 s, 1.6 s, 2.56 s, each ± 20 %.
    let attempt = at[0];
    assert!((2.0..=4.5).contains(&attempt), "{at:?}");
    for (i, base) in [1.0, 1.6, 2.56].iter().enumerate() {
        let backoff = at[i + 1] - at[i] - attempt;
        assert!(
            backoff >= base * 0.8 - 0.001 && backoff <= base * 1.2 + 0.001,
            "backoff {i}: {backoff} vs {base} ({at:?})"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn re_resolution_is_rate_limited_and_only_on_request() {
    let dns = TestDns::start().await.expect("dns");
    dns.add_a(HOST, Ipv4Addr::LOCALHOST).await;
    let resolver = DnsResolver::new(HOST, 443, Some(dns.addr), options()).expect("resolver");
    let handle = ResolverTask::spawn(resolver, Box::new(SplitMix64::new(5)));
    let mut updates = handle.updates();
    let start = Instant::now();
    updates.changed().await.expect("first resolution");
    assert!(start.elapsed() < Duration::from_millis(100));
    updates.borrow_and_update();

    // No polling without a request.
    assert!(
        tokio::time::timeout(Duration::from_secs(300), updates.changed())
            .await
            .is_err()
    );
    // A request 300 s after the last success is served at once.
    let asked = Instant::now();
    handle.resolve_now();
    updates.changed().await.expect("second resolution");
    updates.borrow_and_update();
    assert!(
        asked.elapsed() < Duration::from_millis(100),
        "{:?}",
        asked.elapsed()
    );
    let second = Instant::now();

    // A request 5 s later waits until 30 s after the last resolution; more requests meanwhile add nothing.
    tokio::time::sleep(Duration::from_secs(5)).await;
    handle.resolve_now();
    handle.resolve_now();
    updates.changed().await.expect("third resolution");
    updates.borrow_and_update();
    let gap = second.elapsed();
    assert!(
        gap >= Duration::from_secs(30) && gap < Duration::from_millis(30_100),
        "{gap:?}"
    );
    assert!(
        tokio::time::timeout(Duration::from_secs(300), updates.changed())
            .await
            .is_err()
    );
}

#[tokio::test(start_paused = true)]
async fn a_rejected_resolution_is_retried_with_backoff_and_an_accepted_one_is_not() {
    let dns = TestDns::start().await.expect("dns");
    dns.add_a(HOST, Ipv4Addr::LOCALHOST).await;
    let resolver = DnsResolver::new(HOST, 443, Some(dns.addr), options()).expect("resolver");
    // The channel rejects the first three resolutions (A21: a bad first config and no default).
    let mut rejections = 3;
    let handle = ResolverTask::spawn_with(
        resolver,
        Box::new(SplitMix64::new(5)),
        Box::new(move |_| {
            rejections -= 1;
            rejections < 0
        }),
    );
    let mut updates = handle.updates();
    let start = Instant::now();
    let mut at = Vec::new();
    for _ in 0..4 {
        updates.changed().await.expect("update");
        updates.borrow_and_update();
        at.push(start.elapsed().as_secs_f64());
    }
    for (i, base) in [1.0, 1.6, 2.56].iter().enumerate() {
        let gap = at[i + 1] - at[i];
        assert!(
            gap >= base * 0.8 - 0.01 && gap <= base * 1.2 + 0.01,
            "retry {i}: {gap} vs {base} ({at:?})"
        );
    }
    // Accepted: no more resolutions without a request.
    assert!(
        tokio::time::timeout(Duration::from_secs(300), updates.changed())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn client_hostname_choices_match_the_machine_name_by_default() {
    let me = grpc_service_config::system_hostname().expect("this machine has a host name");
    let dns = TestDns::start().await.expect("dns");
    dns.add_a(HOST, Ipv4Addr::LOCALHOST).await;
    dns.set_service_config(
        HOST,
        &format!(
            r#"[{{"clientHostname":["{me}"],"serviceConfig":{{"loadBalancingPolicy":"round_robin"}}}}]"#
        ),
    )
    .await;
    // No hostname from the application: the OS's is used, and the choice matches.
    assert_eq!(lb(&resolve(&dns, HOST).await), "round_robin");
    // The application's hostname wins over the OS's.
    let other = options().with_hostname(format!("not-{me}"));
    assert_eq!(lb(&resolve_with(dns.addr, HOST, other).await), "none");
}

#[tokio::test]
async fn a_short_name_resolves_through_the_search_list_of_a_resolv_conf() {
    let dns = TestDns::start().await.expect("dns");
    dns.add_a("my-svc.test", Ipv4Addr::new(127, 0, 0, 7)).await;
    dns.set_service_config("my-svc.test", RR).await;
    // resolv.conf names no port, so the target names the loopback server and the resolv.conf its search list.
    let with_search =
        options().with_resolv_conf("nameserver 127.0.0.1\nsearch example.invalid test\n");
    let r = resolve_with(dns.addr, "my-svc", with_search.clone()).await;
    assert_eq!(addrs(&r), ["127.0.0.7:50051".parse().expect("addr")]);
    assert_eq!(
        lb(&r),
        "round_robin",
        "the TXT name goes through the search list too"
    );
    // Without a search list the short name is not found; an absolute name never uses the list.
    let r = resolve_with(dns.addr, "my-svc", options()).await;
    assert!(r.addresses.is_err(), "{:?}", r.addresses);
    let r = resolve_with(dns.addr, "my-svc.", with_search).await;
    assert!(r.addresses.is_err(), "{:?}", r.addresses);
    // A resolv.conf that names no server cannot set up the system resolver.
    let err = DnsResolver::new(
        "my-svc",
        1,
        None,
        options().with_resolv_conf("search test\n"),
    )
    .expect_err("no name server");
    assert!(matches!(err, ResolveError::Setup(_)), "{err:?}");
}
