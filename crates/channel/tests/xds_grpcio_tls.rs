//! xDS security (gRFC A29) from the test management server (`interop::xds_server`) driving an independent
//! xDS client: Python grpcio (C-core), `interop/peers/grpcio/xds_client.py --secure_mode=true`, a channel
//! with `grpc.xds_channel_credentials(fallback_credentials=grpc.experimental.insecure_channel_credentials())` to
//! `xds:///<NAME>`. The Clusters carry a `transport_socket` `envoy.transport_sockets.tls` with an
//! `UpstreamTlsContext` (`interop::xds_resources::UpstreamTlsSpec`) naming `file_watcher` certificate
//! providers of the bootstrap (`interop::xds_resources::BootstrapSpec`); the backends are our interop servers
//! over TLS requiring a client certificate, recording the identity each connection presents
//! (`interop::server::PeerLog`). Certificates come from one throwaway CA (`interop::tls::TestCa`).
//!
//! The scenarios: mTLS calls pass (both validation-context forms A29 lists) and present the client's SPIFFE
//! ID; a SAN mismatch fails UNAVAILABLE with no call reaching the server; a Cluster without security falls
//! back to plaintext; a backend requiring a client certificate fails cleanly when the Cluster gives none;
//! rotating the watched files changes the identity new connections present, with no failed call. These show
//! the management server's resources are what a C-core client accepts; they do not exercise our channel.
//!
//! On real time (real handshakes): every wait is bounded, and nothing sleeps as an assertion. Needs the
//! grpcio virtualenv (`interop::grpcio_peer`); without it each test says so and passes, unless
//! `GRPCIO_PEER_REQUIRED` is set.

#![cfg(feature = "xds")]

use grpc_test_support as support;

use std::net::SocketAddr;
use std::time::Duration;

use interop::server::{PeerLog, ServerHandle, ServerOptions};
use interop::tls::{
    server_config, CertifiedPem, TestCa, Usage, WatchedFiles, CLIENT_SPIFFE_ID, SERVER_SPIFFE_ID,
};
use interop::xds_resources::{
    eds_cluster, exact_matcher, named, prefix_matcher, route_to_cluster, type_url,
    with_upstream_tls, BootstrapSpec, FileWatcherProvider, LocalitySpec, RootsForm, RouteMatchSpec,
    UpstreamTlsSpec,
};
use interop::xds_server::ManagementServer;
use support::grpcio_xds::{grpcio_xds_client, GrpcioXds};
use support::xds::{locality, management_server, publish, set_endpoints};

/// The certificate provider instance giving identity and roots.
const MESH: &str = "mesh";

/// A SPIFFE ID no certificate here carries.
const OTHER_SPIFFE_ID: &str = "spiffe://test.example/ns/default/sa/other";

/// One test's certificates: a CA, a server identity (DNS `server.test`, URI [`SERVER_SPIFFE_ID`]) and the
/// watched files of the client (identity [`CLIENT_SPIFFE_ID`] and the CA); the directory is removed when
/// dropped.
struct Pki {
    ca: TestCa,
    server: CertifiedPem,
    files: WatchedFiles,
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.files.dir());
    }
}

fn pki(test: &str) -> Pki {
    let ca = TestCa::new("xds test mesh CA").expect("CA");
    let server = ca
        .issue_with_uris(&["server.test"], &[SERVER_SPIFFE_ID], Usage::Server)
        .expect("server identity");
    let client = ca
        .issue_with_uris(&[], &[CLIENT_SPIFFE_ID], Usage::Client)
        .expect("client identity");
    let dir = std::env::temp_dir().join(format!(
        "grpc-channel-xds-grpcio-tls-{}-{test}",
        std::process::id()
    ));
    let files = WatchedFiles::write_all(&dir, &ca.cert_pem, Some(&client)).expect("files");
    Pki { ca, server, files }
}

