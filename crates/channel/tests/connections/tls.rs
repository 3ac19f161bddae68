//! TLS end to end, over real loopback sockets to the interop server on rustls, with certificates made
//! for each test by a throwaway CA: success with the CA, every way verification fails (unknown CA, wrong
//! name, expired, no ALPN h2), TLS and plaintext mismatched both ways, mutual TLS, round_robin over two TLS
//! backends, and `https://` / `http://` targets.

use grpc_test_support as support;

use std::error::Error as _;
use std::net::SocketAddr;
use std::sync::Arc;

use grpc_channel::{BuildError, Channel, Code, Request, Status, TlsConfig};
use interop::tls::{server_config, CertifiedPem, TestCa, Usage, INTEROP_SERVER_NAMES};
use interop_proto::{paths, Empty, SimpleRequest, SimpleResponse};
use support::guards::NO_HANG;
use support::h2_server::{defaults, handler, H2Server};

struct Pki {
    ca: TestCa,
    server: CertifiedPem,
}

fn pki() -> Pki {
    let ca = TestCa::new("tls test CA").expect("CA");
    let server = ca.issue(INTEROP_SERVER_NAMES, Usage::Server).expect("leaf");
    Pki { ca, server }
}

async fn tls_server(config: Arc<rustls::ServerConfig>) -> interop::server::ServerHandle {
    interop::server::start_tls(SocketAddr::from(([127, 0, 0, 1], 0)), config)
        .await
        .expect("bind")
}

fn h2_only(identity: &CertifiedPem) -> Arc<rustls::ServerConfig> {
    server_config(identity, &[b"h2"], None).expect("server config")
}

async fn empty_call(channel: &Channel) -> Result<(), Status> {
    let call = channel.unary::<_, Empty>(paths::EMPTY_CALL, Request::new(Empty {}));
    tokio::time::timeout(NO_HANG, call)
        .await
        .expect("the call ends by itself")
        .map(|_| ())
}

/// The call's UNAVAILABLE status, checked to name `cause` and to carry a `rustls::Error` as its source
/// (directly or below).
async fn fails_with(channel: &Channel, cause: &str) -> Status {
    let status = empty_call(channel).await.expect_err("the call fails");
    eprintln!("a user sees: {status}");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("TLS handshake failed") && status.message().contains(cause),
        "the message names {cause:?}: {status}"
    );
    let mut source = status.source();
    let mut found = false;
    while let Some(s) = source {
        found |= s.downcast_ref::<rustls::Error>().is_some();
        source = s.source();
    }
    assert!(found, "a rustls::Error is in the source chain: {status:?}");
    status
}

fn with_ca(addr: SocketAddr, ca: &TestCa) -> Channel {
    Channel::builder(format!("ipv4:{addr}"))
        .tls(TlsConfig::new().ca_certificate_pem(ca.cert_pem.clone()))
        .build()
        .expect("channel")
}

