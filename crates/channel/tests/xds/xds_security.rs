//! xDS credentials (gRFC A29) end to end: the management server serves Clusters whose `transport_socket`
//! is an `UpstreamTlsContext` naming the bootstrap's `file_watcher` certificate providers, whose files
//! the test writes (a CA, client identities); the backends are interop servers over TLS that require
//! and verify a client certificate, with DNS and SPIFFE URI SANs, and record the client certificates they
//! saw. mTLS calls pass; a SAN mismatch fails UNAVAILABLE and no call reaches the server; a cluster
//! without security falls back to plaintext; a cluster giving no identity fails cleanly against a backend
//! requiring one; a rotated identity is what new connections present, with no failed call; a missing
//! provider file fails UNAVAILABLE naming it; without `xds_credentials` the TLS settings are ignored.
//!
//! Every test is bounded (`support::xds::BOUND`); waits are bounded polling loops on real time (real TLS
//! handshakes).

#![cfg(feature = "xds")]

use grpc_test_support as support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use grpc_channel::{Channel, Code};
use interop::server::{start_tls, ServerHandle};
use interop::tls::{recording_mtls_server_config, CertifiedPem, SeenClients, TestCa, Usage};
use interop::xds_resources::{
    assignment, eds_cluster, named, rds_listener, route_to_cluster, tls_cluster, type_url,
    RouteMatchSpec,
};
use interop::xds_server::ManagementServer;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use support::xds::{bounded, locality, management_server, set_routes, CALL, NAME, ROUTES};
use support::{interop_server_handle, served_by};

pub(super) const SERVER_DNS: &str = "backend.mesh.test";
pub(super) const SERVER_SPIFFE: &str = "spiffe://mesh.test/ns/default/sa/backend";

/// The client certificates a backend saw.
pub(super) type Seen = SeenClients;

/// An interop server over TLS (a DNS and a SPIFFE SAN) requiring a client certificate from `ca`.
pub(super) async fn mtls_backend(ca: &TestCa) -> (ServerHandle, Seen) {
    let (config, seen) =
        recording_mtls_server_config(ca, SERVER_DNS, SERVER_SPIFFE).expect("TLS backend");
    let handle = start_tls(SocketAddr::from(([127, 0, 0, 1], 0)), config)
        .await
        .expect("TLS backend");
    (handle, seen)
}

