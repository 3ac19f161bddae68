//! The channel's management servers (issue 36, scope 2 and 5), end to end with loopback backends: a
//! `unix:` management server, and A71's fallback to the bootstrap's second server (when the first is
//! down at start, and when it goes away before sending a watched resource) and back once the first
//! returns, seen in the server `Channel::xds_resources` names, in where the ADS requests go and in the
//! backend the published routing sends calls to; and staying on the cache when the first goes away
//! after everything was received; and A65's `tls` channel creds: mTLS to a management server that
//! requires a client certificate, without one a resolution failing UNAVAILABLE naming TLS, and files
//! read again after `refresh_interval`.
//!
//! Every test is bounded (`support::xds::BOUND` around it); waits for a condition are bounded polling
//! loops.

#![cfg(feature = "xds")]

use grpc_test_support as support;

use std::time::Duration;

use grpc_channel::{Channel, Code};
use interop::tls::{TestCa, Usage, INTEROP_SERVER_NAMES};
use interop::xds_resources::type_url;
use interop::xds_server::ManagementServer;
use support::xds::{bounded, call_until, management_server, publish_one_backend, NAME};
use support::{interop_server_handle, served_by};

/// A channel to `xds:///<name>` with a bootstrap listing these management servers, in order.
fn channel_with_servers(name: &str, uris: &[String]) -> Channel {
    let servers: Vec<String> = uris
        .iter()
        .map(|u| {
            format!(
                r#"{{"server_uri":"{u}","channel_creds":[{{"type":"insecure"}}],"server_features":["xds_v3"]}}"#
            )
        })
        .collect();
    let bootstrap = format!(
        r#"{{"xds_servers":[{}],"node":{{"id":"servers-{}"}}}}"#,
        servers.join(","),
        uris.join("-")
    );
    Channel::builder(format!("xds:///{name}"))
        .xds_bootstrap(bootstrap)
        .build()
        .expect("xds channel")
}

/// The server the channel's xDS client takes its resources from.
fn server_in_use(channel: &Channel) -> Option<String> {
    channel.xds_resources().map(|r| r.server_uri)
}

/// The id of the server that answered a call; panics with the status if it failed.
fn answered(outcome: Result<String, grpc_channel::Status>) -> String {
    outcome.unwrap_or_else(|status| panic!("the call failed: {status:?}"))
}