#[tokio::test]
async fn calls_succeed_over_tls_with_the_test_ca_and_a_host_override() {
    let pki = pki();
    let server = tls_server(h2_only(&pki.server)).await;
    // The certificate names *.test.google.fr: the standard interop override, sent as SNI and checked.
    let channel = Channel::builder(format!("localhost:{}", server.addr.port()))
        .authority(format!("foo.test.google.fr:{}", server.addr.port()))
        .tls(
            TlsConfig::new()
                .ca_certificate_pem(pki.ca.cert_pem.clone())
                .server_name("foo.test.google.fr"),
        )
        .build()
        .expect("channel");
    empty_call(&channel).await.expect("empty call over TLS");
    let request = SimpleRequest {
        response_size: 100_000,
        payload: Some(interop_proto::Payload {
            body: vec![7; 200_000].into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let response = channel
        .unary::<_, SimpleResponse>(paths::UNARY_CALL, Request::new(request))
        .await
        .expect("large unary over TLS");
    assert_eq!(
        response
            .into_message()
            .payload
            .map(|p| p.body.len())
            .unwrap_or(0),
        100_000
    );
    // The IP address in the certificate verifies an ipv4: target without an override.
    empty_call(&with_ca(server.addr, &pki.ca))
        .await
        .expect("an IP-address target verifies against the certificate's IP SAN");
}

#[tokio::test]
async fn an_unrelated_ca_is_an_unknown_authority() {
    let pki = pki();
    let server = tls_server(h2_only(&pki.server)).await;
    let other = TestCa::new("another CA").expect("CA");
    fails_with(
        &with_ca(server.addr, &other),
        "signed by an unknown certificate authority",
    )
    .await;
}

#[tokio::test]
async fn a_regenerated_ca_with_the_same_name_is_an_unknown_authority() {
    let pki = pki();
    let server = tls_server(h2_only(&pki.server)).await;
    // Same subject as the CA that signed the server's certificate, a new key: the verifier finds it by name
    // and the signature does not check out (rustls says BadSignature).
    let regenerated = TestCa::new("tls test CA").expect("CA");
    let status = fails_with(
        &with_ca(server.addr, &regenerated),
        "signed by an unknown certificate authority",
    )
    .await;
    assert!(
        status.message().contains("regenerated"),
        "the message says what likely happened: {status}"
    );
}

#[tokio::test]
async fn a_wrong_host_name_is_a_name_mismatch() {
    let pki = pki();
    let server = tls_server(h2_only(&pki.server)).await;
    let channel = Channel::builder(format!("ipv4:{}", server.addr))
        .tls(
            TlsConfig::new()
                .ca_certificate_pem(pki.ca.cert_pem.clone())
                .server_name("api.example.com"),
        )
        .build()
        .expect("channel");
    let status = fails_with(&channel, "not valid for the name \"api.example.com\"").await;
    assert!(
        status.message().contains("*.test.google.fr"),
        "the message lists the certificate's names: {status}"
    );
}

#[tokio::test]
async fn an_expired_certificate_is_named() {
    let pki = pki();
    let expired = pki.ca.issue_expired(INTEROP_SERVER_NAMES).expect("leaf");
    let server = tls_server(h2_only(&expired)).await;
    fails_with(&with_ca(server.addr, &pki.ca), "has expired").await;
}

#[tokio::test]
async fn a_server_without_alpn_h2_fails_clearly() {
    let pki = pki();
    // Offers no ALPN at all: the handshake completes without a protocol.
    let none = tls_server(server_config(&pki.server, &[], None).expect("config")).await;
    fails_with(&with_ca(none.addr, &pki.ca), "ALPN h2").await;
    // Offers only HTTP/1.1: the server refuses the handshake with no_application_protocol.
    let http1 = tls_server(server_config(&pki.server, &[b"http/1.1"], None).expect("config")).await;
    fails_with(&with_ca(http1.addr, &pki.ca), "ALPN h2").await;
}

#[tokio::test]
async fn a_tls_client_against_a_plaintext_server_fails_fast() {
    let pki = pki();
    let plaintext = interop::server::start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind");
    let status = empty_call(&with_ca(plaintext.addr, &pki.ca))
        .await
        .expect_err("no TLS there");
    eprintln!("a user sees: {status}");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("TLS handshake failed"),
        "the message says the TLS handshake failed: {status}"
    );
}

#[tokio::test]
async fn a_plaintext_client_against_a_tls_server_fails_fast_saying_so() {
    let pki = pki();
    let server = tls_server(h2_only(&pki.server)).await;
    let channel = Channel::builder(format!("ipv4:{}", server.addr))
        .build()
        .expect("channel");
    let status = empty_call(&channel)
        .await
        .expect_err("the server wants TLS");
    eprintln!("a user sees: {status}");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("expects TLS"),
        "the message says the server expects TLS: {status}"
    );
}

#[tokio::test]
async fn mutual_tls_with_and_without_a_client_certificate() {
    let pki = pki();
    let client_ca = TestCa::new("client CA").expect("CA");
    let client = client_ca.issue(&["client"], Usage::Client).expect("client");
    let config =
        server_config(&pki.server, &[b"h2"], Some(&client_ca.cert_pem)).expect("mTLS config");
    let server = tls_server(config).await;
    let with_identity = Channel::builder(format!("ipv4:{}", server.addr))
        .tls(
            TlsConfig::new()
                .ca_certificate_pem(pki.ca.cert_pem.clone())
                .identity_pem(client.cert_pem.clone(), client.key_pem.clone()),
        )
        .build()
        .expect("channel");
    empty_call(&with_identity)
        .await
        .expect("mutual TLS with a client certificate");
    // TLS 1.3: the server's refusal comes after the client's handshake is done; the client names it
    // from the server's alert, or from the connection closing before HTTP/2 started.
    let status = empty_call(&with_ca(server.addr, &pki.ca))
        .await
        .expect_err("no client certificate");
    eprintln!("a user sees: {status}");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("TLS handshake failed")
            && status.message().contains("require")
            && status.message().contains("client certificate"),
        "{status}"
    );
    // A certificate from a CA the server does not trust is refused too.
    let stranger = pki.ca.issue(&["client"], Usage::Client).expect("client");
    let refused = Channel::builder(format!("ipv4:{}", server.addr))
        .tls(
            TlsConfig::new()
                .ca_certificate_pem(pki.ca.cert_pem.clone())
                .identity_pem(stranger.cert_pem, stranger.key_pem),
        )
        .build()
        .expect("channel");
    let status = empty_call(&refused)
        .await
        .expect_err("untrusted client certificate");
    eprintln!("a user sees: {status}");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("TLS handshake failed")
            && status.message().contains("client certificate"),
        "{status}"
    );
}

