//! The ADS client's connections to its management servers, against the test management server over
//! real sockets: A65's `tls` channel creds (mTLS to a server that requires a client certificate, and
//! the failure without one), a `unix:` server, and A71's fallback to the bootstrap's second server and
//! back. The `tls` creds are set on parsed bootstraps directly.

use std::sync::Arc;
use std::time::Duration;

use grpc_xds::resource::{Resource, ResourceType};
use grpc_xds::{Bootstrap, CertificateFiles, ChannelCreds};
use interop::tls::{TestCa, Usage, INTEROP_SERVER_NAMES};
use interop::xds_resources::{eds_cluster, named, type_url};
use interop::xds_server::ManagementServer;

use super::ads::{AdsClient, ResourceWatch, WatchState};
use super::ads_tests::until;
use super::temp_dir::TempDir;

/// The name of the watched Cluster's EDS service, which tells which server sent it.
fn eds_name(state: &WatchState) -> Option<String> {
    match state.value.as_deref() {
        Some(Resource::Cluster(c)) => Some(format!("{c:?}")),
        _ => None,
    }
}

/// A fresh directory under the system's temporary one, removed with everything in it when dropped.
fn temp_dir(what: &str) -> TempDir {
    super::temp_dir::temp_dir("grpc-ads", what)
}

