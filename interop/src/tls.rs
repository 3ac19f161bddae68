//! TLS for the interop server and for tests: a throwaway certificate authority (rcgen) that issues server
//! and client certificates, and rustls server configurations (ring provider).
//!
//! Nothing here is committed key material: [`TestCa::new`] makes a fresh key pair every time, and
//! `interop-certs` writes the interop suite's CA and server certificate under `target/` at set-up. The
//! server certificate for the interop suite names `*.test.google.fr`, `localhost` and `127.0.0.1`, so that
//! clients can use the standard `--server_host_override=foo.test.google.fr`.

use std::path::Path;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;

/// The names of the interop suite's server certificate.
pub const INTEROP_SERVER_NAMES: &[&str] = &["*.test.google.fr", "localhost", "127.0.0.1", "::1"];

/// The host name interop clients verify with `--server_host_override`.
pub const INTEROP_HOST_OVERRIDE: &str = "foo.test.google.fr";

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

    /// Like [`TestCa::issue`], with URI SANs (SPIFFE IDs such as `spiffe://mesh.test/ns/a/sa/b`) after
    /// the DNS names and IP addresses of `names`.
    pub fn issue_with_uris(
        &self,
        names: &[&str],
        uris: &[&str],
        usage: Usage,
    ) -> Result<CertifiedPem, TlsSetupError> {
        let uris = uris
            .iter()
            .map(|u| Ok(rcgen::SanType::URI((*u).try_into()?)))
            .collect::<Result<Vec<_>, rcgen::Error>>()?;
        self.issue_with(names, usage, |p| p.subject_alt_names.extend(uris))
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
        params.extended_key_usages = vec![match usage {
            Usage::Server => ExtendedKeyUsagePurpose::ServerAuth,
            Usage::Client => ExtendedKeyUsagePurpose::ClientAuth,
        }];
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

/// The interop suite's files, as `interop-certs` writes them into one directory.
pub struct InteropFiles;

impl InteropFiles {
    /// The CA certificate clients trust (`--ca_file`, or `--use_test_ca`).
    pub const CA: &'static str = "ca.pem";
    /// The server's certificate.
    pub const SERVER_CERT: &'static str = "server.pem";
    /// The server's private key.
    pub const SERVER_KEY: &'static str = "server.key";

    /// Makes a fresh CA and interop server certificate and writes them into `dir`.
    pub fn generate(dir: &Path) -> Result<(), TlsSetupError> {
        let ca = TestCa::new("grpc-channel interop test CA")?;
        let server = ca.issue(INTEROP_SERVER_NAMES, Usage::Server)?;
        let io = |e: std::io::Error| TlsSetupError::Io(format!("{}: {e}", dir.display()));
        std::fs::create_dir_all(dir).map_err(io)?;
        std::fs::write(dir.join(Self::CA), &ca.cert_pem).map_err(io)?;
        std::fs::write(dir.join(Self::SERVER_CERT), &server.cert_pem).map_err(io)?;
        std::fs::write(dir.join(Self::SERVER_KEY), &server.key_pem).map_err(io)?;
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
