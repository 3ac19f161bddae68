//! Builders of xDS resources for tests (feature `xds-server`): the usual shapes a management server sends
//! a gRPC client, as `Any`s ready for [`crate::xds_server::ManagementServer::set`].
//!
//! For xDS security (gRFC A29): a Cluster's `transport_socket` `envoy.transport_sockets.tls` with an
//! `UpstreamTlsContext` naming certificate provider instances ([`UpstreamTlsSpec`], [`with_upstream_tls`]),
//! and a bootstrap JSON with `certificate_providers` of the `file_watcher` plugin ([`BootstrapSpec`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::cluster::ring_hash_lb_config::HashFunction;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, DiscoveryType, EdsClusterConfig, LbConfig, LbPolicy, RingHashLbConfig,
};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::address::Address as AddressKind;
use envoy_types::pb::envoy::config::core::v3::config_source::ConfigSourceSpecifier;
use envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier;
use envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType as SocketConfigType;
use envoy_types::pb::envoy::config::core::v3::{
    Address, AggregatedConfigSource, ConfigSource, Locality, SocketAddress, TransportSocket,
};
use envoy_types::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints,
};
use envoy_types::pb::envoy::config::listener::v3::{ApiListener, Listener};
use envoy_types::pb::envoy::config::route::v3::header_matcher::HeaderMatchSpecifier;
use envoy_types::pb::envoy::config::route::v3::route::Action;
use envoy_types::pb::envoy::config::route::v3::route_action::hash_policy::{
    Header as HashHeader, PolicySpecifier,
};
use envoy_types::pb::envoy::config::route::v3::route_action::{ClusterSpecifier, HashPolicy};
use envoy_types::pb::envoy::config::route::v3::route_match::PathSpecifier;
use envoy_types::pb::envoy::config::route::v3::weighted_cluster::ClusterWeight;
use envoy_types::pb::envoy::config::route::v3::{
    HeaderMatcher, RetryPolicy, Route, RouteAction, RouteConfiguration, RouteMatch, VirtualHost,
    WeightedCluster,
};
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::RouteSpecifier;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_filter::ConfigType, HttpConnectionManager, HttpFilter, Rds,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::common_tls_context::{
    CombinedCertificateValidationContext, ValidationContextType,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    CertificateProviderPluginInstance, CertificateValidationContext, CommonTlsContext,
    UpstreamTlsContext,
};
use envoy_types::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;
use envoy_types::pb::envoy::r#type::matcher::v3::StringMatcher;
use envoy_types::pb::google::protobuf::{Any, UInt32Value, UInt64Value};
use prost::{Message, Name};

/// The type URLs of the four resource types.
pub mod type_url {
    /// Listener.
    pub const LISTENER: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
    /// RouteConfiguration.
    pub const ROUTE: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
    /// Cluster.
    pub const CLUSTER: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
    /// ClusterLoadAssignment.
    pub const ENDPOINTS: &str =
        "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
}

/// `message` in an `Any` of `type_url`, named `name` for the server's snapshot.
pub fn named(name: &str, type_url: &str, message: &impl Message) -> (String, Any) {
    (
        name.to_owned(),
        Any {
            type_url: type_url.to_owned(),
            value: message.encode_to_vec(),
        },
    )
}

/// `ConfigSource { ads {} }`.
pub fn ads_source() -> ConfigSource {
    ConfigSource {
        config_source_specifier: Some(ConfigSourceSpecifier::Ads(AggregatedConfigSource {})),
        ..Default::default()
    }
}