impl Pki {
    /// An interop server over TLS presenting the server identity and requiring a client certificate of the
    /// CA, recording its connections in `log`.
    async fn mtls_backend(&self, log: &PeerLog) -> ServerHandle {
        let config =
            server_config(&self.server, &[b"h2"], Some(&self.ca.cert_pem)).expect("config");
        interop::server::start_with(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            ServerOptions::new().tls(config).peer_log(log.clone()),
        )
        .await
        .expect("backend")
    }

    /// A bootstrap naming `server` with the provider [`MESH`] (identity and roots) refreshed every
    /// `refresh`, and the providers `mesh-identity` (certificate and key only) and `mesh-roots` (CA only).
    fn bootstrap(&self, server: &ManagementServer, refresh: Duration) -> String {
        let identity_only = FileWatcherProvider {
            certificate_file: Some(self.files.certificate_file()),
            private_key_file: Some(self.files.private_key_file()),
            ..FileWatcherProvider::default()
        };
        BootstrapSpec::new(&server.server_uri())
            .provider(
                MESH,
                FileWatcherProvider::all(&self.files).refresh_every(refresh),
            )
            .provider("mesh-identity", identity_only.refresh_every(refresh))
            .provider(
                "mesh-roots",
                FileWatcherProvider::roots(&self.files).refresh_every(refresh),
            )
            .to_json()
    }
}

/// Starts the grpcio client (`--secure_mode=true`) with `bootstrap`; `None` when there is no grpcio (the
/// test then passes).
fn grpcio_client(bootstrap: &str, test: &str) -> Option<GrpcioXds> {
    grpcio_xds_client(bootstrap, &format!("tls-{test}"), &["--secure_mode=true"])
}

/// Publishes every call routed to the EDS cluster `cluster` of `backend`, with the UpstreamTlsContext
/// `tls`.
fn publish_one_secure(
    server: &ManagementServer,
    cluster: &str,
    backend: SocketAddr,
    tls: &UpstreamTlsSpec,
) {
    publish_secure(
        server,
        vec![route_to_cluster(&RouteMatchSpec::any(), cluster)],
        &[(cluster, locality(&[backend]))],
        vec![with_upstream_tls(eds_cluster(cluster), tls)],
    );
}

/// No call reached the server `log` records.
fn assert_no_call_reached(log: &PeerLog) {
    assert_eq!(
        log.calls(),
        0,
        "a call reached the server: {:?}",
        log.connections()
    );
}

/// Publishes the Listener and a route of every call to `cluster` (its endpoints: `backends`), then replaces
/// the Clusters with `clusters`.
fn publish_secure(
    server: &ManagementServer,
    routes: Vec<envoy_types::pb::envoy::config::route::v3::Route>,
    endpoints: &[(&str, Vec<LocalitySpec>)],
    clusters: Vec<envoy_types::pb::envoy::config::cluster::v3::Cluster>,
) {
    publish(server, &["*"], routes, endpoints);
    server.set(
        type_url::CLUSTER,
        clusters
            .iter()
            .map(|c| named(&c.name, type_url::CLUSTER, c))
            .collect(),
    );
}

/// Waits (at most 10 s) for grpcio to ACK the Clusters, and checks it NACKed nothing.
async fn clusters_acked(server: &ManagementServer) {
    support::grpcio_xds::assert_acked(server, &[type_url::CLUSTER]).await;
}

