//! TLS for a channel's connections, on rustls (ring provider, TLS 1.2 and 1.3).
//!
//! A [`TlsConfig`] says which roots to trust (the platform's store, the webpki-roots bundle, or PEM
//! certificates), an optional client certificate (mTLS) and an optional server name. The channel builds it
//! once into a [`TlsConnector`]; every connection (one per subchannel) then makes its own TLS session.
//!
//! What always holds:
//! * the server's certificate is verified against the roots and the server name; there is no way to turn
//!   verification off and no plaintext fallback;
//! * ALPN offers `h2` only, and a server that does not select it fails the connection: gRPC needs HTTP/2;
//! * the server name is, in order: [`TlsConfig::server_name`], the host of the channel's `authority`
//!   override, the target's host (an IP literal is checked against the certificate's IP addresses; an
//!   `ipv4:`/`ipv6:` list uses its first address for every backend; a Unix socket target uses
//!   `localhost`);
//! * the platform's root store is read once per process, on the first channel that uses it;
//! * a failed handshake is UNAVAILABLE with a message that starts `TLS handshake failed:` and
//!   names the cause (unknown certificate authority, name mismatch, expiry, no ALPN h2, a plaintext
//!   server...), with the `rustls::Error` as the status's `source()`.
//!
//! Not here: certificate revocation (CRLs, OCSP), session ticket configuration, ECH, ALTS.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::sync::atomic::{AtomicBool, Ordering};