/// An EDS cluster under round_robin, its endpoints named after the cluster.
pub fn eds_cluster(name: &str) -> Cluster {
    Cluster {
        name: name.to_owned(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
        eds_cluster_config: Some(EdsClusterConfig {
            eds_config: Some(ads_source()),
            service_name: String::new(),
        }),
        lb_policy: LbPolicy::RoundRobin as i32,
        ..Default::default()
    }
}

/// An EDS cluster under RING_HASH (gRFC A42, XX_HASH) with these ring sizes, its endpoints named after
/// the cluster.
pub fn ring_hash_cluster(name: &str, min_ring_size: u64, max_ring_size: u64) -> Cluster {
    Cluster {
        lb_policy: LbPolicy::RingHash as i32,
        lb_config: Some(LbConfig::RingHashLbConfig(RingHashLbConfig {
            minimum_ring_size: Some(UInt64Value {
                value: min_ring_size,
            }),
            maximum_ring_size: Some(UInt64Value {
                value: max_ring_size,
            }),
            hash_function: HashFunction::XxHash as i32,
        })),
        ..eds_cluster(name)
    }
}

/// An aggregate cluster (gRFC A37) of these clusters, best first (its `lb_policy` ROUND_ROBIN, the
/// default).
pub fn aggregate_cluster(name: &str, clusters: &[&str]) -> Cluster {
    use envoy_types::pb::envoy::config::cluster::v3::cluster::CustomClusterType;
    use envoy_types::pb::envoy::extensions::clusters::aggregate::v3::ClusterConfig;
    Cluster {
        name: name.to_owned(),
        cluster_discovery_type: Some(ClusterDiscoveryType::ClusterType(CustomClusterType {
            name: "envoy.clusters.aggregate".to_owned(),
            typed_config: Some(any(&ClusterConfig {
                clusters: clusters.iter().map(|c| (*c).to_owned()).collect(),
            })),
        })),
        ..Default::default()
    }
}

/// A LOGICAL_DNS cluster (gRFC A37) under round_robin for `host:port`.
pub fn logical_dns_cluster(name: &str, host: &str, port: u16) -> Cluster {
    let endpoint = LbEndpoint {
        host_identifier: Some(HostIdentifier::Endpoint(Endpoint {
            address: Some(Address {
                address: Some(AddressKind::SocketAddress(SocketAddress {
                    address: host.to_owned(),
                    port_specifier: Some(PortSpecifier::PortValue(u32::from(port))),
                    ..Default::default()
                })),
            }),
            ..Default::default()
        })),
        ..Default::default()
    };
    Cluster {
        name: name.to_owned(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::LogicalDns as i32)),
        load_assignment: Some(ClusterLoadAssignment {
            cluster_name: name.to_owned(),
            endpoints: vec![LocalityLbEndpoints {
                lb_endpoints: vec![endpoint],
                ..Default::default()
            }],
            ..Default::default()
        }),
        lb_policy: LbPolicy::RoundRobin as i32,
        ..Default::default()
    }
}

/// `cluster` with outlier detection by failure percentage (gRFC A50's xDS mapping): an endpoint failing
/// more than `threshold` % of at least `request_volume` calls in an `interval_ms` interval is ejected (for
/// 30 s at first), among at least `minimum_hosts` hosts, up to every host.
pub fn with_failure_percentage_ejection(
    mut cluster: Cluster,
    interval_ms: u32,
    threshold: u32,
    minimum_hosts: u32,
    request_volume: u32,
) -> Cluster {
    use envoy_types::pb::envoy::config::cluster::v3::OutlierDetection;
    use envoy_types::pb::google::protobuf::Duration;
    cluster.outlier_detection = Some(OutlierDetection {
        interval: Some(Duration {
            seconds: i64::from(interval_ms / 1000),
            nanos: ((interval_ms % 1000) * 1_000_000) as i32,
        }),
        max_ejection_percent: Some(UInt32Value { value: 100 }),
        enforcing_success_rate: Some(UInt32Value { value: 0 }),
        failure_percentage_threshold: Some(UInt32Value { value: threshold }),
        enforcing_failure_percentage: Some(UInt32Value { value: 100 }),
        failure_percentage_minimum_hosts: Some(UInt32Value {
            value: minimum_hosts,
        }),
        failure_percentage_request_volume: Some(UInt32Value {
            value: request_volume,
        }),
        ..Default::default()
    });
    cluster
}