/// mTLS with both validation-context forms: the Cluster `secure` names the provider `mesh` for identity and
/// roots in `validation_context` with an exact SAN matcher on the server's SPIFFE ID; the Cluster `combined`
/// names `mesh-identity` and `mesh-roots` in `combined_validation_context` with a prefix matcher. Every call
/// passes, and every connection presents the client's SPIFFE ID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_mtls_calls_pass_in_both_validation_context_forms() {
    let pki = pki("mtls");
    let (log_a, log_b) = (PeerLog::new(), PeerLog::new());
    let a = pki.mtls_backend(&log_a).await;
    let b = pki.mtls_backend(&log_b).await;
    let server = management_server().await;
    publish_secure(
        &server,
        vec![
            route_to_cluster(
                &RouteMatchSpec::any().header("x-form", "combined"),
                "combined",
            ),
            route_to_cluster(&RouteMatchSpec::any(), "secure"),
        ],
        &[
            ("secure", locality(&[a.addr])),
            ("combined", locality(&[b.addr])),
        ],
        vec![
            with_upstream_tls(
                eds_cluster("secure"),
                &UpstreamTlsSpec::mtls(MESH, MESH).san(exact_matcher(SERVER_SPIFFE_ID)),
            ),
            with_upstream_tls(
                eds_cluster("combined"),
                &UpstreamTlsSpec::mtls("mesh-identity", "mesh-roots")
                    .roots_form(RootsForm::CombinedValidationContext)
                    .san(prefix_matcher("spiffe://test.example/")),
            ),
        ],
    );
    let bootstrap = pki.bootstrap(&server, Duration::from_secs(600));
    let Some(mut client) = grpcio_client(&bootstrap, "mtls") else {
        return;
    };
    let plain = client.unary(10, &[]).await;
    assert_eq!(
        (plain.count("OK"), plain.served_by(a.addr)),
        (10, 10),
        "{plain:?}"
    );
    let combined = client.unary(10, &[("x-form", "combined")]).await;
    assert_eq!(
        (combined.count("OK"), combined.served_by(b.addr)),
        (10, 10),
        "{combined:?}"
    );
    for (log, which) in [(&log_a, "secure"), (&log_b, "combined")] {
        let connections = log.connections();
        assert!(!connections.is_empty(), "{which}: no connection");
        for c in &connections {
            assert!(c.tls, "{which}: {c:?}");
            assert_eq!(
                c.client_uris(),
                vec![CLIENT_SPIFFE_ID.to_owned()],
                "{which}: {c:?}"
            );
        }
    }
    clusters_acked(&server).await;
}

/// The Cluster's SAN matcher names another SPIFFE ID: the server's certificate does not match, every call
/// fails UNAVAILABLE, and no call reaches the server (though grpcio accepts the Cluster).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_san_mismatch_fails_unavailable_and_no_call_reaches_the_server() {
    let pki = pki("san-mismatch");
    let log = PeerLog::new();
    let backend = pki.mtls_backend(&log).await;
    let server = management_server().await;
    publish_one_secure(
        &server,
        "secure",
        backend.addr,
        &UpstreamTlsSpec::mtls(MESH, MESH).san(exact_matcher(OTHER_SPIFFE_ID)),
    );
    let bootstrap = pki.bootstrap(&server, Duration::from_secs(600));
    let Some(mut client) = grpcio_client(&bootstrap, "san-mismatch") else {
        return;
    };
    let batch = client.unary(5, &[]).await;
    assert_eq!(batch.count("UNAVAILABLE"), 5, "{batch:?}");
    assert_no_call_reached(&log);
    clusters_acked(&server).await;
}

/// A Cluster without `transport_socket`: with xDS credentials grpcio uses the fallback (plaintext) and the
/// calls pass on a plaintext backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_falls_back_to_plaintext_for_a_cluster_without_security() {
    let pki = pki("plaintext");
    let log = PeerLog::new();
    let backend = interop::server::start_with(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        ServerOptions::new().peer_log(log.clone()),
    )
    .await
    .expect("backend");
    let server = management_server().await;
    publish(
        &server,
        &["*"],
        vec![route_to_cluster(&RouteMatchSpec::any(), "plain")],
        &[("plain", locality(&[backend.addr]))],
    );
    let bootstrap = pki.bootstrap(&server, Duration::from_secs(600));
    let Some(mut client) = grpcio_client(&bootstrap, "plaintext") else {
        return;
    };
    let batch = client.unary(10, &[]).await;
    assert_eq!(
        (batch.count("OK"), batch.served_by(backend.addr)),
        (10, 10),
        "{batch:?}"
    );
    let connections = log.connections();
    assert!(!connections.is_empty() && connections.iter().all(|c| !c.tls));
    clusters_acked(&server).await;
}