/// Waits (bounded, 10 ms steps) until `what` holds.
async fn until(what: &str, done: impl Fn() -> bool) {
    for _ in 0..1000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

/// Whether `server` got a request naming the Listener [`NAME`].
fn asked_for_the_listener(server: &ManagementServer) -> bool {
    server
        .requests()
        .iter()
        .any(|r| r.type_url == type_url::LISTENER && r.resource_names.iter().any(|n| n == NAME))
}

/// A management server on a Unix-domain socket: the channel resolves through it and calls reach the
/// backend it names.
#[cfg(unix)]
#[tokio::test]
async fn a_unix_management_server_serves_the_channel() {
    bounded("unix management server", async {
        let backend = interop_server_handle().await;
        let dir = TempDir::new(format!("grpc-xds-unix-{}", std::process::id()));
        let server = ManagementServer::start_unix(&dir.join("ads.sock"))
            .await
            .expect("unix management server");
        publish_one_backend(&server, backend.addr);
        let channel = channel_with_servers(NAME, &[server.server_uri()]);
        let served = served_by(&channel, support::xds::CALL).await;
        assert_eq!(answered(served), backend.addr.to_string());
        assert_eq!(server_in_use(&channel), Some(server.server_uri()));
    })
    .await;
}

/// The first server is down when the channel starts: resources come from the second (calls reach its
/// backend); once the first serves again, the channel switches back (calls reach the first's backend,
/// the second's stream closes).
#[tokio::test]
async fn the_second_server_is_used_while_the_first_is_down_and_the_first_again_once_back() {
    bounded("fallback at start and back", async {
        let (a, b) = (interop_server_handle().await, interop_server_handle().await);
        let mut first = management_server().await;
        publish_one_backend(&first, a.addr);
        first.stop().await;
        let second = management_server().await;
        publish_one_backend(&second, b.addr);
        let channel = channel_with_servers(NAME, &[first.server_uri(), second.server_uri()]);
        let served = served_by(&channel, support::xds::CALL).await;
        assert_eq!(answered(served), b.addr.to_string());
        assert_eq!(server_in_use(&channel), Some(second.server_uri()));
        assert!(asked_for_the_listener(&second));

        first.restart().await.expect("restart the first server");
        let a_id = a.addr.to_string();
        let _ = call_until(&channel, "calls reach the first server's backend", |r| {
            r.as_deref().ok() == Some(a_id.as_str())
        })
        .await;
        assert_eq!(server_in_use(&channel), Some(first.server_uri()));
        assert!(asked_for_the_listener(&first));
        until("the second server's streams end", || {
            second.streams_ended() == second.streams_opened()
        })
        .await;
    })
    .await;
}

/// The first server takes the stream but goes away before sending the watched Listener: the channel
/// falls back to the second, whose routing it publishes.
#[tokio::test]
async fn the_first_server_going_away_before_sending_a_resource_falls_back() {
    bounded("fallback mid-way", async {
        let b = interop_server_handle().await;
        let mut first = management_server().await;
        let second = management_server().await;
        publish_one_backend(&second, b.addr);
        let channel = channel_with_servers(NAME, &[first.server_uri(), second.server_uri()]);
        let call = {
            let channel = channel.clone();
            tokio::spawn(async move { served_by(&channel, support::xds::BOUND).await })
        };
        until("the first server is asked for the Listener", || {
            asked_for_the_listener(&first)
        })
        .await;
        assert_eq!(
            second.streams_opened(),
            0,
            "no fallback while the first is up"
        );
        first.stop().await;
        let served = call.await.expect("the call's task");
        assert_eq!(answered(served), b.addr.to_string());
        assert_eq!(server_in_use(&channel), Some(second.server_uri()));
    })
    .await;
}

/// Everything was received from the first server when it goes away: the channel stays on its cache
/// (calls still reach the first's backend, the second gets no stream); a new target the cache lacks
/// then falls back to the second.
#[tokio::test]
async fn with_everything_cached_the_channel_stays_on_the_cache() {
    bounded("stay on the cache", async {
        let (a, b) = (interop_server_handle().await, interop_server_handle().await);
        let mut first = management_server().await;
        publish_one_backend(&first, a.addr);
        let second = management_server().await;
        publish_one_backend(&second, b.addr);
        let uris = [first.server_uri(), second.server_uri()];
        let channel = channel_with_servers(NAME, &uris);
        assert_eq!(
            answered(served_by(&channel, support::xds::CALL).await),
            a.addr.to_string()
        );
        let ended = first.streams_ended();
        first.stop().await;
        until("the first server's stream ends", || {
            first.streams_ended() > ended
        })
        .await;
        // The client retries the first server at once (its stream had responses) and fails; with
        // everything cached it must not fall back. A bounded wait for a fallback that must not happen.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(second.streams_opened(), 0);
        assert_eq!(
            answered(served_by(&channel, support::xds::CALL).await),
            a.addr.to_string()
        );
        assert_eq!(server_in_use(&channel), Some(first.server_uri()));

        // Another target of the same client: its Listener is not cached, so the client falls back.
        let other = channel_with_servers("other.test", &uris);
        other.connect();
        until("the second server is asked for the other Listener", || {
            second.requests().iter().any(|r| {
                r.type_url == type_url::LISTENER
                    && r.resource_names.iter().any(|n| n == "other.test")
            })
        })
        .await;
        assert_eq!(server_in_use(&channel), Some(second.server_uri()));
    })
    .await;
}

/// A CA, a management server over TLS requiring a client certificate from it, and a directory with
/// the CA's certificate (`ca.pem`) and a client identity (`client.pem`, `client.key`).
/// A directory under the system's temporary one, removed with everything in it when dropped.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: String) -> TempDir {
        let dir = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&dir).expect("dir");
        TempDir(dir)
    }
}

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn mtls_management_server() -> (ManagementServer, TempDir) {
    let ca = TestCa::new("xds management server CA").expect("CA");
    let identity = ca
        .issue(INTEROP_SERVER_NAMES, Usage::Server)
        .expect("server identity");
    let client = ca.issue(&["client.test"], Usage::Client).expect("client");
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = TempDir::new(format!("grpc-xds-mtls-{}-{n}", std::process::id()));
    std::fs::write(dir.join("ca.pem"), &ca.cert_pem).expect("write");
    std::fs::write(dir.join("client.pem"), &client.cert_pem).expect("write");
    std::fs::write(dir.join("client.key"), &client.key_pem).expect("write");
    let server = ManagementServer::start_tls(&identity, Some(&ca.cert_pem))
        .await
        .expect("TLS management server");
    (server, dir)
}

