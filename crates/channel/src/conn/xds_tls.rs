//! TLS with xDS credentials (gRFC A29): a connector whose server-certificate check is the chain against
//! the cluster's roots with the host name check replaced by the cluster's SAN matchers
//! ([`grpc_xds::san_matches`] on the leaf's DNS, URI, email and IP SANs), and whose client identity (mTLS)
//! is given as parsed PEM. A certificate that fails the check fails the handshake: the connection's
//! status is UNAVAILABLE "TLS handshake failed: SANs from certificate did not match SANs from xDS control
//! plane (...)", and nothing falls back to plaintext.
//!
//! The chain check is rustls's own (`verify_server_cert_signed_by_trust_anchor`: signatures, validity
//! dates, serverAuth usage); the leaf's SANs are read with x509-parser. TLS 1.2 and 1.3, ALPN `h2`, ring.
//!
//! Not here: where the identity and roots come from (certificate providers, `xds/`), revocation (CRLs),
//! A101's `auto_sni_san_validation`.

use std::net::IpAddr;
use std::sync::Arc;

use grpc_xds::resource::{StringMatch, SubjectAltName};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, DigitallySignedStruct, OtherError, RootCertStore, SignatureScheme};

use super::tls::TlsConnector;
use crate::wire::status::Status;

/// The most SANs an error message names (the rest are counted: "and N more"). Every SAN is matched;
/// their number is bounded by the certificate's size, which rustls bounds.
const SANS_SHOWN: usize = 8;

/// The most characters of one SAN an error message shows.
const SAN_CHARS_SHOWN: usize = 128;

/// Why a server certificate failed the SAN check (the cause of its handshake failure).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SanCheckError {
    /// No SAN of the leaf matched a matcher.
    #[error(
        "SANs from certificate did not match SANs from xDS control plane (the certificate names {0})"
    )]
    Mismatch(String),
    /// The leaf could not be parsed.
    #[error("the server's certificate cannot be parsed for its SANs: {0}")]
    Unparsable(String),
}

/// A client identity for mTLS: a certificate chain (leaf first) and its private key.
pub(crate) struct ClientIdentity {
    /// The chain.
    pub(crate) chain: Vec<CertificateDer<'static>>,
    /// The key.
    pub(crate) key: PrivateKeyDer<'static>,
}

impl Clone for ClientIdentity {
    fn clone(&self) -> ClientIdentity {
        ClientIdentity {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("chain", &self.chain.len())
            .finish_non_exhaustive()
    }
}

/// The server-certificate check of A29: chain against `roots`, SANs against `matchers`.
#[derive(Debug)]
struct SanVerifier {
    roots: Arc<RootCertStore>,
    matchers: Vec<StringMatch>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for SanVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        if self.matchers.is_empty() {
            return Ok(ServerCertVerified::assertion());
        }
        let sans = leaf_sans(end_entity).map_err(|e| other(SanCheckError::Unparsable(e)))?;
        if grpc_xds::resource::san_matches(&self.matchers, &sans) {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(other(SanCheckError::Mismatch(describe_sans(&sans))))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn other(e: SanCheckError) -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(e))))
}

/// Every SAN of a certificate (DER) of the kinds A29 matches: DNS, URI, email and IP; other kinds are
/// skipped.
pub(crate) fn leaf_sans(der: &[u8]) -> Result<Vec<SubjectAltName>, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
    let ext = cert.subject_alternative_name().map_err(|e| e.to_string())?;
    let Some(ext) = ext else {
        return Ok(Vec::new());
    };
    use x509_parser::extensions::GeneralName as G;
    let sans = ext
        .value
        .general_names
        .iter()
        .filter_map(|name| match name {
            G::DNSName(s) => Some(SubjectAltName::Dns((*s).to_owned())),
            G::URI(s) => Some(SubjectAltName::Uri((*s).to_owned())),
            G::RFC822Name(s) => Some(SubjectAltName::Email((*s).to_owned())),
            G::IPAddress(bytes) => match bytes.len() {
                4 => <[u8; 4]>::try_from(*bytes).ok().map(IpAddr::from),
                16 => <[u8; 16]>::try_from(*bytes).ok().map(IpAddr::from),
                _ => None,
            }
            .map(SubjectAltName::Ip),
            _ => None,
        })
        .collect();
    Ok(sans)
}

