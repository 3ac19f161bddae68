//! Eager connect (`ChannelBuilder::connect`, `Channel::ready`) must never
//! hang: names that do not resolve, names with no address, a silent DNS server, a server that accepts TCP
//! and never speaks HTTP/2, TLS on one side only, a closed channel; and round_robin over several addresses
//! with some dead.

mod support;

use std::net::Ipv4Addr;
use std::time::Duration;

use grpc_channel::{Channel, ConnectivityState, ResolverOptions, TlsConfig};
use interop::dns::RecordType;
use interop::dns::TestDns;
use support::guards::no_hang;

const HOST: &str = "svc.test";

fn resolver() -> ResolverOptions {
    ResolverOptions {
        query_timeout: Duration::from_secs(1),
        ..ResolverOptions::default()
    }
}

async fn closed_port() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr")
}

#[tokio::test]
async fn connect_to_a_name_that_does_not_resolve_fails() {
    let dns = TestDns::start().await.expect("dns");
    let result = no_hang(
        "connect",
        Channel::builder(format!("dns://{}/nowhere.test:50051", dns.addr))
            .resolver_options(resolver())
            .connect(),
    )
    .await;
    let err = result.expect_err("no such name");
    eprintln!("{err}");
}

#[tokio::test]
async fn connect_to_a_name_with_no_address_fails() {
    let dns = TestDns::start().await.expect("dns");
    dns.add_a(HOST, Ipv4Addr::LOCALHOST).await;
    dns.remove(HOST, RecordType::A).await;
    dns.set_txt(HOST, &["something"]).await;
    let result = no_hang(
        "connect",
        Channel::builder(format!("dns://{}/{HOST}:50051", dns.addr))
            .resolver_options(resolver())
            .connect(),
    )
    .await;
    let err = result.expect_err("no address");
    eprintln!("{err}");
}

#[tokio::test]
async fn connect_through_a_silent_dns_server_fails() {
    let (_socket, addr) = interop::dns::silent().await.expect("silent dns");
    let result = no_hang(
        "connect",
        Channel::builder(format!("dns://{addr}/{HOST}:50051"))
            .resolver_options(resolver())
            .connect(),
    )
    .await;
    let err = result.expect_err("no answer");
    eprintln!("{err}");
}

/// A listener that accepts connections and never writes a byte.
async fn mute_server() -> (tokio::task::JoinHandle<()>, std::net::SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            held.push(tcp);
        }
    });
    (task, addr)
}

#[tokio::test]
async fn connect_to_a_server_that_never_speaks_http2_fails_within_the_connect_timeout() {
    let (_task, addr) = mute_server().await;
    let result = no_hang(
        "connect",
        Channel::builder(format!("http://{addr}"))
            .connect_timeout(Duration::from_millis(500))
            .connect(),
    )
    .await;
    let err = result.expect_err("mute server");
    eprintln!("{err}");
}

#[tokio::test]
async fn tls_client_to_a_plaintext_server_fails() {
    let addr = support::interop_server().await;
    let result = no_hang(
        "connect",
        Channel::builder(format!("ipv4:{addr}"))
            .tls(TlsConfig::new().webpki_roots())
            .connect_timeout(Duration::from_secs(2))
            .connect(),
    )
    .await;
    let err = result.expect_err("plaintext server");
    eprintln!("{err}");
}

#[tokio::test]
async fn tls_client_to_a_mute_server_fails() {
    let (_task, addr) = mute_server().await;
    let result = no_hang(
        "connect",
        Channel::builder(format!("ipv4:{addr}"))
            .tls(TlsConfig::new().webpki_roots())
            .connect_timeout(Duration::from_millis(500))
            .connect(),
    )
    .await;
    let err = result.expect_err("mute server");
    eprintln!("{err}");
}

#[tokio::test]
async fn ready_on_a_closed_channel_fails_at_once() {
    let addr = support::interop_server().await;
    let channel = Channel::new(format!("ipv4:{addr}")).expect("channel");
    channel.close();
    let err = no_hang("ready", channel.ready()).await.expect_err("closed");
    eprintln!("{err:?}");
    // And closing while a ready() waits ends it.
    let (_task, mute) = mute_server().await;
    let channel = Channel::builder(format!("ipv4:{mute}"))
        .connect_timeout(Duration::from_secs(3600))
        .build()
        .expect("channel");
    let waiting = tokio::spawn({
        let channel = channel.clone();
        async move { channel.ready().await }
    });
    tokio::task::yield_now().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    channel.close();
    let result = no_hang("ready after close", waiting).await.expect("task");
    assert!(result.is_err(), "{result:?}");
}

#[tokio::test]
async fn round_robin_connect_with_some_dead_addresses_succeeds() {
    let live = support::interop_server().await;
    let dead1 = closed_port().await;
    let dead2 = closed_port().await;
    let target = support::ipv4_target(&[dead1, live, dead2]);
    let channel = no_hang(
        "connect",
        Channel::builder(target)
            .default_service_config(r#"{"loadBalancingConfig": [{"round_robin": {}}]}"#)
            .connect(),
    )
    .await
    .expect("one address is live");
    assert_eq!(channel.state(), ConnectivityState::Ready);
}

#[tokio::test]
async fn round_robin_connect_with_a_mute_address_succeeds() {
    let live = support::interop_server().await;
    let (_task, mute) = mute_server().await;
    let target = support::ipv4_target(&[mute, live]);
    let channel = no_hang(
        "connect",
        Channel::builder(target)
            .default_service_config(r#"{"loadBalancingConfig": [{"round_robin": {}}]}"#)
            .connect(),
    )
    .await
    .expect("one address is live");
    assert_eq!(channel.state(), ConnectivityState::Ready);
}

#[tokio::test]
async fn pick_first_connect_with_a_mute_first_address_succeeds() {
    let live = support::interop_server().await;
    let (_task, mute) = mute_server().await;
    let target = support::ipv4_target(&[mute, live]);
    let channel = no_hang(
        "connect",
        Channel::builder(target)
            .connect_timeout(Duration::from_secs(1))
            .connect(),
    )
    .await
    .expect("the second address is live");
    assert_eq!(channel.state(), ConnectivityState::Ready);
}

/// The README's "Coming from tonic" table: `XClient::connect("http://[::1]:50051")` works the same.
#[tokio::test]
async fn connect_to_an_ipv6_http_url() {
    let Ok(listener) = tokio::net::TcpListener::bind("[::1]:0").await else {
        eprintln!("no IPv6 loopback here");
        return;
    };
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let server = interop::server::spawn(addr).await.expect("bind");
    let channel = no_hang(
        "connect",
        Channel::builder(format!("http://[::1]:{}", server.port())).connect(),
    )
    .await
    .expect("IPv6 URL");
    assert_eq!(channel.state(), ConnectivityState::Ready);
}

/// The tonic habit: `XClient::connect("http://localhost:PORT")`.
#[tokio::test]
async fn connect_to_localhost_by_name() {
    let addr = support::interop_server().await;
    let channel = no_hang(
        "connect",
        Channel::builder(format!("http://localhost:{}", addr.port())).connect(),
    )
    .await
    .expect("localhost");
    assert_eq!(channel.state(), ConnectivityState::Ready);
}
