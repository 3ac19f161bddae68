//! Eager connect (`ChannelBuilder::connect`, `Channel::ready`) never hangs and names the cause: names that
//! do not resolve, names with no address, a silent DNS server, a server that accepts TCP and never speaks
//! HTTP/2, TLS on one side only, a closed channel; and it succeeds with round_robin or pick_first over
//! addresses some of which are dead or mute, with IPv6 and `localhost` URLs. Real loopback servers, on
//! tokio's paused clock (the connect and DNS timeouts pass without waiting).

mod support;

use std::net::Ipv4Addr;
use std::time::Duration;

use grpc_channel::{Channel, ConnectivityState, ResolverOptions, TlsConfig};
use interop::dns::RecordType;
use interop::dns::TestDns;
use support::guards::no_hang;

const HOST: &str = "svc.test";

fn resolver() -> ResolverOptions {
    ResolverOptions::default().with_query_timeout(Duration::from_secs(1))
}

/// `builder`'s eager connect, which must fail; its error's text, checked to name `cause`.
async fn connect_fails(builder: grpc_channel::ChannelBuilder, cause: &str) -> String {
    let err = no_hang("connect", builder.connect())
        .await
        .expect_err("the connection cannot be made")
        .to_string();
    assert!(err.contains(cause), "the error names {cause:?}: {err}");
    err
}

/// `builder`'s eager connect, which must succeed with a READY channel.
async fn connects(builder: grpc_channel::ChannelBuilder) {
    let channel = no_hang("connect", builder.connect())
        .await
        .expect("an address is live");
    assert_eq!(channel.state(), ConnectivityState::Ready);
}

async fn closed_port() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr")
}

#[tokio::test(start_paused = true)]
async fn connect_to_a_name_that_does_not_resolve_fails() {
    let dns = TestDns::start().await.expect("dns");
    connect_fails(
        Channel::builder(format!("dns://{}/nowhere.test:50051", dns.addr))
            .resolver_options(resolver()),
        "DNS resolution of nowhere.test returned no addresses",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn connect_to_a_name_with_no_address_fails() {
    let dns = TestDns::start().await.expect("dns");
    dns.add_a(HOST, Ipv4Addr::LOCALHOST).await;
    dns.remove(HOST, RecordType::A).await;
    dns.set_txt(HOST, &["something"]).await;
    connect_fails(
        Channel::builder(format!("dns://{}/{HOST}:50051", dns.addr)).resolver_options(resolver()),
        "DNS resolution of svc.test returned no addresses",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn connect_through_a_silent_dns_server_fails() {
    let (_socket, addr) = interop::dns::silent().await.expect("silent dns");
    connect_fails(
        Channel::builder(format!("dns://{addr}/{HOST}:50051")).resolver_options(resolver()),
        "DNS resolution of svc.test failed: request timed out",
    )
    .await;
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

#[tokio::test(start_paused = true)]
async fn connect_to_a_server_that_never_speaks_http2_fails_within_the_connect_timeout() {
    let (_task, addr) = mute_server().await;
    connect_fails(
        Channel::builder(format!("http://{addr}")).connect_timeout(Duration::from_millis(500)),
        "timed out (in the HTTP/2 handshake)",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn tls_client_to_a_plaintext_server_fails() {
    let addr = support::interop_server().await;
    connect_fails(
        Channel::builder(format!("ipv4:{addr}"))
            .tls(TlsConfig::new().webpki_roots())
            .connect_timeout(Duration::from_secs(2)),
        "the server did not answer in TLS (is it a plaintext server?)",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn tls_client_to_a_mute_server_fails() {
    let (_task, addr) = mute_server().await;
    connect_fails(
        Channel::builder(format!("ipv4:{addr}"))
            .tls(TlsConfig::new().webpki_roots())
            .connect_timeout(Duration::from_millis(500)),
        "timed out (in the TLS handshake)",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn ready_on_a_closed_channel_fails_at_once() {
    let addr = support::interop_server().await;
    let channel = Channel::new(format!("ipv4:{addr}")).expect("channel");
    channel.close();
    let err = no_hang("ready", channel.ready()).await.expect_err("closed");
    assert_eq!(err.message(), "the channel is shut down");
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

#[tokio::test(start_paused = true)]
async fn round_robin_connect_with_some_dead_addresses_succeeds() {
    let live = support::interop_server().await;
    let dead1 = closed_port().await;
    let dead2 = closed_port().await;
    let target = support::ipv4_target(&[dead1, live, dead2]);
    connects(
        Channel::builder(target)
            .default_service_config(r#"{"loadBalancingConfig": [{"round_robin": {}}]}"#),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn round_robin_connect_with_a_mute_address_succeeds() {
    let live = support::interop_server().await;
    let (_task, mute) = mute_server().await;
    let target = support::ipv4_target(&[mute, live]);
    connects(
        Channel::builder(target)
            .default_service_config(r#"{"loadBalancingConfig": [{"round_robin": {}}]}"#),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn pick_first_connect_with_a_mute_first_address_succeeds() {
    let live = support::interop_server().await;
    let (_task, mute) = mute_server().await;
    let target = support::ipv4_target(&[mute, live]);
    connects(Channel::builder(target).connect_timeout(Duration::from_secs(1))).await;
}

/// The README's "Coming from tonic" table: `XClient::connect("http://[::1]:50051")` works the same.
#[tokio::test(start_paused = true)]
async fn connect_to_an_ipv6_http_url() {
    let Ok(listener) = tokio::net::TcpListener::bind("[::1]:0").await else {
        eprintln!("no IPv6 loopback here");
        return;
    };
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let server = interop::server::spawn(addr).await.expect("bind");
    connects(Channel::builder(format!("http://[::1]:{}", server.port()))).await;
}

/// The tonic habit: `XClient::connect("http://localhost:PORT")`.
#[tokio::test(start_paused = true)]
async fn connect_to_localhost_by_name() {
    let addr = support::interop_server().await;
    connects(Channel::builder(format!(
        "http://localhost:{}",
        addr.port()
    )))
    .await;
}
