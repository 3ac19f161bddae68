//! gRFC A29's xDS security, the client's half: a Cluster's `transport_socket`
//! (`envoy.transport_sockets.tls` with an `UpstreamTlsContext`) validated into a [`ClusterSecurity`] that
//! names the bootstrap's certificate provider instances for the client's identity and for the roots, the
//! `match_subject_alt_names` that replace the host name check, and the `sni`; and [`san_matches`], the
//! SAN check itself on the SANs of the server's leaf certificate.
//!
//! SKELETON: the parsing and matching are being written (issue 36).

use std::net::IpAddr;

use super::StringMatch;

/// A certificate provider instance named by a Cluster (`instance_name`, and the `certificate_name`
/// the `file_watcher` plugin ignores).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProviderInstance {
    /// The bootstrap's `certificate_providers` key.
    pub instance_name: String,
    /// `certificate_name` (ignored by `file_watcher`).
    pub certificate_name: String,
}

/// Where the roots that verify the server's certificate come from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RootSource {
    /// A bootstrap certificate provider instance's CA certificates.
    Provider(ProviderInstance),
    /// The platform's root store (`system_root_certs`, A82).
    System,
}

/// A Cluster's validated `UpstreamTlsContext`: how the channel secures its connections to the
/// cluster's endpoints when the application opted in to xDS credentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSecurity {
    /// The client's identity (mTLS), if the cluster asks the client to present one.
    pub identity: Option<ProviderInstance>,
    /// The roots.
    pub roots: RootSource,
    /// The server's leaf certificate must have a SAN matching one of these (empty: any certificate the
    /// roots verify).
    pub san_matchers: Vec<StringMatch>,
    /// The SNI to send, if the cluster gives one.
    pub sni: Option<String>,
}

/// A subject alternative name of a certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubjectAltName {
    /// A DNS name.
    Dns(String),
    /// A URI (a SPIFFE ID, for one).
    Uri(String),
    /// An e-mail address.
    Email(String),
    /// An IP address.
    Ip(IpAddr),
}

/// Whether a leaf certificate with these SANs passes `matchers` (A29): true when `matchers` is empty,
/// else when at least one SAN matches at least one matcher.
pub fn san_matches(matchers: &[StringMatch], sans: &[SubjectAltName]) -> bool {
    let _ = (matchers, sans);
    todo!("issue 36: SAN matching")
}
