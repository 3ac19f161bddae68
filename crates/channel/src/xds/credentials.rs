//! xDS credentials (gRFC A29) applied by the xDS resolver: with [`ChannelBuilder::xds_credentials`]
//! on, each Cluster with a `transport_socket` ([`ClusterSecurity`]) gets a [`TransportKey`] derived from
//! its security settings (clusters with equal settings share subchannels and connections; distinct
//! settings never do), and the channel's registry of transports (`control/transports.rs`) gets that
//! key's [`ClusterTransport`]: a TLS connector per connection from the bootstrap's `file_watcher`
//! providers' newest identity and roots (`cert_provider.rs`) with the SAN check (`conn/xds_tls.rs`). A
//! cluster without security gets no key: the channel's own transport, the fallback. Without
//! `xds_credentials`, `transport_socket` is ignored.
//!
//! SNI: `ClusterSecurity::sni` when the cluster gives one, else the endpoint's address, which rustls does
//! not send as SNI when it is an IP (the SAN check does not use the name either way). A secured cluster
//! whose provider has no usable certificate, or names an instance the bootstrap does not define, fails
//! its connections UNAVAILABLE naming why; it never connects in plaintext.
//!
//! The registry holds the keys of the clusters the resolver publishes, no more: [`XdsCredentials::sync`]
//! drops the others at each publication.
//!
//! Not here: the parsing and NACK rules of `transport_socket` (grpc-xds), A101's `auto_host_sni`.
//!
//! [`ChannelBuilder::xds_credentials`]: crate::ChannelBuilder::xds_credentials

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use grpc_lb::{Address, TransportKey};
use grpc_xds::resource::{ClusterSecurity, ProviderInstance, RootSource};
use grpc_xds::CertificateFiles;
use rustls::pki_types::ServerName;
use rustls::RootCertStore;

use super::cert_provider::CertificateProvider;
use crate::conn::tls::TlsConnector;
use crate::conn::xds_tls::{xds_connector, ClientIdentity};
use crate::control::transports::{TransportFactory, Transports};
use crate::wire::status::Status;

/// What a channel with xDS credentials gives its resolver: the bootstrap's provider instances and the
/// channel's registry of transports.
#[derive(Clone, Debug)]
pub(crate) struct XdsCredentials {
    providers: BTreeMap<String, CertificateFiles>,
    transports: Transports,
}

impl XdsCredentials {
    /// Credentials over the bootstrap's `certificate_providers`, registering into `transports`.
    pub(crate) fn new(
        providers: BTreeMap<String, CertificateFiles>,
        transports: Transports,
    ) -> XdsCredentials {
        XdsCredentials {
            providers,
            transports,
        }
    }

    /// The key of a cluster's security settings (equal settings, equal keys).
    pub(crate) fn key(security: &ClusterSecurity) -> TransportKey {
        TransportKey::new(format!("xds-tls:{security:?}"))
    }

    /// Registers the transport of every key in `used` (key → its settings) that has none, and drops
    /// the transports of keys no longer used.
    pub(crate) fn sync(&self, used: &BTreeMap<TransportKey, ClusterSecurity>) {
        for (key, security) in used {
            if !self.transports.contains(key) {
                let transport = ClusterTransport::new(security.clone(), &self.providers);
                self.transports
                    .insert_if_absent(key.clone(), || Arc::new(transport));
            }
        }
        let keep: BTreeSet<TransportKey> = used.keys().cloned().collect();
        self.transports.retain(&keep);
    }
}

/// A provider instance, or why the bootstrap has none by that name.
type Instance = Result<Arc<CertificateProvider>, String>;

fn instance(providers: &BTreeMap<String, CertificateFiles>, which: &ProviderInstance) -> Instance {
    match providers.get(&which.instance_name) {
        Some(files) => Ok(CertificateProvider::shared(&which.instance_name, files)),
        None => Err(format!(
            "the bootstrap defines no certificate provider instance {:?}",
            which.instance_name
        )),
    }
}

/// The transport of one cluster security setting: holds its providers while registered.
pub(crate) struct ClusterTransport {
    security: ClusterSecurity,
    identity: Option<Instance>,
    roots: Result<Roots, String>,
}

enum Roots {
    Provider(Arc<CertificateProvider>),
    System,
}

impl ClusterTransport {
    fn new(
        security: ClusterSecurity,
        providers: &BTreeMap<String, CertificateFiles>,
    ) -> ClusterTransport {
        let identity = security
            .identity
            .as_ref()
            .map(|which| instance(providers, which));
        let roots = match &security.roots {
            RootSource::Provider(which) => instance(providers, which).map(Roots::Provider),
            RootSource::System => Ok(Roots::System),
        };
        ClusterTransport {
            security,
            identity,
            roots,
        }
    }
}

impl TransportFactory for ClusterTransport {
    fn connector(&self, addr: &Address) -> Result<TlsConnector, Status> {
        let fail = |why: String| Status::unavailable(format!("xDS credentials: {why}"));
        let identity: Option<ClientIdentity> = match &self.identity {
            None => None,
            Some(Err(why)) => return Err(fail(why.clone())),
            Some(Ok(p)) => Some(p.identity().map_err(fail)?),
        };
        let roots = match &self.roots {
            Err(why) => return Err(fail(why.clone())),
            Ok(Roots::Provider(p)) => p.roots().map_err(fail)?,
            Ok(Roots::System) => system_roots().map_err(fail)?,
        };
        let name = match &self.security.sni {
            Some(sni) => ServerName::try_from(sni.clone()).map_err(|e| {
                fail(format!(
                    "the cluster's sni {sni:?} is not a server name: {e}"
                ))
            })?,
            None => address_name(addr),
        };
        xds_connector(roots, self.security.san_matchers.clone(), identity, name)
    }
}

/// The server name of an endpoint address without an SNI: its IP (sent as no SNI), or its host name.
fn address_name(addr: &Address) -> ServerName<'static> {
    match addr {
        Address::Tcp(sa) => ServerName::IpAddress(sa.ip().into()),
        Address::Name { host, .. } => ServerName::try_from(host.to_string())
            .unwrap_or_else(|_| ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into())),
        _ => ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()),
    }
}

/// The platform's roots (A82 `system_root_certs`), read once per process.
fn system_roots() -> Result<Arc<RootCertStore>, String> {
    static ROOTS: std::sync::OnceLock<Result<Arc<RootCertStore>, String>> =
        std::sync::OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            let mut store = RootCertStore::empty();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                Err("no usable root certificate in the platform's store".to_owned())
            } else {
                Ok(Arc::new(store))
            }
        })
        .clone()
}