use rustls::client::ResolvesClientCert;
use rustls::sign::CertifiedKey;
use rustls::{AlertDescription, CertificateError, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::client::TlsStream;

use crate::conn::error::BuildError;
use crate::wire::status::{Code, Status};

/// Where PEM data comes from.
#[derive(Clone, Debug)]
enum Pem {
    Bytes(Vec<u8>),
    File(PathBuf),
}

impl Pem {
    /// `what` it holds, named by its file's path when it is a file (so every error names the file).
    fn describe(&self, what: &str) -> String {
        match self {
            Pem::Bytes(_) => format!("{what} PEM"),
            Pem::File(path) => format!("{what} file {}", path.display()),
        }
    }

    fn read(&self, what: &str) -> Result<Vec<u8>, BuildError> {
        match self {
            Pem::Bytes(b) => Ok(b.clone()),
            Pem::File(path) => std::fs::read(path).map_err(|e| {
                tls_option(format!(
                    "cannot read the {what} file {}: {e}",
                    path.display()
                ))
            }),
        }
    }
}

/// A set of roots to trust.
#[derive(Clone, Debug)]
enum Roots {
    /// The operating system's store (rustls-native-certs).
    Platform,
    /// Mozilla's roots, compiled in (webpki-roots).
    WebPki,
    /// PEM certificates.
    Pem(Pem),
}

/// A client certificate chain and its private key, in PEM.
#[derive(Clone, Debug)]
struct Identity {
    chain: Pem,
    key: Pem,
}

/// How a channel's connections use TLS: the roots to trust, an optional client certificate and an optional
/// server name. Given to [`ChannelBuilder::tls`](crate::ChannelBuilder::tls); an `https://` target without
/// one uses `TlsConfig::new()`.
///
/// ```
/// use grpc_channel::{Channel, TlsConfig};
///
/// # fn example(ca_pem: Vec<u8>) -> Result<(), grpc_channel::BuildError> {
/// let tls = TlsConfig::new()
///     .ca_certificate_pem(ca_pem)
///     .server_name("foo.test.google.fr");
/// let channel = Channel::builder("dns:///localhost:50051").tls(tls).build()?;
/// # Ok(()) }
/// ```
#[doc(alias("ClientTlsConfig", "tls_config"))]
#[derive(Clone, Debug, Default)]
pub struct TlsConfig {
    roots: Vec<Roots>,
    identity: Option<Identity>,
    server_name: Option<String>,
}

impl TlsConfig {
    /// A configuration that trusts the platform's root store unless other roots are added.
    pub fn new() -> TlsConfig {
        TlsConfig::default()
    }

    /// Trusts the operating system's root certificates (the default when no roots are added).
    pub fn platform_roots(mut self) -> TlsConfig {
        self.roots.push(Roots::Platform);
        self
    }

    /// Trusts Mozilla's root certificates, compiled into the program (webpki-roots).
    pub fn webpki_roots(mut self) -> TlsConfig {
        self.roots.push(Roots::WebPki);
        self
    }

    /// Trusts the certificates of this PEM data (one or more `CERTIFICATE` blocks).
    pub fn ca_certificate_pem(mut self, pem: impl Into<Vec<u8>>) -> TlsConfig {
        self.roots.push(Roots::Pem(Pem::Bytes(pem.into())));
        self
    }

    /// Trusts the certificates of this PEM file, read when the channel is built.
    pub fn ca_certificate_file(mut self, path: impl Into<PathBuf>) -> TlsConfig {
        self.roots.push(Roots::Pem(Pem::File(path.into())));
        self
    }

    /// Presents this client certificate chain (PEM, leaf first) and private key (PEM: PKCS#8, PKCS#1 or
    /// SEC1) to servers that ask for one (mutual TLS).
    pub fn identity_pem(
        mut self,
        cert_chain: impl Into<Vec<u8>>,
        private_key: impl Into<Vec<u8>>,
    ) -> TlsConfig {
        self.identity = Some(Identity {
            chain: Pem::Bytes(cert_chain.into()),
            key: Pem::Bytes(private_key.into()),
        });
        self
    }

    /// Like [`TlsConfig::identity_pem`], from files read when the channel is built.
    pub fn identity_files(
        mut self,
        cert_chain: impl Into<PathBuf>,
        private_key: impl Into<PathBuf>,
    ) -> TlsConfig {
        self.identity = Some(Identity {
            chain: Pem::File(cert_chain.into()),
            key: Pem::File(private_key.into()),
        });
        self
    }

    /// The name the server's certificate must be valid for, and the SNI sent (by default the host of the
    /// channel's authority).
    pub fn server_name(mut self, name: impl Into<String>) -> TlsConfig {
        self.server_name = Some(name.into());
        self
    }

    /// The server name set with [`TlsConfig::server_name`], if any.
    pub(crate) fn server_name_override(&self) -> Option<&str> {
        self.server_name.as_deref()
    }

    /// Builds the connector for a channel whose authority host is `default_name`.
    pub(crate) fn connector(&self, default_name: &str) -> Result<TlsConnector, BuildError> {
        let name_text = self.server_name.as_deref().unwrap_or(default_name);
        let server_name = ServerName::try_from(name_text.to_owned())
            .map_err(|e| tls_option(format!("{name_text:?} is not a valid server name: {e}")))?;
        let mut store = RootCertStore::empty();
        let platform = [Roots::Platform];
        let roots = if self.roots.is_empty() {
            &platform[..]
        } else {
            &self.roots[..]
        };
        for source in roots {
            match source {
                Roots::Platform => {
                    let (added, _ignored) =
                        store.add_parsable_certificates(platform_roots()?.iter().cloned());
                    if added == 0 {
                        return Err(tls_option(
                            "none of the platform's root certificates is usable".to_owned(),
                        ));
                    }
                }
                Roots::WebPki => store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
                Roots::Pem(pem) => {
                    let bytes = pem.read("CA certificate")?;
                    let what = pem.describe("CA certificate");
                    let certs = read_certificates(&bytes, &what)?;
                    for cert in certs {
                        store.add(cert).map_err(|e| {
                            tls_option(format!("a certificate of the {what} cannot be a root: {e}"))
                        })?;
                    }
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_option(e.to_string()))?
            .with_root_certificates(store);
        let mut config = match &self.identity {
            None => builder.with_no_client_auth(),
            Some(identity) => {
                let chain_what = identity.chain.describe("client certificate");
                let chain =
                    read_certificates(&identity.chain.read("client certificate")?, &chain_what)?;
                let key_pem = identity.key.read("private key")?;
                let key_what = identity.key.describe("private key");
                let key = PrivateKeyDer::from_pem_slice(&key_pem)
                    .map_err(|e| tls_option(format!("no usable key in the {key_what}: {e}")))?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    tls_option(format!("the {chain_what} and {key_what} are unusable: {e}"))
                })?
            }
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(TlsConnector {
            config: Arc::new(config),
            server_name,
            has_identity: self.identity.is_some(),
        })
    }
}

/// The platform's root certificates, read once per process (the store is files: reading it for every
/// channel built would be slow and blocking).
fn platform_roots() -> Result<&'static [CertificateDer<'static>], BuildError> {
    static ROOTS: std::sync::OnceLock<Result<Vec<CertificateDer<'static>>, String>> =
        std::sync::OnceLock::new();
    let roots = ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        if found.certs.is_empty() {
            let why = found
                .errors
                .first()
                .map(|e| format!(": {e}"))
                .unwrap_or_default();
            return Err(format!(
                "no root certificates found in the platform's store{why}; give a CA certificate or \
                 use the webpki roots"
            ));
        }
        Ok(found.certs)
    });
    roots.as_deref().map_err(|e| tls_option(e.clone()))
}

