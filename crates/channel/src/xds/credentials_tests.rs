//! xDS credentials (A29) against real TLS servers on loopback: the transport a cluster's security
//! settings register (`credentials.rs`) connects with the `file_watcher` providers' identity and roots
//! (files written by the test) and checks the server's SANs: mTLS passes, a SAN mismatch fails
//! UNAVAILABLE before HTTP/2 (no call can reach the server), a server requiring a client certificate
//! fails cleanly when the cluster gives none, a missing file fails naming it, a rotated identity is what
//! the next connection presents (the server records the client certificates it saw) while an existing
//! connection stays up.
//!
//! Waits for the provider's re-read are bounded polling loops on real time (real TLS handshakes).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use grpc_lb::{Address, TransportKey};
use grpc_xds::resource::{ClusterSecurity, ProviderInstance, RootSource, StringMatch};
use grpc_xds::CertificateFiles;
use interop::server::{start_tls, ServerHandle};
use interop::tls::{recording_mtls_server_config, CertifiedPem, SeenClients, TestCa, Usage};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use super::credentials::XdsCredentials;
use crate::conn::connect::{connect, Http2Settings};
use crate::conn::proxy::Route;
use crate::control::transports::Transports;
use crate::wire::status::{Code, Status};

const SERVER_DNS: &str = "backend.mesh.test";
const SERVER_SPIFFE: &str = "spiffe://mesh.test/ns/default/sa/backend";

/// An interop server over TLS with a DNS and a SPIFFE SAN, requiring a client certificate from `ca`;
/// the client certificates it saw.
async fn mtls_backend(ca: &TestCa) -> (ServerHandle, SeenClients) {
    let (config, seen) =
        recording_mtls_server_config(ca, SERVER_DNS, SERVER_SPIFFE).expect("test setup");
    let handle = start_tls(SocketAddr::from(([127, 0, 0, 1], 0)), config)
        .await
        .expect("test setup");
    (handle, seen)
}

fn temp_dir(tag: &str) -> super::temp_dir::TempDir {
    super::temp_dir::temp_dir("grpc-xds-credentials", tag)
}

fn write_identity(dir: &Path, id: &CertifiedPem) {
    std::fs::write(dir.join("client.pem"), &id.cert_pem).expect("test setup");
    std::fs::write(dir.join("client.key"), &id.key_pem).expect("test setup");
}

/// The bootstrap's instances: "identity" (client certificate and key) and "roots" (the CA), re-read
/// every `refresh`.
fn providers(dir: &Path, refresh: Duration) -> BTreeMap<String, CertificateFiles> {
    BTreeMap::from([
        (
            "identity".to_owned(),
            CertificateFiles {
                certificate_file: Some(dir.join("client.pem")),
                private_key_file: Some(dir.join("client.key")),
                ca_certificate_file: None,
                refresh_interval: refresh,
            },
        ),
        (
            "roots".to_owned(),
            CertificateFiles {
                certificate_file: None,
                private_key_file: None,
                ca_certificate_file: Some(dir.join("ca.pem")),
                refresh_interval: refresh,
            },
        ),
    ])
}

fn instance(name: &str) -> ProviderInstance {
    ProviderInstance {
        instance_name: name.to_owned(),
        certificate_name: String::new(),
    }
}

fn security(identity: bool, sans: Vec<StringMatch>) -> ClusterSecurity {
    ClusterSecurity {
        identity: identity.then(|| instance("identity")),
        roots: RootSource::Provider(instance("roots")),
        san_matchers: sans,
        sni: None,
    }
}

fn exact(v: &str) -> StringMatch {
    StringMatch::Exact {
        value: v.to_owned(),
        ignore_case: false,
    }
}