/// One locality of an assignment: its zone, weight, priority and endpoints.
#[derive(Clone, Debug)]
pub struct LocalitySpec {
    /// The zone (region and sub-zone are fixed).
    pub zone: String,
    /// `load_balancing_weight`.
    pub weight: u32,
    /// `priority`.
    pub priority: u32,
    /// The endpoints.
    pub endpoints: Vec<SocketAddr>,
}

impl LocalitySpec {
    /// A locality of weight 1 at priority 0.
    pub fn new(zone: &str, endpoints: &[SocketAddr]) -> LocalitySpec {
        LocalitySpec {
            zone: zone.to_owned(),
            weight: 1,
            priority: 0,
            endpoints: endpoints.to_vec(),
        }
    }
}

/// A ClusterLoadAssignment for `cluster`.
pub fn assignment(cluster: &str, localities: &[LocalitySpec]) -> ClusterLoadAssignment {
    ClusterLoadAssignment {
        cluster_name: cluster.to_owned(),
        endpoints: localities
            .iter()
            .map(|l| LocalityLbEndpoints {
                locality: Some(Locality {
                    region: "test".to_owned(),
                    zone: l.zone.clone(),
                    sub_zone: String::new(),
                }),
                load_balancing_weight: Some(UInt32Value { value: l.weight }),
                priority: l.priority,
                lb_endpoints: l.endpoints.iter().map(|a| lb_endpoint(*a)).collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn lb_endpoint(addr: SocketAddr) -> LbEndpoint {
    LbEndpoint {
        host_identifier: Some(HostIdentifier::Endpoint(Endpoint {
            address: Some(Address {
                address: Some(AddressKind::SocketAddress(SocketAddress {
                    address: addr.ip().to_string(),
                    port_specifier: Some(PortSpecifier::PortValue(u32::from(addr.port()))),
                    ..Default::default()
                })),
            }),
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// `message` in an `Any` with its own type URL.
pub fn any<T: Message + Name>(message: &T) -> Any {
    Any {
        type_url: T::type_url(),
        value: message.encode_to_vec(),
    }
}

/// The router HTTP filter (`envoy.extensions.filters.http.router.v3.Router`), named `router`.
pub fn router_filter() -> HttpFilter {
    HttpFilter {
        name: "router".to_owned(),
        config_type: Some(ConfigType::TypedConfig(any(&Router::default()))),
        ..Default::default()
    }
}

/// A client-side Listener named `name` whose HttpConnectionManager takes its routes from RDS (over ADS),
/// as the RouteConfiguration `route_config_name`.
pub fn rds_listener(name: &str, route_config_name: &str) -> Listener {
    api_listener(
        name,
        RouteSpecifier::Rds(Rds {
            config_source: Some(ads_source()),
            route_config_name: route_config_name.to_owned(),
        }),
    )
}

/// A client-side Listener named `name` with `routes` inline in its HttpConnectionManager.
pub fn inline_listener(name: &str, routes: RouteConfiguration) -> Listener {
    api_listener(name, RouteSpecifier::RouteConfig(routes))
}

fn api_listener(name: &str, route_specifier: RouteSpecifier) -> Listener {
    let hcm = HttpConnectionManager {
        route_specifier: Some(route_specifier),
        http_filters: vec![router_filter()],
        ..Default::default()
    };
    Listener {
        name: name.to_owned(),
        api_listener: Some(ApiListener {
            api_listener: Some(any(&hcm)),
        }),
        ..Default::default()
    }
}

/// A Listener named `name` without an `api_listener` (a client NACKs it).
pub fn listener_without_api_listener(name: &str) -> Listener {
    Listener {
        name: name.to_owned(),
        ..Default::default()
    }
}

/// A RouteConfiguration named `name` with one virtual host of these `domains` and `routes`.
pub fn route_configuration(name: &str, domains: &[&str], routes: Vec<Route>) -> RouteConfiguration {
    RouteConfiguration {
        name: name.to_owned(),
        virtual_hosts: vec![VirtualHost {
            name: "vh".to_owned(),
            domains: domains.iter().map(|d| (*d).to_owned()).collect(),
            routes,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// What a route matches: a path prefix, a whole path, and headers that must all match.
#[derive(Clone, Debug, Default)]
pub struct RouteMatchSpec {
    /// `path` (the whole `/pkg.Service/Method`) if set, else `prefix`.
    pub path: Option<String>,
    /// `prefix` (`""` matches every path).
    pub prefix: String,
    /// `(name, value)` exact header matchers.
    pub headers: Vec<(String, String)>,
}

impl RouteMatchSpec {
    /// Every path.
    pub fn any() -> RouteMatchSpec {
        RouteMatchSpec::default()
    }

    /// This whole path.
    pub fn path(path: &str) -> RouteMatchSpec {
        RouteMatchSpec {
            path: Some(path.to_owned()),
            ..RouteMatchSpec::default()
        }
    }

    /// With an exact matcher of header `name` on `value`.
    pub fn header(mut self, name: &str, value: &str) -> RouteMatchSpec {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    fn to_proto(&self) -> RouteMatch {
        RouteMatch {
            path_specifier: Some(match &self.path {
                Some(p) => PathSpecifier::Path(p.clone()),
                None => PathSpecifier::Prefix(self.prefix.clone()),
            }),
            headers: self
                .headers
                .iter()
                .map(|(name, value)| HeaderMatcher {
                    name: name.clone(),
                    header_match_specifier: Some(HeaderMatchSpecifier::StringMatch(
                        StringMatcher {
                            match_pattern: Some(MatchPattern::Exact(value.clone())),
                            ignore_case: false,
                        },
                    )),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }
}

/// A route sending what `matcher` matches to `cluster`.
pub fn route_to_cluster(matcher: &RouteMatchSpec, cluster: &str) -> Route {
    route_with(
        matcher,
        RouteAction {
            cluster_specifier: Some(ClusterSpecifier::Cluster(cluster.to_owned())),
            ..Default::default()
        },
    )
}

/// A route sending what `matcher` matches to weighted `clusters` (name, weight).
pub fn route_to_weighted(matcher: &RouteMatchSpec, clusters: &[(&str, u32)]) -> Route {
    route_with(
        matcher,
        RouteAction {
            cluster_specifier: Some(ClusterSpecifier::WeightedClusters(WeightedCluster {
                clusters: clusters
                    .iter()
                    .map(|(name, weight)| ClusterWeight {
                        name: (*name).to_owned(),
                        weight: Some(UInt32Value { value: *weight }),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })),
            ..Default::default()
        },
    )
}

/// `route` (a route to a cluster) with a hash policy on header `name` added (A42: ring_hash clusters
/// hash the call by its value).
pub fn with_header_hash_policy(mut route: Route, name: &str) -> Route {
    if let Some(Action::Route(action)) = &mut route.action {
        action.hash_policy.push(HashPolicy {
            policy_specifier: Some(PolicySpecifier::Header(HashHeader {
                header_name: name.to_owned(),
                regex_rewrite: None,
            })),
            terminal: false,
        });
    }
    route
}

/// `route` (a route to a cluster) with this retry policy: `retry_on` (e.g. `"unavailable"`) and
/// `num_retries`, default back-off.
pub fn with_retry_policy(mut route: Route, retry_on: &str, num_retries: u32) -> Route {
    if let Some(Action::Route(action)) = &mut route.action {
        action.retry_policy = Some(RetryPolicy {
            retry_on: retry_on.to_owned(),
            num_retries: Some(UInt32Value { value: num_retries }),
            ..Default::default()
        });
    }
    route
}

/// The type URL of a filter config no gRPC client knows, for [`with_unknown_filter_override`].
pub const UNKNOWN_FILTER_TYPE: &str = "type.googleapis.com/test.xds.UnknownFilterConfig";

/// `route` with a `typed_per_filter_config` override, named `unknown`, of a filter type no client knows
/// ([`UNKNOWN_FILTER_TYPE`]) and not marked optional: a client must NACK the RouteConfiguration (A39).
pub fn with_unknown_filter_override(mut route: Route) -> Route {
    route.typed_per_filter_config.insert(
        "unknown".to_owned(),
        Any {
            type_url: UNKNOWN_FILTER_TYPE.to_owned(),
            value: Vec::new(),
        },
    );
    route
}

fn route_with(matcher: &RouteMatchSpec, action: RouteAction) -> Route {
    Route {
        r#match: Some(matcher.to_proto()),
        action: Some(Action::Route(action)),
        ..Default::default()
    }
}

/// The name of the TLS transport socket (`Cluster.transport_socket.name`).
pub const TLS_TRANSPORT_SOCKET: &str = "envoy.transport_sockets.tls";

/// Where an [`UpstreamTlsSpec`] puts its roots' provider instance and SAN matchers: the two forms A29 lists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RootsForm {
    /// `common_tls_context.validation_context`.
    #[default]
    ValidationContext,
    /// `common_tls_context.combined_validation_context.default_validation_context`.
    CombinedValidationContext,
}

/// What an `UpstreamTlsContext` says (gRFC A29): which bootstrap certificate provider instances give the
/// client's identity and the roots, how the server's SANs must match, and the SNI.
#[derive(Clone, Debug, Default)]
pub struct UpstreamTlsSpec {
    /// `tls_certificate_provider_instance.instance_name`: the client identity (mTLS); `None` for TLS only.
    pub identity_instance: Option<String>,
    /// `ca_certificate_provider_instance.instance_name`: the roots; `None` leaves the validation context
    /// out (a client NACKs that).
    pub roots_instance: Option<String>,
    /// Which field carries the validation context.
    pub roots_form: RootsForm,
    /// `match_subject_alt_names` (any of them must match one of the server certificate's SANs).
    pub match_subject_alt_names: Vec<StringMatcher>,
    /// `sni` (empty: none).
    pub sni: String,
}

impl UpstreamTlsSpec {
    /// mTLS: the identity from instance `identity`, the roots from instance `roots`, no SAN matcher.
    pub fn mtls(identity: &str, roots: &str) -> UpstreamTlsSpec {
        UpstreamTlsSpec {
            identity_instance: Some(identity.to_owned()),
            roots_instance: Some(roots.to_owned()),
            ..UpstreamTlsSpec::default()
        }
    }

    /// TLS without a client identity: the roots from instance `roots`.
    pub fn tls(roots: &str) -> UpstreamTlsSpec {
        UpstreamTlsSpec {
            roots_instance: Some(roots.to_owned()),
            ..UpstreamTlsSpec::default()
        }
    }

    /// With this SAN matcher added.
    pub fn san(mut self, matcher: StringMatcher) -> UpstreamTlsSpec {
        self.match_subject_alt_names.push(matcher);
        self
    }

    /// With the roots in `form`.
    pub fn roots_form(mut self, form: RootsForm) -> UpstreamTlsSpec {
        self.roots_form = form;
        self
    }

    /// The `UpstreamTlsContext`.
    pub fn to_proto(&self) -> UpstreamTlsContext {
        let instance = |name: &String| CertificateProviderPluginInstance {
            instance_name: name.clone(),
            certificate_name: String::new(),
        };
        #[allow(deprecated)] // `match_subject_alt_names` is what gRPC reads (A29).
        let validation = self
            .roots_instance
            .as_ref()
            .map(|roots| CertificateValidationContext {
                ca_certificate_provider_instance: Some(instance(roots)),
                match_subject_alt_names: self.match_subject_alt_names.clone(),
                ..Default::default()
            });
        let validation_context_type = validation.map(|v| match self.roots_form {
            RootsForm::ValidationContext => ValidationContextType::ValidationContext(v),
            RootsForm::CombinedValidationContext => {
                ValidationContextType::CombinedValidationContext(
                    CombinedCertificateValidationContext {
                        default_validation_context: Some(v),
                        ..Default::default()
                    },
                )
            }
        });
        UpstreamTlsContext {
            common_tls_context: Some(CommonTlsContext {
                tls_certificate_provider_instance: self.identity_instance.as_ref().map(instance),
                validation_context_type,
                ..Default::default()
            }),
            sni: self.sni.clone(),
            ..Default::default()
        }
    }
}

/// A `StringMatcher` `exact` on `value`.
pub fn exact_matcher(value: &str) -> StringMatcher {
    StringMatcher {
        match_pattern: Some(MatchPattern::Exact(value.to_owned())),
        ignore_case: false,
    }
}

/// A `StringMatcher` `prefix` on `value`.
pub fn prefix_matcher(value: &str) -> StringMatcher {
    StringMatcher {
        match_pattern: Some(MatchPattern::Prefix(value.to_owned())),
        ignore_case: false,
    }
}

/// `context` as a Cluster's `transport_socket` ([`TLS_TRANSPORT_SOCKET`], its `typed_config` the
/// `UpstreamTlsContext`).
pub fn tls_transport_socket(context: &UpstreamTlsContext) -> TransportSocket {
    TransportSocket {
        name: TLS_TRANSPORT_SOCKET.to_owned(),
        config_type: Some(SocketConfigType::TypedConfig(any(context))),
    }
}

/// `cluster` with the `transport_socket` `spec` describes.
pub fn with_upstream_tls(mut cluster: Cluster, spec: &UpstreamTlsSpec) -> Cluster {
    cluster.transport_socket = Some(tls_transport_socket(&spec.to_proto()));
    cluster
}

/// One `file_watcher` certificate provider of a bootstrap (gRFC A29): the PEM files it watches and how often
/// it re-reads them.
#[derive(Clone, Debug, Default)]
pub struct FileWatcherProvider {
    /// `certificate_file`.
    pub certificate_file: Option<PathBuf>,
    /// `private_key_file`.
    pub private_key_file: Option<PathBuf>,
    /// `ca_certificate_file`.
    pub ca_certificate_file: Option<PathBuf>,
    /// `refresh_interval` (left out: the client's default, 600 s).
    pub refresh_interval: Option<Duration>,
}

impl FileWatcherProvider {
    /// Identity and roots from the files of `files`.
    pub fn all(files: &crate::tls::WatchedFiles) -> FileWatcherProvider {
        FileWatcherProvider {
            certificate_file: Some(files.certificate_file()),
            private_key_file: Some(files.private_key_file()),
            ca_certificate_file: Some(files.ca_certificate_file()),
            refresh_interval: None,
        }
    }

    /// Only the roots (`ca_certificate_file`) of `files`.
    pub fn roots(files: &crate::tls::WatchedFiles) -> FileWatcherProvider {
        FileWatcherProvider {
            ca_certificate_file: Some(files.ca_certificate_file()),
            ..FileWatcherProvider::default()
        }
    }

    /// With this `refresh_interval`.
    pub fn refresh_every(mut self, interval: Duration) -> FileWatcherProvider {
        self.refresh_interval = Some(interval);
        self
    }

    fn to_json(&self) -> String {
        let mut fields = Vec::new();
        let mut path = |key: &str, p: &Option<PathBuf>| {
            if let Some(p) = p {
                fields.push(format!(
                    "{}:{}",
                    json_string(key),
                    json_string(&p.to_string_lossy())
                ));
            }
        };
        path("certificate_file", &self.certificate_file);
        path("private_key_file", &self.private_key_file);
        path("ca_certificate_file", &self.ca_certificate_file);
        if let Some(interval) = self.refresh_interval {
            fields.push(format!(
                r#""refresh_interval":{}"#,
                json_string(&duration_text(interval))
            ));
        }
        format!(
            r#"{{"plugin_name":"file_watcher","config":{{{}}}}}"#,
            fields.join(",")
        )
    }
}

/// A bootstrap (gRFC A27) naming one management server, with `certificate_providers` (A29).
#[derive(Clone, Debug)]
pub struct BootstrapSpec {
    /// The management server's `server_uri`.
    pub server_uri: String,
    /// `channel_creds` of the server, as raw JSON (`[{"type":"insecure"}]` by default).
    pub channel_creds_json: String,
    /// `node.id`.
    pub node_id: String,
    /// `certificate_providers`, by instance name, in order.
    pub certificate_providers: Vec<(String, FileWatcherProvider)>,
}

impl BootstrapSpec {
    /// A bootstrap naming the server at `server_uri` with insecure credentials, node id `test-node`, no
    /// certificate providers.
    pub fn new(server_uri: &str) -> BootstrapSpec {
        BootstrapSpec {
            server_uri: server_uri.to_owned(),
            channel_creds_json: r#"[{"type":"insecure"}]"#.to_owned(),
            node_id: "test-node".to_owned(),
            certificate_providers: Vec::new(),
        }
    }

    /// With the certificate provider instance `name`.
    pub fn provider(mut self, name: &str, provider: FileWatcherProvider) -> BootstrapSpec {
        self.certificate_providers.push((name.to_owned(), provider));
        self
    }

    /// The JSON text.
    pub fn to_json(&self) -> String {
        let providers = self
            .certificate_providers
            .iter()
            .map(|(name, p)| format!("{}:{}", json_string(name), p.to_json()))
            .collect::<Vec<_>>()
            .join(",");
        format!(
            r#"{{"xds_servers":[{{"server_uri":{},"channel_creds":{},"server_features":["xds_v3"]}}],"node":{{"id":{},"locality":{{"zone":"z1"}}}},"certificate_providers":{{{providers}}}}}"#,
            json_string(&self.server_uri),
            self.channel_creds_json,
            json_string(&self.node_id),
        )
    }

    /// Writes the JSON to `path` (through a temporary file renamed over it).
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        std::fs::write(&tmp, self.to_json())?;
        std::fs::rename(&tmp, path)
    }
}

/// A protobuf JSON Duration: whole seconds as `"Ns"`, else with nine decimals.
fn duration_text(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}.{:09}s", d.as_secs(), d.subsec_nanos())
    }
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// An EDS cluster (as [`eds_cluster`]) whose `transport_socket` is `envoy.transport_sockets.tls` with an
/// `UpstreamTlsContext` (gRFC A29): the client's identity from the bootstrap's certificate provider
/// instance `identity_instance` (none: no client certificate), the roots from `roots_instance`
/// (`validation_context.ca_certificate_provider_instance`), and `match_subject_alt_names` of one
/// `exact` matcher per entry of `sans`.
pub fn tls_cluster(
    name: &str,
    identity_instance: Option<&str>,
    roots_instance: &str,
    sans: &[&str],
) -> Cluster {
    use envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType as SocketConfig;
    use envoy_types::pb::envoy::config::core::v3::TransportSocket;
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::common_tls_context::ValidationContextType;
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
        CertificateProviderPluginInstance, CertificateValidationContext, CommonTlsContext,
        UpstreamTlsContext,
    };
    let instance = |name: &str| CertificateProviderPluginInstance {
        instance_name: name.to_owned(),
        certificate_name: String::new(),
    };
    #[allow(deprecated)] // gRPC's A29 reads `match_subject_alt_names`.
    let validation = CertificateValidationContext {
        ca_certificate_provider_instance: Some(instance(roots_instance)),
        match_subject_alt_names: sans
            .iter()
            .map(|s| StringMatcher {
                match_pattern: Some(MatchPattern::Exact((*s).to_owned())),
                ignore_case: false,
            })
            .collect(),
        ..Default::default()
    };
    let context = UpstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_certificate_provider_instance: identity_instance.map(instance),
            validation_context_type: Some(ValidationContextType::ValidationContext(validation)),
            ..Default::default()
        }),
        ..Default::default()
    };
    Cluster {
        transport_socket: Some(TransportSocket {
            name: "envoy.transport_sockets.tls".to_owned(),
            config_type: Some(SocketConfig::TypedConfig(any(&context))),
        }),
        ..eds_cluster(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_tls_context_names_its_instances_in_both_forms() {
        let spec = UpstreamTlsSpec::mtls("id", "roots").san(exact_matcher("spiffe://t/s"));
        let cluster = with_upstream_tls(eds_cluster("c"), &spec);
        let socket = cluster.transport_socket.expect("socket");
        assert_eq!(socket.name, TLS_TRANSPORT_SOCKET);
        let Some(SocketConfigType::TypedConfig(any)) = socket.config_type else {
            panic!("typed config");
        };
        assert_eq!(
            any.type_url,
            "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
        );
        let context = UpstreamTlsContext::decode(any.value.as_slice()).expect("decode");
        let common = context.common_tls_context.expect("common");
        assert_eq!(
            common
                .tls_certificate_provider_instance
                .expect("identity")
                .instance_name,
            "id"
        );
        let Some(ValidationContextType::ValidationContext(v)) = common.validation_context_type
        else {
            panic!("validation_context");
        };
        assert_eq!(
            v.ca_certificate_provider_instance
                .expect("roots")
                .instance_name,
            "roots"
        );
        #[allow(deprecated)]
        let sans = v.match_subject_alt_names;
        assert_eq!(sans, vec![exact_matcher("spiffe://t/s")]);
        let combined = UpstreamTlsSpec::tls("roots")
            .roots_form(RootsForm::CombinedValidationContext)
            .to_proto();
        let common = combined.common_tls_context.expect("common");
        assert!(common.tls_certificate_provider_instance.is_none());
        assert!(matches!(
            common.validation_context_type,
            Some(ValidationContextType::CombinedValidationContext(c))
                if c.default_validation_context.is_some()
        ));
    }

    #[test]
    fn a_bootstrap_lists_its_file_watcher_providers() {
        let provider = FileWatcherProvider {
            certificate_file: Some("/d/cert.pem".into()),
            private_key_file: Some("/d/key.pem".into()),
            ca_certificate_file: Some("/d/\"ca\".pem".into()),
            refresh_interval: None,
        }
        .refresh_every(Duration::from_millis(1500));
        let json = BootstrapSpec::new("127.0.0.1:5")
            .provider("mesh", provider)
            .provider(
                "roots",
                FileWatcherProvider::default().refresh_every(Duration::from_secs(2)),
            )
            .to_json();
        assert_eq!(
            json,
            r#"{"xds_servers":[{"server_uri":"127.0.0.1:5","channel_creds":[{"type":"insecure"}],"server_features":["xds_v3"]}],"node":{"id":"test-node","locality":{"zone":"z1"}},"certificate_providers":{"mesh":{"plugin_name":"file_watcher","config":{"certificate_file":"/d/cert.pem","private_key_file":"/d/key.pem","ca_certificate_file":"/d/\"ca\".pem","refresh_interval":"1.500000000s"}},"roots":{"plugin_name":"file_watcher","config":{"refresh_interval":"2s"}}}}"#
        );
        assert_eq!(json_string("a\nb\\"), r#""a\u000ab\\""#);
    }
}