/// The host of an authority (`host:port`, `[v6]:port`, `host`): the default TLS server name.
pub(crate) fn server_name_host(authority: &str) -> String {
    if let Some(rest) = authority.strip_prefix('[') {
        if let Some((host, _)) = rest.split_once(']') {
            return host.to_owned();
        }
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            host.to_owned()
        }
        _ => authority.to_owned(),
    }
}

fn tls_option(reason: String) -> BuildError {
    BuildError::InvalidOption {
        option: "tls",
        reason,
    }
}

/// The certificates of `pem`, which holds `what` (as [`Pem::describe`] names it).
fn read_certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, BuildError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_option(format!("the {what} is malformed: {e}")))?;
    if certs.is_empty() {
        return Err(tls_option(format!("the {what} holds no CERTIFICATE block")));
    }
    Ok(certs)
}

/// Makes TLS sessions for a channel's connections.
#[derive(Clone)]
pub(crate) struct TlsConnector {
    config: Arc<rustls::ClientConfig>,
    server_name: ServerName<'static>,
    has_identity: bool,
}

/// What a connection's TLS handshake showed, for naming a failure that comes after it.
#[derive(Clone, Debug)]
pub(crate) struct Handshake {
    /// The server sent a CertificateRequest (it wants mutual TLS).
    asked_for_certificate: Arc<AtomicBool>,
    /// The channel has a client certificate to present.
    has_identity: bool,
}

/// The configured client certificate resolver, noting whether the server asked for a certificate (rustls
/// asks the resolver only when a CertificateRequest arrives).
#[derive(Debug)]
struct NoteRequest {
    inner: Arc<dyn ResolvesClientCert>,
    asked: Arc<AtomicBool>,
}

impl ResolvesClientCert for NoteRequest {
    fn resolve(
        &self,
        root_hint_subjects: &[&[u8]],
        sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.asked.store(true, Ordering::Relaxed);
        self.inner.resolve(root_hint_subjects, sigschemes)
    }

    fn only_raw_public_keys(&self) -> bool {
        self.inner.only_raw_public_keys()
    }

    fn has_certs(&self) -> bool {
        self.inner.has_certs()
    }
}

impl std::fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConnector")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl TlsConnector {
    /// A connector from a finished rustls configuration (ALPN already `h2`), sending `server_name`;
    /// `has_identity`: whether it presents a client certificate (for naming a refused one).
    #[cfg(feature = "xds")]
    pub(crate) fn from_config(
        config: Arc<rustls::ClientConfig>,
        server_name: ServerName<'static>,
        has_identity: bool,
    ) -> TlsConnector {
        TlsConnector {
            config,
            server_name,
            has_identity,
        }
    }

    /// The TLS handshake on a connected socket; fails unless the server selects ALPN `h2`.
    pub(crate) async fn connect<IO>(&self, io: IO) -> Result<(TlsStream<IO>, Handshake), Status>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        // A copy of the configuration per connection, to note what this server asks (the session cache
        // stays shared: it is behind an Arc).
        let asked = Arc::new(AtomicBool::new(false));
        let mut config = (*self.config).clone();
        config.client_auth_cert_resolver = Arc::new(NoteRequest {
            inner: self.config.client_auth_cert_resolver.clone(),
            asked: asked.clone(),
        });
        let handshake = Handshake {
            asked_for_certificate: asked,
            has_identity: self.has_identity,
        };
        let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(self.server_name.clone(), io)
            .await
            .map_err(|e| handshake_failed(&self.server_name, e))?;
        if stream.get_ref().1.alpn_protocol() != Some(b"h2".as_slice()) {
            return Err(Status::new(
                Code::Unavailable,
                "TLS handshake failed: the server does not offer HTTP/2 (ALPN h2), which gRPC needs",
            )
            .with_source(rustls::Error::NoApplicationProtocol));
        }
        Ok((stream, handshake))
    }
}