/// A bootstrap naming these servers (insecure) and a node id unique to the test.
fn bootstrap(uris: &[String], node: &str) -> Bootstrap {
    let servers: Vec<String> = uris
        .iter()
        .map(|u| format!(r#"{{"server_uri":"{u}","channel_creds":[{{"type":"insecure"}}]}}"#))
        .collect();
    let json = format!(
        r#"{{"xds_servers":[{}],"node":{{"id":"{node}"}}}}"#,
        servers.join(",")
    );
    Bootstrap::parse(&json).expect("bootstrap")
}

/// Publishes the Cluster `c1` (EDS service `service`).
fn set_cluster(server: &ManagementServer, service: &str) {
    let mut cluster = eds_cluster("c1");
    if let Some(eds) = cluster.eds_cluster_config.as_mut() {
        eds.service_name = service.to_owned();
    }
    server.set(
        type_url::CLUSTER,
        vec![named("c1", type_url::CLUSTER, &cluster)],
    );
}

/// A CA, a management server over TLS requiring a client certificate from it, and the files of the
/// CA and of a client identity.
async fn mtls_server() -> (ManagementServer, TempDir) {
    let ca = TestCa::new("xds server test CA").expect("CA");
    let server_identity = ca
        .issue(INTEROP_SERVER_NAMES, Usage::Server)
        .expect("server identity");
    let client = ca.issue(&["client.test"], Usage::Client).expect("client");
    let dir = temp_dir("mtls");
    std::fs::write(dir.join("ca.pem"), &ca.cert_pem).expect("write");
    std::fs::write(dir.join("client.pem"), &client.cert_pem).expect("write");
    std::fs::write(dir.join("client.key"), &client.key_pem).expect("write");
    let server = ManagementServer::start_tls(&server_identity, Some(&ca.cert_pem))
        .await
        .expect("TLS management server");
    set_cluster(&server, "over-mtls");
    (server, dir)
}

/// A65: `tls` channel creds with a CA file and a client certificate reach a management server that
/// requires one.
#[tokio::test]
async fn tls_channel_creds_with_a_client_certificate_reach_an_mtls_server() {
    let (server, dir) = mtls_server().await;
    let mut bootstrap = bootstrap(&[server.server_uri()], "mtls-ok");
    bootstrap.xds_servers[0].channel_creds = ChannelCreds::Tls(CertificateFiles {
        ca_certificate_file: Some(dir.join("ca.pem")),
        certificate_file: Some(dir.join("client.pem")),
        private_key_file: Some(dir.join("client.key")),
        ..CertificateFiles::default()
    });
    let ads = AdsClient::shared(&bootstrap).expect("ads");
    let mut watch = ads.watch(ResourceType::Cluster, "c1", Arc::default());
    let state = until(&mut watch, |s| s.value.is_some()).await;
    assert!(eds_name(&state).is_some_and(|d| d.contains("over-mtls")));
    assert_eq!(server.streams_opened(), 1);
}

/// A65: without a client certificate the mTLS server refuses the connection: the watch fails with an
/// error naming TLS, and no stream reaches the server.
#[tokio::test]
async fn tls_channel_creds_without_a_client_certificate_fail_naming_tls() {
    let (server, dir) = mtls_server().await;
    let mut bootstrap = bootstrap(&[server.server_uri()], "mtls-no-identity");
    bootstrap.xds_servers[0].channel_creds = ChannelCreds::Tls(CertificateFiles {
        ca_certificate_file: Some(dir.join("ca.pem")),
        ..CertificateFiles::default()
    });
    let ads = AdsClient::shared(&bootstrap).expect("ads");
    let mut watch = ads.watch(ResourceType::Cluster, "c1", Arc::default());
    let state = until(&mut watch, |s| s.error.is_some()).await;
    let error = state.error.unwrap_or_default();
    assert!(
        error.contains("TLS handshake failed") && error.contains("client certificate"),
        "{error}"
    );
    assert!(state.value.is_none());
    assert_eq!(server.streams_opened(), 0);
}

/// A65: a CA file that cannot be read fails the client at once, naming the file.
#[tokio::test]
async fn an_unreadable_ca_file_fails_naming_it() {
    let mut bootstrap = bootstrap(&["127.0.0.1:1".to_owned()], "mtls-bad-file");
    let dir = temp_dir("missing");
    let missing = dir.join("no-such-ca.pem");
    bootstrap.xds_servers[0].channel_creds = ChannelCreds::Tls(CertificateFiles {
        ca_certificate_file: Some(missing),
        ..CertificateFiles::default()
    });
    let status = AdsClient::shared(&bootstrap).expect_err("no client");
    assert_eq!(status.code(), crate::wire::status::Code::Unavailable);
    assert!(status.message().contains("no-such-ca.pem"), "{status:?}");
}

/// A management server on a Unix-domain socket (`unix:` server URI, as Istio's local agent).
#[cfg(unix)]
#[tokio::test]
async fn a_unix_socket_management_server_is_reached() {
    let dir = temp_dir("unix");
    let path = dir.join("xds.sock");
    let server = ManagementServer::start_unix(&path)
        .await
        .expect("unix server");
    set_cluster(&server, "over-unix");
    assert_eq!(server.server_uri(), format!("unix:{}", path.display()));
    let ads = AdsClient::shared(&bootstrap(&[server.server_uri()], "unix")).expect("ads");
    let mut watch = ads.watch(ResourceType::Cluster, "c1", Arc::default());
    let state = until(&mut watch, |s| s.value.is_some()).await;
    assert!(eds_name(&state).is_some_and(|d| d.contains("over-unix")));
    assert_eq!(ads.server_uri(), server.server_uri());
}

/// A second management server serving "from-second", and an ADS client of `first` then it (node `node`)
/// watching the Cluster "c1".
async fn with_second_server(
    first: &ManagementServer,
    node: &str,
) -> (ManagementServer, Arc<AdsClient>, ResourceWatch) {
    let second = ManagementServer::start().await.expect("second");
    set_cluster(&second, "from-second");
    let ads = AdsClient::shared(&bootstrap(&[first.server_uri(), second.server_uri()], node))
        .expect("ads");
    let watch = ads.watch(ResourceType::Cluster, "c1", Arc::default());
    (second, ads, watch)
}

/// A71: the first server down at start: the resource comes from the second, with no error shown;
/// once the first serves again, its resource replaces the second's and the second's stream closes.
#[tokio::test]
async fn the_second_server_serves_while_the_first_is_down_and_the_first_takes_over_again() {
    let mut first = ManagementServer::start().await.expect("first");
    set_cluster(&first, "from-first");
    first.stop().await;
    let (second, ads, mut watch) = with_second_server(&first, "fallback-at-start").await;
    let state = until(&mut watch, |s| s.value.is_some() || s.error.is_some()).await;
    assert!(
        eds_name(&state).is_some_and(|d| d.contains("from-second")),
        "{state:?}"
    );
    assert_eq!(ads.server_uri(), second.server_uri());
    first.restart().await.expect("restart");
    let state = until(&mut watch, |s| {
        eds_name(s).is_some_and(|d| d.contains("from-first"))
    })
    .await;
    assert!(state.error.is_none(), "{state:?}");
    assert_eq!(ads.server_uri(), first.server_uri());
    // The second server's stream closes.
    all_streams_end(&second).await;
    // Dropping the last handle stops every stream.
    drop(watch);
    drop(ads);
    all_streams_end(&first).await;
}

/// Waits (bounded, 10 ms steps) until every stream `server` saw has ended; panics otherwise.
async fn all_streams_end(server: &ManagementServer) {
    for _ in 0..500 {
        if server.streams_ended() == server.streams_opened() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "{} of {} streams still open",
        server.streams_opened() - server.streams_ended(),
        server.streams_opened()
    );
}

/// A bootstrap of more servers than the client takes fails it, naming the bound; the bound itself is
/// taken.
#[tokio::test]
async fn at_most_sixteen_servers() {
    let uris: Vec<String> = (0..=grpc_xds::MAX_XDS_SERVERS)
        .map(|i| format!("127.0.0.1:{}", 1 + i))
        .collect();
    let status = AdsClient::shared(&bootstrap(&uris, "seventeen")).expect_err("too many");
    assert!(
        status.message().contains("more than the 16 supported"),
        "{status:?}"
    );
    let ads = AdsClient::shared(&bootstrap(&uris[..16], "sixteen")).expect("sixteen");
    assert_eq!(ads.server_uri(), uris[0]);
}

/// A71: every server down: the watcher gets the error (only then).
#[tokio::test]
async fn with_every_server_down_the_watcher_gets_the_error() {
    let mut first = ManagementServer::start().await.expect("first");
    first.stop().await;
    let mut second = ManagementServer::start().await.expect("second");
    second.stop().await;
    let ads = AdsClient::shared(&bootstrap(
        &[first.server_uri(), second.server_uri()],
        "all-down",
    ))
    .expect("ads");
    let mut watch = ads.watch(ResourceType::Cluster, "c1", Arc::default());
    let state = until(&mut watch, |s| s.error.is_some()).await;
    assert!(state.value.is_none());
    assert_eq!(ads.server_uri(), second.server_uri());
}

/// A71 + A65: the first server's `tls` files cannot be read (a connection to it can never be made),
/// but the second server is healthy. That is a connectivity failure of the first server, so the client
/// falls back to the second (grpc-go builds its `tls` bundle lazily and falls back the same way)
/// instead of refusing to start; a lone server's unreadable file still fails the client at once.
#[tokio::test]
async fn a_first_server_with_unreadable_tls_files_falls_back_to_the_second() {
    let second = ManagementServer::start().await.expect("second");
    set_cluster(&second, "from-second");
    let mut bootstrap = bootstrap(
        &["127.0.0.1:1".to_owned(), second.server_uri()],
        "bad-first-files",
    );
    let dir = temp_dir("missing-first");
    let missing = dir.join("no-such-ca.pem");
    bootstrap.xds_servers[0].channel_creds = ChannelCreds::Tls(CertificateFiles {
        ca_certificate_file: Some(missing),
        ..CertificateFiles::default()
    });
    let ads = AdsClient::shared(&bootstrap)
        .unwrap_or_else(|status| panic!("the second server could serve: {status:?}"));
    let mut watch = ads.watch(ResourceType::Cluster, "c1", Arc::default());
    let state = until(&mut watch, |s| s.value.is_some() || s.error.is_some()).await;
    assert!(
        eds_name(&state).is_some_and(|d| d.contains("from-second")),
        "{state:?}"
    );
    assert_eq!(ads.server_uri(), second.server_uri());
}

/// A71: after falling back, the first server returns but sends an invalid (NACKed) version of the
/// watched Cluster. gRFC A71 / grpc-go keep one resource cache per authority across servers: a NACK
/// of a resource the watcher already has is an ambient error, and the watcher keeps the valid value
/// the second server gave: the switch back hands the restored server's `WatchEvent::Error` (its own
/// client never had the resource) to the watcher, which keeps its value with the error ambient.
#[tokio::test]
async fn a_nack_from_the_restored_first_server_keeps_the_fallback_value() {
    let mut first = ManagementServer::start().await.expect("first");
    let mut invalid = eds_cluster("c1");
    invalid.eds_cluster_config = None;
    first.set(
        type_url::CLUSTER,
        vec![named("c1", type_url::CLUSTER, &invalid)],
    );
    first.stop().await;
    let (_second, _ads, mut watch) = with_second_server(&first, "nack-after-restore").await;
    let state = until(&mut watch, |s| s.value.is_some()).await;
    assert!(
        eds_name(&state).is_some_and(|d| d.contains("from-second")),
        "{state:?}"
    );
    first.restart().await.expect("restart");
    // The first server's response (a NACKed Cluster) reaches the watcher as an error.
    let state = until(&mut watch, |s| s.error.is_some()).await;
    assert!(
        eds_name(&state).is_some_and(|d| d.contains("from-second")),
        "the valid Cluster from the second server was dropped: {state:?}"
    );
}

/// A65: a CA file that exists but holds no certificate (garbage, or an empty file a half-finished
/// rotation left) is a bad file: the client fails with UNAVAILABLE naming it, as for a missing file,
/// so with several servers and files the operator can tell which file is bad.
#[tokio::test]
async fn a_ca_file_without_a_certificate_fails_naming_it() {
    let mut bootstrap = bootstrap(&["127.0.0.1:1".to_owned()], "mtls-garbage-ca");
    let dir = temp_dir("garbage");
    let garbage = dir.join("garbage-ca.pem");
    std::fs::write(&garbage, "this is not a PEM certificate\n").expect("write");
    bootstrap.xds_servers[0].channel_creds = ChannelCreds::Tls(CertificateFiles {
        ca_certificate_file: Some(garbage),
        ..CertificateFiles::default()
    });
    let status = match AdsClient::shared(&bootstrap) {
        Err(status) => status,
        Ok(ads) => {
            let mut watch = ads.watch(ResourceType::Cluster, "c1", Arc::default());
            let state = until(&mut watch, |s| s.error.is_some()).await;
            crate::wire::status::Status::unavailable(state.error.unwrap_or_default())
        }
    };
    assert!(status.message().contains("garbage-ca.pem"), "{status:?}");
}

/// A71 (turn4.md §4.3): with the first server gone while every watched resource is cached, the
/// client stays on the cache; a new watch of a resource that is already cached (a second channel to
/// the same target sharing the client, or a resolver watching the same Cluster again) adds nothing
/// missing, so it gets the cached value before the fallback check, and no fallback happens.
#[tokio::test(start_paused = true)]
async fn a_new_watch_of_a_cached_resource_does_not_fall_back() {
    let mut first = ManagementServer::start().await.expect("first");
    set_cluster(&first, "from-first");
    let (second, ads, mut watch) = with_second_server(&first, "cached-second-watch").await;
    let state = until(&mut watch, |s| s.value.is_some()).await;
    assert!(eds_name(&state).is_some_and(|d| d.contains("from-first")));
    // The first server goes away; its reconnection attempts (backoff of a second or so) fail. The
    // client stays on its cache. Bounded: 600 steps of 100 ms on the paused clock.
    first.stop().await;
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        ads.server_uri(),
        first.server_uri(),
        "all cached: no fallback"
    );
    assert_eq!(second.streams_opened(), 0);
    // A second watch of the same, cached Cluster.
    let mut again = ads.watch(ResourceType::Cluster, "c1", Arc::default());
    let state = until(&mut again, |s| s.value.is_some() || s.error.is_some()).await;
    assert_eq!(
        ads.server_uri(),
        first.server_uri(),
        "a watch of a cached resource made the client fall back: {state:?}"
    );
    assert!(
        eds_name(&state).is_some_and(|d| d.contains("from-first")),
        "{state:?}"
    );
    assert_eq!(second.streams_opened(), 0);
}
