//! TLS for the interop server and for tests: a throwaway certificate authority (rcgen) that issues server
//! and client certificates, and rustls server configurations (ring provider).
//!
//! Nothing here is committed key material: [`TestCa::new`] makes a fresh key pair every time, and
//! `interop-certs` writes the interop suite's CA and server certificate under `target/` at set-up. The
//! server certificate for the interop suite names `*.test.google.fr`, `localhost` and `127.0.0.1`, so that
//! clients can use the standard `--server_host_override=foo.test.google.fr`.
//!
//! For xDS security (gRFC A29) the same CA issues certificates with SPIFFE URI SANs
//! ([`TestCa::issue_with_uris`], [`SERVER_SPIFFE_ID`], [`CLIENT_SPIFFE_ID`]), [`WatchedFiles`] writes a
//! certificate, key and CA into one directory as a bootstrap's `file_watcher` certificate provider names
//! them (replaced whole, for rotation), and [`certificate_sans`] reads the SANs of a peer's certificate (a
//! small DER walk of the one extension, not a general X.509 parser: it does not check signatures or dates).
//! [`recording_mtls_server_config`] makes a server configuration requiring a client certificate that records
//! the ones clients presented.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

/// The names of the interop suite's server certificate.
pub const INTEROP_SERVER_NAMES: &[&str] = &["*.test.google.fr", "localhost", "127.0.0.1", "::1"];

/// The host name interop clients verify with `--server_host_override`.
pub const INTEROP_HOST_OVERRIDE: &str = "foo.test.google.fr";

/// The SPIFFE trust domain of the test mesh's identities.
pub const MESH_TRUST_DOMAIN: &str = "test.example";

/// The SPIFFE ID (URI SAN) of the test mesh's server certificates; the interop suite's server certificate
/// carries it too, for `cargo xtask interop --xds --tls`.
pub const SERVER_SPIFFE_ID: &str = "spiffe://test.example/ns/default/sa/server";

/// The SPIFFE ID (URI SAN) of the test mesh's client identity.
pub const CLIENT_SPIFFE_ID: &str = "spiffe://test.example/ns/default/sa/client";

/// Why a certificate or configuration could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// rcgen could not make a key or certificate.
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
    /// rustls refused the configuration.
    #[error("TLS configuration refused: {0}")]
    Rustls(#[from] rustls::Error),
    /// The PEM could not be read.
    #[error("bad PEM: {0}")]
    Pem(String),
    /// A file could not be read or written.
    #[error("{0}")]
    Io(String),
}

/// A certificate and its private key, in PEM.
#[derive(Clone, Debug)]
pub struct CertifiedPem {
    /// The certificate (one `CERTIFICATE` block).
    pub cert_pem: String,
    /// Its private key (PKCS#8).
    pub key_pem: String,
}

/// What kind of certificate [`TestCa::issue`] makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    /// A server certificate (serverAuth).
    Server,
    /// A client certificate (clientAuth).
    Client,
    /// Both (serverAuth and clientAuth), as mesh workloads' certificates often are.
    Both,
}