/// A channel to `xds:///<NAME>` whose bootstrap reaches `server` with `tls` channel creds of `config`.
fn tls_channel(server: &ManagementServer, node: &str, config: &str) -> Channel {
    let bootstrap = format!(
        r#"{{"xds_servers":[{{"server_uri":"{}","channel_creds":[{{"type":"tls","config":{config}}}],"server_features":["xds_v3"]}}],"node":{{"id":"{node}"}}}}"#,
        server.server_uri()
    );
    Channel::builder(format!("xds:///{NAME}"))
        .xds_bootstrap(bootstrap)
        .build()
        .expect("xds channel")
}

/// A65: `tls` channel creds with the CA and a client certificate: the channel resolves over mTLS and
/// calls reach the backend; without the client certificate the resolution fails UNAVAILABLE, naming
/// the TLS handshake, and no ADS stream reaches the server.
#[tokio::test]
async fn mtls_to_the_management_server() {
    bounded("mTLS management server", async {
        let backend = interop_server_handle().await;
        let (server, dir) = mtls_management_server().await;
        publish_one_backend(&server, backend.addr);
        let file = |name: &str| dir.join(name).display().to_string();
        let with_identity = format!(
            r#"{{"ca_certificate_file":"{}","certificate_file":"{}","private_key_file":"{}"}}"#,
            file("ca.pem"),
            file("client.pem"),
            file("client.key")
        );
        let channel = tls_channel(&server, "mtls-identity", &with_identity);
        let served = served_by(&channel, support::xds::CALL).await;
        assert_eq!(answered(served), backend.addr.to_string());
        assert_eq!(server.streams_opened(), 1);

        let without = format!(r#"{{"ca_certificate_file":"{}"}}"#, file("ca.pem"));
        let refused = tls_channel(&server, "mtls-no-identity", &without);
        let status = served_by(&refused, support::xds::CALL)
            .await
            .expect_err("no client certificate");
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(
            status.message().contains("TLS handshake failed")
                && status.message().contains("client certificate"),
            "{status:?}"
        );
        assert_eq!(
            server.streams_opened(),
            1,
            "no stream without a certificate"
        );
    })
    .await;
}

/// A65: the `tls` files are read again for a stream opening `refresh_interval` after they were read:
/// a client certificate the server refuses (from another CA) is replaced in its files, and the next
/// stream presents the new one and the channel resolves.
#[tokio::test]
async fn new_tls_files_are_used_after_the_refresh_interval() {
    bounded("tls files refreshed", async {
        let backend = interop_server_handle().await;
        let (server, dir) = mtls_management_server().await;
        publish_one_backend(&server, backend.addr);
        let good_cert = std::fs::read(dir.join("client.pem")).expect("read");
        let good_key = std::fs::read(dir.join("client.key")).expect("read");
        let stranger = TestCa::new("another CA")
            .and_then(|ca| ca.issue(&["client.test"], Usage::Client))
            .expect("stranger identity");
        let rotate = dir.join("rotating");
        std::fs::create_dir_all(&rotate).expect("dir");
        std::fs::write(rotate.join("client.pem"), &stranger.cert_pem).expect("write");
        std::fs::write(rotate.join("client.key"), &stranger.key_pem).expect("write");
        let config = format!(
            r#"{{"ca_certificate_file":"{}","certificate_file":"{}","private_key_file":"{}","refresh_interval":"1s"}}"#,
            dir.join("ca.pem").display(),
            rotate.join("client.pem").display(),
            rotate.join("client.key").display()
        );
        let channel = tls_channel(&server, "mtls-rotating", &config);
        let refused = served_by(&channel, support::xds::CALL).await;
        assert!(
            matches!(&refused, Err(s) if s.code() == Code::Unavailable),
            "{refused:?}"
        );
        assert_eq!(server.streams_opened(), 0);
        std::fs::write(rotate.join("client.pem"), good_cert).expect("write");
        std::fs::write(rotate.join("client.key"), good_key).expect("write");
        let backend_id = backend.addr.to_string();
        let _ = call_until(&channel, "the rotated identity is accepted", |r| {
            r.as_deref().ok() == Some(backend_id.as_str())
        })
        .await;
        assert_eq!(server.streams_opened(), 1);
    })
    .await;
}