/// Registers `security` into a fresh registry and connects to `backend` with it.
async fn connect_with(
    providers: &BTreeMap<String, CertificateFiles>,
    security: &ClusterSecurity,
    backend: SocketAddr,
) -> Result<crate::conn::connect::Established, Status> {
    let transports = Transports::default();
    let credentials = XdsCredentials::new(providers.clone(), transports.clone());
    let key = XdsCredentials::key(security);
    credentials.sync(&BTreeMap::from([(key.clone(), security.clone())]));
    connect_over(&transports, &key, &Address::Tcp(backend)).await
}

/// Connects to `addr` with the transport `transports` registered under `key` (bounded: 20 s).
async fn connect_over(
    transports: &Transports,
    key: &TransportKey,
    addr: &Address,
) -> Result<crate::conn::connect::Established, Status> {
    let tls = transports.connector(key, addr)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    connect(
        addr,
        deadline,
        &Http2Settings::default(),
        Some(&tls),
        &Route::Direct,
    )
    .await
}

struct Setup {
    ca: TestCa,
    dir: super::temp_dir::TempDir,
    backend: ServerHandle,
    seen: SeenClients,
    client: CertifiedPem,
}

async fn setup(tag: &str) -> Setup {
    let ca = TestCa::new("xDS credentials test CA").expect("test setup");
    let dir = temp_dir(tag);
    std::fs::write(dir.0.join("ca.pem"), &ca.cert_pem).expect("test setup");
    let client = ca
        .issue(&["first.client.test"], Usage::Client)
        .expect("test setup");
    write_identity(&dir.0, &client);
    let (backend, seen) = mtls_backend(&ca).await;
    Setup {
        ca,
        dir,
        backend,
        seen,
        client,
    }
}

fn der(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("test setup")
        .to_vec()
}

#[tokio::test]
async fn mtls_with_matching_sans_connects_and_presents_the_identity() {
    let s = setup("mtls").await;
    let p = providers(&s.dir.0, Duration::from_secs(600));
    for sans in [
        vec![],
        vec![exact(SERVER_DNS)],
        vec![exact("other.test"), exact(SERVER_SPIFFE)],
        vec![StringMatch::Prefix {
            value: "spiffe://mesh.test/".to_owned(),
            ignore_case: false,
        }],
    ] {
        let established = connect_with(&p, &security(true, sans.clone()), s.backend.addr).await;
        assert!(established.is_ok(), "{sans:?}: {:?}", established.err());
    }
    assert!(s.seen.lock().iter().all(|c| *c == der(&s.client.cert_pem)));
}

#[tokio::test]
async fn a_san_mismatch_fails_the_handshake_unavailable() {
    let s = setup("mismatch").await;
    let p = providers(&s.dir.0, Duration::from_secs(600));
    let e = connect_with(
        &p,
        &security(true, vec![exact("someone-else.mesh.test")]),
        s.backend.addr,
    )
    .await
    .err()
    .expect("refused");
    assert_eq!(e.code(), Code::Unavailable);
    assert!(
        e.message()
            .contains("SANs from certificate did not match SANs from xDS control plane"),
        "{e}"
    );
    assert!(
        e.message().contains(SERVER_SPIFFE),
        "names what it saw: {e}"
    );
}

#[tokio::test]
async fn a_server_requiring_a_client_certificate_fails_cleanly_without_identity() {
    let s = setup("no-identity").await;
    let p = providers(&s.dir.0, Duration::from_secs(600));
    let e = connect_with(&p, &security(false, vec![]), s.backend.addr)
        .await
        .err()
        .expect("refused");
    assert_eq!(e.code(), Code::Unavailable);
    assert!(e.message().contains("client certificate"), "{e}");
}