/// The Cluster gives roots but no identity (TLS only) to a backend that requires a client certificate:
/// every call fails UNAVAILABLE, cleanly (the client keeps answering), and no call reaches the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_fails_cleanly_when_the_backend_requires_a_certificate_the_cluster_does_not_give() {
    let pki = pki("no-identity");
    let log = PeerLog::new();
    let backend = pki.mtls_backend(&log).await;
    let server = management_server().await;
    publish_one_secure(
        &server,
        "tls-only",
        backend.addr,
        &UpstreamTlsSpec::tls("mesh-roots").san(exact_matcher(SERVER_SPIFFE_ID)),
    );
    let bootstrap = pki.bootstrap(&server, Duration::from_secs(600));
    let Some(mut client) = grpcio_client(&bootstrap, "no-identity") else {
        return;
    };
    let batch = client.unary(5, &[]).await;
    assert_eq!(batch.count("UNAVAILABLE"), 5, "{batch:?}");
    assert_no_call_reached(&log);
    assert!(
        log.connections().iter().all(|c| c.client_sans.is_empty()),
        "{:?}",
        log.connections()
    );
    clusters_acked(&server).await;
}

/// The watched files are rotated to a new client identity while calls run (refresh interval 1 s): every
/// call passes, and once grpcio re-read the files, connections to new endpoints present the new identity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_new_connections_present_the_rotated_identity() {
    const ROTATED: &str = "spiffe://test.example/ns/default/sa/client-rotated";
    let pki = pki("rotation");
    let log = PeerLog::new();
    let first = pki.mtls_backend(&log).await;
    let server = management_server().await;
    publish_one_secure(
        &server,
        "secure",
        first.addr,
        &UpstreamTlsSpec::mtls(MESH, MESH).san(exact_matcher(SERVER_SPIFFE_ID)),
    );
    let bootstrap = pki.bootstrap(&server, Duration::from_secs(1));
    let Some(mut client) = grpcio_client(&bootstrap, "rotation") else {
        return;
    };
    let batch = client.unary(5, &[]).await;
    assert_eq!(batch.count("OK"), 5, "{batch:?}");
    let connections = log.connections();
    assert!(!connections.is_empty());
    assert_eq!(
        connections[0].client_uris(),
        vec![CLIENT_SPIFFE_ID.to_owned()]
    );

    let rotated = pki
        .ca
        .issue_with_uris(&[], &[ROTATED], Usage::Client)
        .expect("rotated identity");
    pki.files.write_identity(&rotated).expect("rotate");
    // Each round moves the cluster to a fresh backend, so grpcio opens a new connection; the files are
    // re-read every second, so within 40 rounds (at least 10 s) a new connection presents the new identity.
    // Old backends stay up: calls still going to them while grpcio moves over keep passing.
    let mut backends = vec![(first, log)];
    let mut presented = false;
    for round in 0..40 {
        let log = PeerLog::new();
        let backend = pki.mtls_backend(&log).await;
        set_endpoints(&server, &[("secure", locality(&[backend.addr]))]);
        let batch = client.unary(5, &[]).await;
        assert_eq!(batch.count("OK"), 5, "round {round}: {batch:?}");
        let connection = log
            .wait_for_connection(Duration::from_secs(10), |c| c.tls)
            .await;
        let Some(connection) = connection else {
            panic!("round {round}: no connection to {}", backend.addr);
        };
        backends.push((backend, log));
        if connection.client_uris() == [ROTATED.to_owned()] {
            presented = true;
            break;
        }
        // Pacing while grpcio's watcher re-reads the files; what is checked is the next connection.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        presented,
        "no new connection presented the rotated identity"
    );
    for (backend, log) in &backends {
        for c in log.connections() {
            let uris = c.client_uris();
            assert!(
                uris == [CLIENT_SPIFFE_ID.to_owned()] || uris == [ROTATED.to_owned()],
                "{}: {c:?}",
                backend.addr
            );
        }
    }
}