/// A temporary directory, removed on drop.
pub(super) struct Dir(pub(super) PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(tag: &str) -> Dir {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!(
        "grpc-xds-security-{tag}-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    Dir(dir)
}

fn write_identity(dir: &Path, id: &CertifiedPem) {
    std::fs::write(dir.join("client.pem"), &id.cert_pem).expect("write cert");
    std::fs::write(dir.join("client.key"), &id.key_pem).expect("write key");
}

pub(super) fn der(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("PEM")
        .to_vec()
}

/// A bootstrap naming `server`, with the instances "identity" (client.pem, client.key) and "roots"
/// (ca.pem) of `dir`, re-read every `refresh`.
pub(super) fn bootstrap(server: &ManagementServer, dir: &Path, refresh: &str) -> String {
    let path = |f: &str| dir.join(f).display().to_string();
    serde_json::json!({
        "xds_servers": [{
            "server_uri": server.server_uri(),
            "channel_creds": [{"type": "insecure"}],
            "server_features": ["xds_v3"],
        }],
        "node": {"id": "test-node"},
        "certificate_providers": {
            "identity": {"plugin_name": "file_watcher", "config": {
                "certificate_file": path("client.pem"),
                "private_key_file": path("client.key"),
                "refresh_interval": refresh,
            }},
            "roots": {"plugin_name": "file_watcher", "config": {
                "ca_certificate_file": path("ca.pem"),
                "refresh_interval": refresh,
            }},
        },
    })
    .to_string()
}

pub(super) fn channel(bootstrap: String, credentials: bool) -> Channel {
    let builder = Channel::builder(format!("xds:///{NAME}")).xds_bootstrap(bootstrap);
    let builder = if credentials {
        builder.xds_credentials()
    } else {
        builder
    };
    builder.build().expect("xds channel")
}

/// Publishes the Listener, a route of every call to `cluster`, the Cluster `resource` and its endpoints.
fn publish_cluster(
    server: &ManagementServer,
    cluster: &str,
    resource: envoy_types::pb::envoy::config::cluster::v3::Cluster,
    endpoints: &[SocketAddr],
) {
    server.set(
        type_url::LISTENER,
        vec![named(NAME, type_url::LISTENER, &rds_listener(NAME, ROUTES))],
    );
    set_routes(
        server,
        &["*"],
        vec![route_to_cluster(&RouteMatchSpec::any(), cluster)],
    );
    server.set(
        type_url::CLUSTER,
        vec![named(cluster, type_url::CLUSTER, &resource)],
    );
    server.set(
        type_url::ENDPOINTS,
        vec![named(
            cluster,
            type_url::ENDPOINTS,
            &assignment(cluster, &locality(endpoints)),
        )],
    );
}

pub(super) struct Mesh {
    pub(super) ca: TestCa,
    pub(super) dir: Dir,
    pub(super) client: CertifiedPem,
    pub(super) server: ManagementServer,
}

pub(super) async fn mesh(tag: &str) -> Mesh {
    let ca = TestCa::new("xDS security test CA").expect("CA");
    let dir = temp_dir(tag);
    std::fs::write(dir.0.join("ca.pem"), &ca.cert_pem).expect("write CA");
    let client = ca
        .issue(&["first.client.test"], Usage::Client)
        .expect("client certificate");
    write_identity(&dir.0, &client);
    Mesh {
        ca,
        dir,
        client,
        server: management_server().await,
    }
}

impl Mesh {
    /// Issues a second client identity ("second.client.test") and writes it to the provider files.
    pub(super) fn rotate_identity(&self) -> CertifiedPem {
        let second = self
            .ca
            .issue(&["second.client.test"], Usage::Client)
            .expect("second identity");
        write_identity(&self.dir.0, &second);
        second
    }
}

/// The bootstrap of `m` (its management server, its providers' files re-read every 600 s).
pub(super) fn mesh_bootstrap(m: &Mesh) -> String {
    bootstrap(&m.server, &m.dir.0, "600s")
}

/// A channel with xDS credentials over the bootstrap of `m`.
pub(super) fn mtls_channel(m: &Mesh) -> Channel {
    channel(mesh_bootstrap(m), true)
}

/// Whether every client certificate in `seen` is `m`'s first client identity.
pub(super) fn only_first_identity(seen: &Seen, m: &Mesh) -> bool {
    seen.lock().iter().all(|c| *c == der(&m.client.cert_pem))
}

/// A mesh (`mesh(tag)`) and its mTLS backend, the only endpoint of "secure": an mTLS cluster with the
/// provider instance `identity` (if any) and "roots", checking the SAN `san`; every call routed to it.
async fn secured(tag: &str, identity: Option<&str>, san: &str) -> (Mesh, ServerHandle, Seen) {
    let m = mesh(tag).await;
    let (backend, seen) = mtls_backend(&m.ca).await;
    publish_cluster(
        &m.server,
        "secure",
        tls_cluster("secure", identity, "roots", &[san]),
        &[backend.addr],
    );
    (m, backend, seen)
}

/// Calls until one fails; its status (bounded).
pub(super) async fn first_failure(channel: &Channel) -> grpc_channel::Status {
    for _ in 0..500 {
        if let Err(status) = served_by(channel, CALL).await {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no call failed");
}

#[tokio::test]
async fn mtls_calls_pass_with_the_cluster_identity_and_san_check() {
    bounded("mtls", async {
        let (m, backend, seen) = secured("mtls", Some("identity"), SERVER_SPIFFE).await;
        let ch = mtls_channel(&m);
        for _ in 0..5 {
            let by = served_by(&ch, CALL).await.expect("an mTLS call");
            assert_eq!(by, backend.addr.to_string());
        }
        assert!(!seen.lock().is_empty());
        assert!(only_first_identity(&seen, &m));
    })
    .await;
}

#[tokio::test]
async fn a_san_mismatch_fails_unavailable_and_reaches_no_server() {
    bounded("mismatch", async {
        let (m, _backend, seen) =
            secured("mismatch", Some("identity"), "spiffe://elsewhere/sa/x").await;
        let ch = mtls_channel(&m);
        let status = first_failure(&ch).await;
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(
            status
                .message()
                .contains("SANs from certificate did not match SANs from xDS control plane"),
            "{status:?}"
        );
        assert!(
            seen.lock().is_empty(),
            "no client certificate, no call reached the server"
        );
    })
    .await;
}

#[tokio::test]
async fn a_cluster_without_security_falls_back_to_plaintext() {
    bounded("fallback", async {
        let m = mesh("fallback").await;
        let plain = interop_server_handle().await;
        publish_cluster(&m.server, "plain", eds_cluster("plain"), &[plain.addr]);
        let ch = mtls_channel(&m);
        let by = served_by(&ch, CALL).await.expect("a plaintext call");
        assert_eq!(by, plain.addr.to_string());
    })
    .await;
}

#[tokio::test]
async fn without_xds_credentials_the_tls_settings_are_ignored() {
    bounded("ignored", async {
        let m = mesh("ignored").await;
        let plain = interop_server_handle().await;
        publish_cluster(
            &m.server,
            "secure",
            tls_cluster("secure", Some("identity"), "roots", &[SERVER_DNS]),
            &[plain.addr],
        );
        let ch = channel(bootstrap(&m.server, &m.dir.0, "600s"), false);
        let by = served_by(&ch, CALL).await.expect("a plaintext call");
        assert_eq!(by, plain.addr.to_string());
    })
    .await;
}

#[tokio::test]
async fn a_cluster_without_identity_fails_cleanly_against_a_backend_requiring_one() {
    bounded("no identity", async {
        let (m, _backend, _seen) = secured("no-identity", None, SERVER_DNS).await;
        let ch = mtls_channel(&m);
        let status = first_failure(&ch).await;
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(
            status.message().contains("client certificate"),
            "{status:?}"
        );
    })
    .await;
}

#[tokio::test]
async fn a_missing_provider_file_fails_unavailable_naming_it() {
    bounded("missing file", async {
        let (m, _backend, seen) = secured("missing", Some("identity"), SERVER_DNS).await;
        std::fs::remove_file(m.dir.0.join("client.key")).expect("remove key");
        let ch = mtls_channel(&m);
        let status = first_failure(&ch).await;
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(status.message().contains("client.key"), "{status:?}");
        assert!(seen.lock().is_empty(), "never connected");
    })
    .await;
}

#[tokio::test]
async fn a_rotated_identity_is_presented_by_new_connections_without_failed_calls() {
    bounded("rotation", async {
        let (m, a, seen_a) = secured("rotation", Some("identity"), SERVER_DNS).await;
        let ch = channel(bootstrap(&m.server, &m.dir.0, "0.1s"), true);
        served_by(&ch, CALL).await.expect("first identity");
        assert_eq!(seen_a.lock().last(), Some(&der(&m.client.cert_pem)));
        let second = m.rotate_identity();
        // New backends until one is connected with the rotated identity (the files are re-read every
        // 100 ms); every call meanwhile passes.
        let mut backends = Vec::new();
        let mut rotated = false;
        for _ in 0..50 {
            let (b, seen_b) = mtls_backend(&m.ca).await;
            m.server.set(
                type_url::ENDPOINTS,
                vec![named(
                    "secure",
                    type_url::ENDPOINTS,
                    &assignment("secure", &locality(&[a.addr, b.addr])),
                )],
            );
            let target = b.addr.to_string();
            for _ in 0..500 {
                let by = served_by(&ch, CALL)
                    .await
                    .expect("no call fails during rotation");
                if by == target {
                    break;
                }
            }
            let presented = seen_b.lock().last().cloned();
            backends.push(b);
            if presented == Some(der(&second.cert_pem)) {
                rotated = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(rotated, "a new connection presented the rotated identity");
        // The first connection is untouched: it presented the first identity only.
        assert!(only_first_identity(&seen_a, &m));
    })
    .await;
}

/// A `file_watcher` provider is shared only while a channel uses it, and a new one reads its files when
/// it starts (A29; grpc-go closes a channel's provider references in `ClientConn.Close`, C-core unrefs
/// them when the channel's credentials go). So once the only channel is closed, a channel built with
/// the same bootstrap presents the identity now in the files. `Channel::close()` (channel.rs) stops the
/// resolver but `Resolution::stop` (control/resolver.rs) leaves the registry of transports
/// (`control/transports.rs`) holding the closed channel's providers and their refresh tasks for as long
/// as its handle lives: the new channel is handed the old provider and presents the identity read
/// before the close until the next refresh (600 s here).
#[tokio::test]
async fn a_channel_built_after_the_only_one_closed_presents_the_identity_now_in_the_files() {
    bounded("closed-provider", async {
        let (m, _backend, seen) = secured("closed-provider", Some("identity"), SERVER_SPIFFE).await;
        let boot = bootstrap(&m.server, &m.dir.0, "600s");
        let first = channel(boot.clone(), true);
        served_by(&first, CALL).await.expect("an mTLS call");
        assert_eq!(seen.lock().last(), Some(&der(&m.client.cert_pem)));
        first.close();
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        let second_identity = m.rotate_identity();
        let second = channel(boot, true);
        served_by(&second, CALL)
            .await
            .expect("an mTLS call on the new channel");
        let presented = seen.lock().last().cloned();
        assert!(
            presented == Some(der(&second_identity.cert_pem)),
            "the new channel presents the identity in the files, not the one the closed channel's \
             provider read before the close (first identity: {})",
            presented == Some(der(&m.client.cert_pem))
        );
        drop(first);
    })
    .await;
}