/// UNAVAILABLE naming the TLS cause of an HTTP/2 error on a new TLS connection, if it has one.
///
/// With TLS 1.3 the server checks the client's certificate after the client's side of the handshake is
/// done: a refused or missing client certificate shows up as the server's alert on the first read, or,
/// when the server's close (a reset, as the client's first bytes are unread) arrives first, as a broken
/// connection before the server sent any HTTP/2 frame. `heard_http2` says whether it sent one. The
/// client-certificate wording is used only when the server asked for one.
pub(crate) fn connection_error(
    err: &h2::Error,
    handshake: &Handshake,
    heard_http2: bool,
) -> Option<Status> {
    let io = err.get_io()?;
    if let Some(rustls_error) = io
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        let cause = describe(rustls_error, "");
        return Some(
            Status::new(Code::Unavailable, format!("TLS handshake failed: {cause}"))
                .with_source(rustls_error.clone()),
        );
    }
    if heard_http2 {
        return None;
    }
    let message = match (
        handshake.asked_for_certificate.load(Ordering::Relaxed),
        handshake.has_identity,
    ) {
        (true, false) => format!(
            "TLS handshake failed: the server requires a client certificate (mutual TLS) and none was \
             given; it closed the connection ({io})"
        ),
        (true, true) => format!(
            "TLS handshake failed: the server did not accept the client certificate; it closed the \
             connection ({io})"
        ),
        (false, _) => format!(
            "the server closed the connection after the TLS handshake, before HTTP/2 started ({io})"
        ),
    };
    Some(
        Status::new(Code::Unavailable, message)
            .with_source(std::io::Error::new(io.kind(), io.to_string())),
    )
}

/// UNAVAILABLE for a failed handshake, naming the cause.
fn handshake_failed(name: &ServerName<'static>, err: std::io::Error) -> Status {
    let name = name.to_str();
    let rustls_error = err
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .cloned();
    let cause = match &rustls_error {
        Some(e) => describe(e, &name),
        None if err.kind() == std::io::ErrorKind::UnexpectedEof => {
            "the server closed the connection during the handshake".to_owned()
        }
        None => format!("{err}"),
    };
    let status = Status::new(Code::Unavailable, format!("TLS handshake failed: {cause}"));
    match rustls_error {
        Some(e) => status.with_source(e),
        None => status.with_source(err),
    }
}

/// A rustls error in words a user acts on.
fn describe(err: &rustls::Error, name: &str) -> String {
    use rustls::Error as E;
    match err {
        E::InvalidCertificate(cert) => match cert {
            CertificateError::UnknownIssuer => {
                "the server's certificate is signed by an unknown certificate authority".to_owned()
            }
            // A trusted CA has the issuer's name but not its key: the usual cause is a CA regenerated
            // under the same subject, which is an authority this client does not know.
            CertificateError::BadSignature => {
                "the server's certificate is signed by an unknown certificate authority (a trusted CA \
                 has the issuer's name, but its key did not sign the certificate: was the CA \
                 regenerated?)"
                    .to_owned()
            }
            CertificateError::NotValidForName => {
                format!("the server's certificate is not valid for the name {name:?}")
            }
            CertificateError::NotValidForNameContext { presented, .. } => format!(
                "the server's certificate is not valid for the name {name:?} (it names {})",
                presented
                    .iter()
                    .map(|p| presented_name(p))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "the server's certificate has expired".to_owned()
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "the server's certificate is not valid yet".to_owned()
            }
            CertificateError::Revoked => "the server's certificate is revoked".to_owned(),
            // A custom check's own words (xDS credentials' SAN check).
            CertificateError::Other(why) => why.to_string(),
            other => format!("the server's certificate is invalid: {other:?}"),
        },
        E::AlertReceived(alert) => match alert {
            AlertDescription::NoApplicationProtocol => {
                "the server does not offer HTTP/2 (ALPN h2), which gRPC needs".to_owned()
            }
            AlertDescription::CertificateRequired => {
                "the server requires a client certificate (mutual TLS) and none was given"
                    .to_owned()
            }
            AlertDescription::UnknownCA
            | AlertDescription::BadCertificate
            | AlertDescription::CertificateUnknown => {
                format!("the server refused the client certificate ({alert:?})")
            }
            AlertDescription::HandshakeFailure => {
                "the server ended the handshake (handshake_failure: no common cipher suite or \
                 protocol version, or a client certificate it requires)"
                    .to_owned()
            }
            other => format!("the server sent the alert {other:?}"),
        },
        E::InvalidMessage(_) | E::InappropriateMessage { .. } => {
            "the server did not answer in TLS (is it a plaintext server?)".to_owned()
        }
        E::NoCertificatesPresented => "the server presented no certificate".to_owned(),
        E::PeerIncompatible(why) => format!("the server is incompatible: {why:?}"),
        other => other.to_string(),
    }
}