#[tokio::test]
async fn missing_files_and_unknown_instances_fail_naming_why() {
    let s = setup("missing").await;
    std::fs::remove_file(s.dir.0.join("client.key")).expect("test setup");
    let p = providers(&s.dir.0, Duration::from_secs(600));
    let e = connect_with(&p, &security(true, vec![]), s.backend.addr)
        .await
        .err()
        .expect("no identity");
    assert_eq!(e.code(), Code::Unavailable);
    assert!(e.message().contains("client.key"), "{e}");
    let mut unknown = security(false, vec![]);
    unknown.roots = RootSource::Provider(instance("nowhere"));
    let e = connect_with(&p, &unknown, s.backend.addr)
        .await
        .err()
        .expect("no instance");
    assert_eq!(e.code(), Code::Unavailable);
    assert!(e.message().contains("\"nowhere\""), "{e}");
    assert!(s.seen.lock().is_empty(), "nothing reached the server");
}

#[tokio::test]
async fn a_rotated_identity_is_presented_by_new_connections() {
    let s = setup("rotate").await;
    let p = providers(&s.dir.0, Duration::from_millis(200));
    let sec = security(true, vec![exact(SERVER_DNS)]);
    let transports = Transports::default();
    let credentials = XdsCredentials::new(p, transports.clone());
    let key = XdsCredentials::key(&sec);
    credentials.sync(&BTreeMap::from([(key.clone(), sec.clone())]));
    let addr = Address::Tcp(s.backend.addr);
    let connect_once = || connect_over(&transports, &key, &addr);
    let first = connect_once().await.expect("first identity");
    assert_eq!(s.seen.lock().last(), Some(&der(&s.client.cert_pem)));
    let second =
        s.ca.issue(&["second.client.test"], Usage::Client)
            .expect("test setup");
    write_identity(&s.dir.0, &second);
    // The provider re-reads every 200 ms: each new connection presents the newest identity.
    let mut rotated = false;
    for _ in 0..100 {
        let conn = connect_once()
            .await
            .expect("no connection fails during rotation");
        drop(conn);
        if s.seen.lock().last() == Some(&der(&second.cert_pem)) {
            rotated = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(rotated, "a new connection presented the rotated identity");
    let mut send = first.send.clone();
    assert!(
        futures_ready(&mut send).await,
        "the connection made with the first identity is still up"
    );
}

/// Whether an established connection still takes streams.
async fn futures_ready(send: &mut h2::client::SendRequest<bytes::Bytes>) -> bool {
    std::future::poll_fn(|cx| send.poll_ready(cx)).await.is_ok()
}

#[tokio::test]
async fn the_registry_holds_the_keys_in_use_only() {
    let dir = temp_dir("registry");
    let transports = Transports::default();
    let credentials = XdsCredentials::new(
        providers(&dir.0, Duration::from_secs(600)),
        transports.clone(),
    );
    let a = security(true, vec![exact("a")]);
    let b = security(false, vec![exact("b")]);
    let (ka, kb) = (XdsCredentials::key(&a), XdsCredentials::key(&b));
    assert_eq!(
        ka,
        XdsCredentials::key(&a.clone()),
        "equal settings, equal keys"
    );
    assert_ne!(ka, kb);
    credentials.sync(&BTreeMap::from([(ka.clone(), a.clone()), (kb.clone(), b)]));
    assert_eq!(transports.len(), 2);
    credentials.sync(&BTreeMap::from([(ka.clone(), a.clone())]));
    assert_eq!(transports.len(), 1);
    let e = transports
        .connector(&kb, &Address::Tcp(SocketAddr::from(([127, 0, 0, 1], 1))))
        .expect_err("gone");
    assert_eq!(e.code(), Code::Unavailable);
    credentials.sync(&BTreeMap::new());
    assert_eq!(transports.len(), 0);
    // A closed registry (the channel closed) drops what it held and takes nothing more.
    credentials.sync(&BTreeMap::from([(ka.clone(), a.clone())]));
    assert_eq!(transports.len(), 1);
    transports.close();
    assert_eq!(transports.len(), 0);
    credentials.sync(&BTreeMap::from([(ka, a)]));
    assert_eq!(transports.len(), 0, "nothing is registered after the close");
}