#[tokio::test]
async fn round_robin_over_two_tls_backends_uses_both() {
    let pki = pki();
    let a = tls_server(h2_only(&pki.server)).await;
    let b = tls_server(h2_only(&pki.server)).await;
    let channel = Channel::builder(format!("ipv4:{},{}", a.addr, b.addr))
        .default_service_config(r#"{"loadBalancingConfig": [{"round_robin": {}}]}"#)
        .tls(TlsConfig::new().ca_certificate_pem(pki.ca.cert_pem.clone()))
        .build()
        .expect("channel");
    let mut seen = std::collections::HashSet::new();
    for _ in 0..10 {
        let request = SimpleRequest {
            fill_server_id: true,
            ..Default::default()
        };
        let response = tokio::time::timeout(
            NO_HANG,
            channel.unary::<_, SimpleResponse>(paths::UNARY_CALL, Request::new(request)),
        )
        .await
        .expect("no hang")
        .expect("call over TLS");
        seen.insert(response.into_message().server_id);
    }
    let want: std::collections::HashSet<String> = [a.addr.to_string(), b.addr.to_string()].into();
    assert_eq!(seen, want, "both TLS backends served calls");
}

#[tokio::test]
async fn https_and_http_targets_as_tonic_users_write_them() {
    let pki = pki();
    let tls = tls_server(h2_only(&pki.server)).await;
    let plain = interop::server::start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind");
    // https:// is TLS, with the given roots (the server name is the target's host: localhost).
    let https = Channel::builder(format!("https://localhost:{}", tls.addr.port()))
        .tls(TlsConfig::new().ca_certificate_pem(pki.ca.cert_pem.clone()))
        .build()
        .expect("channel");
    empty_call(&https).await.expect("https:// target");
    // https:// without a TLS config uses the platform's roots, which do not know the test CA; so do
    // Mozilla's.
    let platform = Channel::builder(format!("https://localhost:{}", tls.addr.port()))
        .build()
        .expect("channel (this machine has a platform root store)");
    fails_with(&platform, "unknown certificate authority").await;
    let webpki = Channel::builder(format!("https://localhost:{}", tls.addr.port()))
        .tls(TlsConfig::new().webpki_roots())
        .build()
        .expect("channel");
    fails_with(&webpki, "unknown certificate authority").await;
    // http:// is plaintext.
    let http = Channel::builder(format!("http://localhost:{}", plain.addr.port()))
        .build()
        .expect("channel");
    empty_call(&http).await.expect("http:// target");
    // http:// with a TLS config is a contradiction, refused at build time.
    let err = Channel::builder("http://localhost:1")
        .tls(TlsConfig::new().webpki_roots())
        .build()
        .expect_err("plaintext URL with TLS");
    assert!(
        matches!(&err, BuildError::InvalidOption { option: "tls", .. }),
        "{err}"
    );
    // Unknown schemes list the supported ones.
    let err = Channel::builder("grpc://localhost:1")
        .build()
        .expect_err("unknown scheme");
    assert!(err.to_string().contains("http, https"), "{err}");
}

/// An h2 server over TLS that answers every request OK (the scriptable server logs each request's URI).
async fn answering_tls_server(config: Arc<rustls::ServerConfig>) -> H2Server {
    H2Server::tls(
        config,
        defaults,
        handler(|mut stream| async move { stream.ok(b"") }),
    )
    .await
}

#[tokio::test]
async fn requests_over_tls_carry_scheme_https_and_the_authority() {
    let pki = pki();
    let server = answering_tls_server(h2_only(&pki.server)).await;
    let addr = server.addr();
    let channel = Channel::builder(format!("localhost:{}", addr.port()))
        .tls(TlsConfig::new().ca_certificate_pem(pki.ca.cert_pem.clone()))
        .build()
        .expect("channel");
    empty_call(&channel).await.expect("call");
    let request = server.opens().into_iter().next().expect("a request");
    assert_eq!(request.scheme.as_deref(), Some("https"));
    assert_eq!(
        request.authority,
        Some(format!("localhost:{}", addr.port()))
    );
    assert_eq!(request.path, paths::EMPTY_CALL);
}

#[tokio::test]
async fn tls_works_over_a_unix_socket_target() {
    let pki = pki();
    let dir = std::env::temp_dir().join(format!("grpc-tls-unix-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("s.sock");
    let _ = std::fs::remove_file(&path);
    let server = H2Server::unix_tls(
        path.clone(),
        h2_only(&pki.server),
        defaults,
        handler(|mut stream| async move { stream.ok(b"") }),
    );
    // The certificate names localhost, the server name of a unix: target.
    let channel = Channel::builder(format!("unix:{}", path.display()))
        .tls(TlsConfig::new().ca_certificate_pem(pki.ca.cert_pem.clone()))
        .build()
        .expect("channel");
    empty_call(&channel).await.expect("TLS over a unix socket");
    let request = server.opens().into_iter().next().expect("a request");
    assert_eq!(request.scheme.as_deref(), Some("https"));
    let _ = std::fs::remove_dir_all(&dir);
}