/// A throwaway certificate authority.
pub struct TestCa {
    /// The CA's certificate, for clients to trust.
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    /// A fresh CA named `common_name`.
    pub fn new(common_name: &str) -> Result<TestCa, TlsSetupError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(TestCa {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// A certificate for `names` (DNS names or IP addresses), valid from 1975 to 4096.
    pub fn issue(&self, names: &[&str], usage: Usage) -> Result<CertifiedPem, TlsSetupError> {
        self.issue_with(names, usage, |_| {})
    }

    /// Like [`TestCa::issue`], with these URI SANs (SPIFFE IDs such as [`SERVER_SPIFFE_ID`]) after the DNS
    /// and IP ones. With no `names` the subject's common name is the first URI.
    pub fn issue_with_uris(
        &self,
        names: &[&str],
        uris: &[&str],
        usage: Usage,
    ) -> Result<CertifiedPem, TlsSetupError> {
        let uri_sans = uris
            .iter()
            .map(|u| Ok(SanType::URI((*u).try_into()?)))
            .collect::<Result<Vec<_>, rcgen::Error>>()?;
        let common_name = names.first().or(uris.first()).copied();
        self.issue_with(names, usage, |p| {
            p.subject_alt_names.extend(uri_sans);
            if let Some(cn) = common_name {
                let mut dn = DistinguishedName::new();
                dn.push(DnType::CommonName, cn);
                p.distinguished_name = dn;
            }
        })
    }

    /// Like [`TestCa::issue`], expired since 2001.
    pub fn issue_expired(&self, names: &[&str]) -> Result<CertifiedPem, TlsSetupError> {
        self.issue_with(names, Usage::Server, |p| {
            p.not_before = rcgen::date_time_ymd(2000, 1, 1);
            p.not_after = rcgen::date_time_ymd(2001, 1, 1);
        })
    }

    fn issue_with(
        &self,
        names: &[&str],
        usage: Usage,
        adjust: impl FnOnce(&mut CertificateParams),
    ) -> Result<CertifiedPem, TlsSetupError> {
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())?;
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            names.first().copied().unwrap_or("client"),
        );
        params.distinguished_name = dn;
        params.extended_key_usages = match usage {
            Usage::Server => vec![ExtendedKeyUsagePurpose::ServerAuth],
            Usage::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
            Usage::Both => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        };
        adjust(&mut params);
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(CertifiedPem {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A rustls server configuration presenting `identity`, offering the ALPN protocols `alpn` (`[b"h2"]` for
/// gRPC; empty to offer none), and, with `client_ca`, requiring a client certificate signed by it.
pub fn server_config(
    identity: &CertifiedPem,
    alpn: &[&[u8]],
    client_ca: Option<&str>,
) -> Result<Arc<rustls::ServerConfig>, TlsSetupError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = CertificateDer::pem_slice_iter(identity.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsSetupError::Pem(e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(identity.key_pem.as_bytes())
        .map_err(|e| TlsSetupError::Pem(e.to_string()))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                roots.add(cert.map_err(|e| TlsSetupError::Pem(e.to_string()))?)?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsSetupError::Pem(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key)?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// The leaf certificates (DER) of the clients that presented one to a server, in order.
pub type SeenClients = Arc<parking_lot::Mutex<Vec<Vec<u8>>>>;

/// A client certificate verifier that records the leaf certificate of every client presenting one, then
/// leaves the verdict to `inner`.
#[derive(Debug)]
struct RecordingClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    seen: SeenClients,
}

impl ClientCertVerifier for RecordingClientVerifier {
    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.seen.lock().push(end_entity.to_vec());
        self.inner
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A rustls server configuration (ALPN `h2`) presenting a certificate `ca` issues with the DNS SAN `dns`
/// and the URI SAN `uri`, requiring a client certificate signed by `ca`; and the client certificates its
/// servers see (each handshake's, verified or not). For xDS security tests (`crate::server::start_tls`).
pub fn recording_mtls_server_config(
    ca: &TestCa,
    dns: &str,
    uri: &str,
) -> Result<(Arc<rustls::ServerConfig>, SeenClients), TlsSetupError> {
    let server = ca.issue_with_uris(&[dns], &[uri], Usage::Server)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    roots.add(
        CertificateDer::from_pem_slice(ca.cert_pem.as_bytes())
            .map_err(|e| TlsSetupError::Pem(e.to_string()))?,
    )?;
    let inner = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| TlsSetupError::Pem(e.to_string()))?;
    let seen = SeenClients::default();
    let verifier = Arc::new(RecordingClientVerifier {
        inner,
        seen: seen.clone(),
    });
    let chain = vec![CertificateDer::from_pem_slice(server.cert_pem.as_bytes())
        .map_err(|e| TlsSetupError::Pem(e.to_string()))?];
    let key = PrivateKeyDer::from_pem_slice(server.key_pem.as_bytes())
        .map_err(|e| TlsSetupError::Pem(e.to_string()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok((Arc::new(config), seen))
}

/// The interop suite's files, as `interop-certs` writes them into one directory.
pub struct InteropFiles;

impl InteropFiles {
    /// The CA certificate clients trust (`--ca_file`, or `--use_test_ca`).
    pub const CA: &'static str = "ca.pem";
    /// The server's certificate.
    pub const SERVER_CERT: &'static str = "server.pem";
    /// The server's private key.
    pub const SERVER_KEY: &'static str = "server.key";
    /// The client identity's certificate ([`CLIENT_SPIFFE_ID`]), for mTLS through xDS.
    pub const CLIENT_CERT: &'static str = "client.pem";
    /// The client identity's private key.
    pub const CLIENT_KEY: &'static str = "client.key";

    /// Makes a fresh CA, the interop server certificate (also naming [`SERVER_SPIFFE_ID`]) and a client
    /// identity ([`CLIENT_SPIFFE_ID`]), and writes them into `dir`.
    pub fn generate(dir: &Path) -> Result<(), TlsSetupError> {
        let ca = TestCa::new("grpc-channel interop test CA")?;
        let server =
            ca.issue_with_uris(INTEROP_SERVER_NAMES, &[SERVER_SPIFFE_ID], Usage::Server)?;
        let client = ca.issue_with_uris(&[], &[CLIENT_SPIFFE_ID], Usage::Client)?;
        let io = |e: std::io::Error| TlsSetupError::Io(format!("{}: {e}", dir.display()));
        std::fs::create_dir_all(dir).map_err(io)?;
        std::fs::write(dir.join(Self::CA), &ca.cert_pem).map_err(io)?;
        std::fs::write(dir.join(Self::SERVER_CERT), &server.cert_pem).map_err(io)?;
        std::fs::write(dir.join(Self::SERVER_KEY), &server.key_pem).map_err(io)?;
        std::fs::write(dir.join(Self::CLIENT_CERT), &client.cert_pem).map_err(io)?;
        std::fs::write(dir.join(Self::CLIENT_KEY), &client.key_pem).map_err(io)?;
        Ok(())
    }

    /// The default directory: `$INTEROP_TLS_DIR`, or `target/interop-tls` in this workspace.
    pub fn default_dir() -> std::path::PathBuf {
        match std::env::var_os("INTEROP_TLS_DIR") {
            Some(dir) => dir.into(),
            None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/interop-tls"),
        }
    }

    /// Reads the server's certificate and key from files.
    pub fn read_identity(cert: &Path, key: &Path) -> Result<CertifiedPem, TlsSetupError> {
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|e| {
                TlsSetupError::Io(format!(
                    "cannot read {}: {e} (run `cargo xtask interop --tls`, or `interop-certs`, to make the test certificates)",
                    p.display()
                ))
            })
        };
        Ok(CertifiedPem {
            cert_pem: read(cert)?,
            key_pem: read(key)?,
        })
    }
}

/// One directory of PEM files as a bootstrap's `file_watcher` certificate provider (gRFC A29) reads them:
/// `cert.pem` (`certificate_file`, the chain), `key.pem` (`private_key_file`) and `ca.pem`
/// (`ca_certificate_file`). [`WatchedFiles::write_identity`] and [`WatchedFiles::write_ca`] replace a file
/// whole (a temporary file renamed over it), so a watcher never reads half of one: tests rotate the identity
/// that way while a client runs.
#[derive(Clone, Debug)]
pub struct WatchedFiles {
    dir: PathBuf,
}

impl WatchedFiles {
    /// The certificate chain's file name.
    pub const CERTIFICATE: &'static str = "cert.pem";
    /// The private key's file name.
    pub const PRIVATE_KEY: &'static str = "key.pem";
    /// The CA certificates' file name.
    pub const CA_CERTIFICATE: &'static str = "ca.pem";

    /// The files in `dir` (created if missing), none written yet.
    pub fn create(dir: &Path) -> Result<WatchedFiles, TlsSetupError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| TlsSetupError::Io(format!("{}: {e}", dir.display())))?;
        Ok(WatchedFiles {
            dir: dir.to_owned(),
        })
    }

    /// Writes the CA and, if given, the identity: a provider for roots and identity.
    pub fn write_all(
        dir: &Path,
        ca_pem: &str,
        identity: Option<&CertifiedPem>,
    ) -> Result<WatchedFiles, TlsSetupError> {
        let files = WatchedFiles::create(dir)?;
        files.write_ca(ca_pem)?;
        if let Some(identity) = identity {
            files.write_identity(identity)?;
        }
        Ok(files)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `certificate_file`.
    pub fn certificate_file(&self) -> PathBuf {
        self.dir.join(Self::CERTIFICATE)
    }

    /// `private_key_file`.
    pub fn private_key_file(&self) -> PathBuf {
        self.dir.join(Self::PRIVATE_KEY)
    }

    /// `ca_certificate_file`.
    pub fn ca_certificate_file(&self) -> PathBuf {
        self.dir.join(Self::CA_CERTIFICATE)
    }

    /// Replaces the identity: the key first, then the certificate (each file whole).
    pub fn write_identity(&self, identity: &CertifiedPem) -> Result<(), TlsSetupError> {
        write_whole(&self.private_key_file(), &identity.key_pem)?;
        write_whole(&self.certificate_file(), &identity.cert_pem)
    }

    /// Replaces the CA certificates.
    pub fn write_ca(&self, ca_pem: &str) -> Result<(), TlsSetupError> {
        write_whole(&self.ca_certificate_file(), ca_pem)
    }
}

/// Writes `text` to `path` through a temporary file beside it, renamed over it.
fn write_whole(path: &Path, text: &str) -> Result<(), TlsSetupError> {
    let io = |e: std::io::Error| TlsSetupError::Io(format!("{}: {e}", path.display()));
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, text).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// One subject alternative name of a certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CertSan {
    /// `dNSName`.
    Dns(String),
    /// `uniformResourceIdentifier` (SPIFFE IDs).
    Uri(String),
    /// `iPAddress`.
    Ip(IpAddr),
    /// `rfc822Name`.
    Email(String),
}

impl CertSan {
    /// The URI, if this is a URI SAN.
    pub fn uri(&self) -> Option<&str> {
        match self {
            CertSan::Uri(u) => Some(u),
            _ => None,
        }
    }
}

/// The subject alternative names of the DER certificate `der` (DNS, URI, IP and email; other kinds are
/// skipped); empty without the extension. A malformed certificate is an error, never a panic.
pub fn certificate_sans(der: &[u8]) -> Result<Vec<CertSan>, TlsSetupError> {
    use x509_parser::extensions::GeneralName as G;
    let bad = |what: String| TlsSetupError::Pem(format!("malformed certificate: {what}"));
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| bad(e.to_string()))?;
    let Some(ext) = cert
        .subject_alternative_name()
        .map_err(|e| bad(e.to_string()))?
    else {
        return Ok(Vec::new());
    };
    let mut sans = Vec::new();
    for name in &ext.value.general_names {
        match name {
            G::RFC822Name(s) => sans.push(CertSan::Email((*s).to_owned())),
            G::DNSName(s) => sans.push(CertSan::Dns((*s).to_owned())),
            G::URI(s) => sans.push(CertSan::Uri((*s).to_owned())),
            G::IPAddress(bytes) => {
                let ip = match bytes.len() {
                    4 => <[u8; 4]>::try_from(*bytes).map(IpAddr::from).ok(),
                    16 => <[u8; 16]>::try_from(*bytes).map(IpAddr::from).ok(),
                    _ => None,
                };
                sans.push(CertSan::Ip(
                    ip.ok_or_else(|| bad("IP address length".to_owned()))?,
                ));
            }
            _ => {}
        }
    }
    Ok(sans)
}

/// The SANs of the first certificate in `pem`.
pub fn pem_certificate_sans(pem: &str) -> Result<Vec<CertSan>, TlsSetupError> {
    let cert = CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .ok_or_else(|| TlsSetupError::Pem("no certificate".to_owned()))?
        .map_err(|e| TlsSetupError::Pem(e.to_string()))?;
    certificate_sans(&cert)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sans_of_an_issued_certificate_read_back() {
        let ca = TestCa::new("test CA").expect("CA");
        let cert = ca
            .issue_with_uris(
                &["server.test", "127.0.0.1", "::1"],
                &[SERVER_SPIFFE_ID],
                Usage::Both,
            )
            .expect("issue");
        assert_eq!(
            pem_certificate_sans(&cert.cert_pem).expect("parse"),
            vec![
                CertSan::Dns("server.test".to_owned()),
                CertSan::Ip("127.0.0.1".parse().expect("ip")),
                CertSan::Ip("::1".parse().expect("ip")),
                CertSan::Uri(SERVER_SPIFFE_ID.to_owned()),
            ]
        );
        let client = ca
            .issue_with_uris(&[], &[CLIENT_SPIFFE_ID], Usage::Client)
            .expect("issue");
        let sans = pem_certificate_sans(&client.cert_pem).expect("parse");
        assert_eq!(sans, vec![CertSan::Uri(CLIENT_SPIFFE_ID.to_owned())]);
        assert_eq!(sans[0].uri(), Some(CLIENT_SPIFFE_ID));
    }

    #[test]
    fn malformed_certificates_are_errors_not_panics() {
        let ca = TestCa::new("test CA").expect("CA");
        let cert = ca.issue(&["a.test"], Usage::Server).expect("issue");
        let der = CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes())
            .next()
            .expect("one")
            .expect("pem");
        for cut in 0..der.len() {
            let _ = certificate_sans(&der[..cut]);
        }
        assert!(certificate_sans(&[]).is_err());
        assert!(certificate_sans(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]).is_err());
    }

    #[test]
    fn watched_files_are_replaced_whole() {
        let dir = std::env::temp_dir().join(format!("interop-watched-{}", std::process::id()));
        let ca = TestCa::new("test CA").expect("CA");
        let a = ca
            .issue_with_uris(&[], &["spiffe://t/a"], Usage::Client)
            .expect("a");
        let b = ca
            .issue_with_uris(&[], &["spiffe://t/b"], Usage::Client)
            .expect("b");
        let files = WatchedFiles::write_all(&dir, &ca.cert_pem, Some(&a)).expect("write");
        let read = |p: PathBuf| std::fs::read_to_string(p).expect("read");
        assert_eq!(read(files.certificate_file()), a.cert_pem);
        assert_eq!(read(files.ca_certificate_file()), ca.cert_pem);
        files.write_identity(&b).expect("rotate");
        assert_eq!(read(files.certificate_file()), b.cert_pem);
        assert_eq!(read(files.private_key_file()), b.key_pem);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