/// The SANs for an error message: at most [`SANS_SHOWN`], each at most [`SAN_CHARS_SHOWN`]
/// characters, then how many more there are.
fn describe_sans(sans: &[SubjectAltName]) -> String {
    if sans.is_empty() {
        return "no SAN".to_owned();
    }
    let mut shown: Vec<String> = sans
        .iter()
        .take(SANS_SHOWN)
        .map(|s| {
            let text = match s {
                SubjectAltName::Dns(v) => format!("DNS:{v}"),
                SubjectAltName::Uri(v) => format!("URI:{v}"),
                SubjectAltName::Email(v) => format!("email:{v}"),
                SubjectAltName::Ip(ip) => format!("IP:{ip}"),
            };
            text.chars().take(SAN_CHARS_SHOWN).collect()
        })
        .collect();
    if sans.len() > SANS_SHOWN {
        shown.push(format!("and {} more", sans.len() - SANS_SHOWN));
    }
    shown.join(", ")
}

/// A connector for xDS credentials: `roots` verify the chain, `matchers` replace the name check,
/// `identity` is presented when the server asks (mTLS), `server_name` is the SNI (an IP address sends
/// none, as rustls never sends an IP as SNI).
pub(crate) fn xds_connector(
    roots: Arc<RootCertStore>,
    matchers: Vec<StringMatch>,
    identity: Option<ClientIdentity>,
    server_name: ServerName<'static>,
) -> Result<TlsConnector, Status> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(SanVerifier {
        roots,
        matchers,
        provider: provider.clone(),
    });
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Status::unavailable(format!("xDS credentials: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let has_identity = identity.is_some();
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some(id) => builder
            .with_client_auth_cert(id.chain, id.key)
            .map_err(|e| {
                Status::unavailable(format!(
                    "xDS credentials: the client certificate is unusable: {e}"
                ))
            })?,
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(TlsConnector::from_config(
        Arc::new(config),
        server_name,
        has_identity,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sans_are_described_briefly() {
        let many: Vec<SubjectAltName> = (0..10)
            .map(|i| SubjectAltName::Dns(format!("h{i}.example")))
            .collect();
        let text = describe_sans(&many);
        assert!(text.starts_with("DNS:h0.example, DNS:h1.example"), "{text}");
        assert!(text.ends_with("and 2 more"), "{text}");
        assert_eq!(describe_sans(&[]), "no SAN");
    }

    #[test]
    fn unparsable_certificates_are_errors_not_panics() {
        assert!(leaf_sans(b"not a certificate").is_err());
        assert!(leaf_sans(&[]).is_err());
    }

    /// gRFC A29: the check passes when at least one SAN of the leaf matches a matcher, however many
    /// SANs the leaf has (grpc-go's `MatchingSANExists` walks every SAN; C-core likewise). `leaf_sans`
    /// once dropped every SAN past the 1024th (`.take(1024)`), so a certificate the CA signed for the
    /// cluster's name was refused when that name came late in its SAN list.
    #[test]
    fn a_matching_san_after_many_others_passes_the_check() {
        use interop::tls::{TestCa, Usage};
        use rustls::pki_types::pem::PemObject;
        const MAX_SANS: usize = 1024;
        let ca = TestCa::new("many SANs CA").expect("test setup");
        let names: Vec<String> = (0..=MAX_SANS)
            .map(|i| format!("h{i}.example.com"))
            .collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let leaf = ca.issue(&refs, Usage::Server).expect("test setup");
        let leaf = CertificateDer::from_pem_slice(leaf.cert_pem.as_bytes()).expect("test setup");
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca.cert_pem.as_bytes()).expect("test setup"))
            .expect("test setup");
        let verifier = SanVerifier {
            roots: Arc::new(roots),
            matchers: vec![StringMatch::Exact {
                value: format!("h{MAX_SANS}.example.com"),
                ignore_case: false,
            }],
            provider: Arc::new(rustls::crypto::ring::default_provider()),
        };
        let name = ServerName::try_from("h0.example.com").expect("test setup");
        let verdict = verifier.verify_server_cert(&leaf, &[], &name, &[], UnixTime::now());
        assert!(verdict.is_ok(), "{verdict:?}");
        // Every SAN is read, and a mismatch message counts the ones it does not show.
        let sans = leaf_sans(&leaf).expect("parses");
        assert_eq!(sans.len(), MAX_SANS + 1);
        let text = describe_sans(&sans);
        assert!(
            text.ends_with(&format!("and {} more", MAX_SANS + 1 - SANS_SHOWN)),
            "{text}"
        );
        assert!(text.len() < 2048, "the message stays short: {}", text.len());
    }
}