/// `DnsName("a.example")` or `IpAddress(127.0.0.1)`, as rustls reports a certificate's names, as `a.example`
/// or `127.0.0.1`.
fn presented_name(presented: &str) -> &str {
    ["DnsName(\"", "IpAddress(", "URI(\""]
        .iter()
        .find_map(|prefix| presented.strip_prefix(prefix))
        .map(|rest| rest.trim_end_matches(')').trim_end_matches('"'))
        .unwrap_or(presented)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_from_hosts_and_ip_literals() {
        let c = TlsConfig::new()
            .webpki_roots()
            .connector("example.com")
            .expect("builds");
        assert!(matches!(c.server_name, ServerName::DnsName(_)));
        let c = TlsConfig::new()
            .webpki_roots()
            .connector("127.0.0.1")
            .expect("builds");
        assert!(matches!(c.server_name, ServerName::IpAddress(_)));
        let c = TlsConfig::new()
            .webpki_roots()
            .server_name("foo.test.google.fr")
            .connector("127.0.0.1")
            .expect("builds");
        assert_eq!(c.server_name.to_str(), "foo.test.google.fr");
    }

    #[test]
    fn the_default_server_name_is_the_authority_host() {
        assert_eq!(
            server_name_host("foo.test.google.fr:443"),
            "foo.test.google.fr"
        );
        assert_eq!(server_name_host("[::1]:50051"), "::1");
        assert_eq!(server_name_host("localhost"), "localhost");
        assert_eq!(server_name_host("127.0.0.1:1"), "127.0.0.1");
    }

    #[test]
    fn bad_pem_and_missing_files_are_build_errors() {
        let e = TlsConfig::new()
            .ca_certificate_pem(b"not pem".to_vec())
            .connector("x")
            .expect_err("no certificate");
        assert!(e.to_string().contains("holds no CERTIFICATE block"), "{e}");
        let e = TlsConfig::new()
            .ca_certificate_file("/nonexistent/ca.pem")
            .connector("x")
            .expect_err("missing file");
        assert!(
            e.to_string()
                .contains("cannot read the CA certificate file"),
            "{e}"
        );
        let e = TlsConfig::new()
            .webpki_roots()
            .server_name("bad name!")
            .connector("x")
            .expect_err("bad name");
        assert!(e.to_string().contains("not a valid server name"), "{e}");
    }

    /// Every error of a file's content names the file: a CA file, a client certificate file and a
    /// private key file holding no PEM of their kind.
    #[test]
    fn bad_file_contents_name_the_file() {
        let dir = std::env::temp_dir().join(format!("grpc-tls-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let garbage = |name: &str| {
            let path = dir.join(name);
            std::fs::write(&path, "not a PEM\n").expect("write");
            path
        };
        let e = TlsConfig::new()
            .ca_certificate_file(garbage("bad-ca.pem"))
            .connector("x")
            .expect_err("no CA certificate");
        assert!(
            e.to_string().contains("bad-ca.pem") && e.to_string().contains("CERTIFICATE"),
            "{e}"
        );
        let e = TlsConfig::new()
            .webpki_roots()
            .identity_files(garbage("bad-chain.pem"), garbage("key.pem"))
            .connector("x")
            .expect_err("no client certificate");
        assert!(e.to_string().contains("bad-chain.pem"), "{e}");
        use interop::tls::{TestCa, Usage};
        let ca = TestCa::new("tls files test CA").expect("CA");
        let client = ca.issue(&["client.test"], Usage::Client).expect("client");
        let chain = dir.join("chain.pem");
        std::fs::write(&chain, &client.cert_pem).expect("write");
        let e = TlsConfig::new()
            .webpki_roots()
            .identity_files(chain, garbage("bad-key.pem"))
            .connector("x")
            .expect_err("no key");
        assert!(e.to_string().contains("bad-key.pem"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn causes_are_named() {
        let n = "foo.example";
        let d = |e: rustls::Error| describe(&e, n);
        assert!(d(rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer
        ))
        .contains("unknown certificate authority"));
        assert!(
            d(rustls::Error::InvalidCertificate(CertificateError::Expired)).contains("expired")
        );
        assert!(d(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName
        ))
        .contains("not valid for the name \"foo.example\""));
        assert!(d(rustls::Error::AlertReceived(
            AlertDescription::NoApplicationProtocol
        ))
        .contains("ALPN h2"));
        assert_eq!(
            presented_name("DnsName(\"*.test.google.fr\")"),
            "*.test.google.fr"
        );
        assert_eq!(presented_name("IpAddress(127.0.0.1)"), "127.0.0.1");
        assert!(d(rustls::Error::AlertReceived(
            AlertDescription::CertificateRequired
        ))
        .contains("requires a client certificate"));
    }
}
