//! HTTP CONNECT proxies (gRFC A1) through a real proxy, tinyproxy, started on loopback with a generated
//! config (see `interop::tinyproxy`; without tinyproxy these tests say so and pass, unless
//! `TINYPROXY_REQUIRED` is set). The proxy comes from `ChannelBuilder::proxy` here; the environment
//! variables are tested through the interop client's process in `interop/tests/proxy_env.rs`.

use grpc_test_support as support;

use std::net::SocketAddr;

use grpc_channel::{Channel, Code, TlsConfig};
use interop::tinyproxy::{Tinyproxy, TinyproxyOptions};
use interop::tls::{server_config, TestCa, Usage, INTEROP_SERVER_NAMES};
use support::{interop_server_handle as server, served as call};

/// Waits (at most 5 s) until tinyproxy has logged `n` CONNECT requests; returns them.
async fn connects(proxy: &Tinyproxy, n: usize) -> Vec<String> {
    for _ in 0..250 {
        let seen = proxy.connect_requests();
        if seen.len() >= n {
            return seen;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    proxy.connect_requests()
}

#[tokio::test]
async fn a_dns_target_goes_through_the_proxy_by_name() {
    let Some(proxy) = Tinyproxy::start(TinyproxyOptions::default()) else {
        return;
    };
    let backend = server().await;
    let target = format!("dns:///localhost:{}", backend.addr.port());
    let channel = Channel::builder(target)
        .proxy(proxy.uri())
        .service_config_lookup(false)
        .build()
        .expect("channel");
    for _ in 0..3 {
        assert_eq!(
            call(&channel).await.expect("through the proxy"),
            backend.addr.to_string()
        );
    }
    assert_eq!(
        connects(&proxy, 1).await,
        [format!("localhost:{}", backend.addr.port())],
        "one tunnel, to the name unresolved"
    );
}

#[tokio::test]
async fn each_address_of_a_list_is_a_tunnel_of_its_own() {
    let Some(proxy) = Tinyproxy::start(TinyproxyOptions::default()) else {
        return;
    };
    let (a, b) = (server().await, server().await);
    let channel = Channel::builder(format!("ipv4:{},{}", a.addr, b.addr))
        .proxy(proxy.uri())
        .default_service_config(r#"{"loadBalancingConfig":[{"round_robin":{}}]}"#)
        .build()
        .expect("channel");
    // round_robin is READY with its first tunnel; the second joins when tinyproxy has opened it (tinyproxy
    // is another process, so this waits in real time, bounded).
    let mut served = std::collections::BTreeSet::new();
    for _ in 0..250 {
        served.insert(call(&channel).await.expect("through the proxy"));
        if served.len() == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        served.len(),
        2,
        "both backends, balanced as without a proxy"
    );
    let mut tunnels = connects(&proxy, 2).await;
    tunnels.sort();
    let mut expected = vec![a.addr.to_string(), b.addr.to_string()];
    expected.sort();
    assert_eq!(tunnels, expected);
}

#[tokio::test]
async fn tls_runs_inside_the_tunnel_for_the_targets_name() {
    let Some(proxy) = Tinyproxy::start(TinyproxyOptions::default()) else {
        return;
    };
    let ca = TestCa::new("proxy test CA").expect("CA");
    let identity = ca.issue(INTEROP_SERVER_NAMES, Usage::Server).expect("leaf");
    let backend = interop::server::start_tls(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        server_config(&identity, &[b"h2"], None).expect("server config"),
    )
    .await
    .expect("TLS server");
    let channel = Channel::builder(format!("https://localhost:{}", backend.addr.port()))
        .proxy(proxy.uri())
        .tls(TlsConfig::new().ca_certificate_pem(ca.cert_pem.clone()))
        .service_config_lookup(false)
        .build()
        .expect("channel");
    call(&channel).await.expect("TLS through the proxy");
    assert_eq!(
        connects(&proxy, 1).await,
        [format!("localhost:{}", backend.addr.port())]
    );
}

#[tokio::test]
async fn basic_auth_right_and_wrong() {
    let options = TinyproxyOptions {
        basic_auth: Some(("alice".to_owned(), "s3cret".to_owned())),
    };
    let Some(proxy) = Tinyproxy::start(options) else {
        return;
    };
    let backend = server().await;
    let uri_with = |password: &str| format!("http://alice:{password}@{}", proxy.addr);
    let target = format!("ipv4:{}", backend.addr);

    let right = Channel::builder(&target)
        .proxy(uri_with("s3cret"))
        .build()
        .expect("channel");
    call(&right).await.expect("authorized");

    // Wrong credentials: tinyproxy answers 401; none at all: 407 with its realm.
    let wrong = Channel::builder(&target)
        .proxy(uri_with("wrong-password"))
        .build()
        .expect("channel");
    let status = call(&wrong).await.expect_err("refused");
    eprintln!("a user sees: {status}");
    assert_eq!(status.code(), Code::Unavailable);
    let message = status.to_string();
    let named = format!("proxy http://{}", proxy.addr);
    for fragment in [named.as_str(), "refused CONNECT", "401"] {
        assert!(message.contains(fragment), "{fragment:?} in {message}");
    }
    assert!(
        !message.contains("wrong-password") && !message.contains("alice"),
        "{message}"
    );
    let debug = format!("{wrong:?} {status:?}");
    assert!(!debug.contains("wrong-password"), "{debug}");

    let anonymous = Channel::builder(&target)
        .proxy(proxy.uri())
        .build()
        .expect("channel");
    let status = call(&anonymous).await.expect_err("refused");
    eprintln!("a user sees: {status}");
    for fragment in [named.as_str(), "407", "realm \"Tinyproxy\""] {
        assert!(
            status.message().contains(fragment),
            "{fragment:?} in {status}"
        );
    }
}

#[tokio::test]
async fn a_refused_tunnel_names_the_proxy_and_what_it_said() {
    let Some(proxy) = Tinyproxy::start(TinyproxyOptions::default()) else {
        return;
    };
    // Nothing listens there: tinyproxy answers 500.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let channel = Channel::builder(format!("ipv4:{closed}"))
        .proxy(proxy.uri())
        .build()
        .expect("channel");
    let status = call(&channel).await.expect_err("no backend");
    eprintln!("a user sees: {status}");
    assert_eq!(status.code(), Code::Unavailable);
    assert!(
        status.message().contains(&format!("proxy {}", proxy.uri()))
            && status.message().contains("refused CONNECT")
            && status.message().contains("500"),
        "{status}"
    );
}
