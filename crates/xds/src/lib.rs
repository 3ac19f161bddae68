//! Sans-IO pieces of an xDS client for gRPC (gRFC A27 and its successors), for `grpc-channel`'s
//! `xds:///` targets. So far:
//!
//! - the bootstrap ([`Bootstrap`], gRFC A27 with A47's authorities and A71's server list), read from
//!   `GRPC_XDS_BOOTSTRAP` (a file) or `GRPC_XDS_BOOTSTRAP_CONFIG` (the JSON) or given by the application,
//!   validated with errors that name the field;
//! - the request side of an ADS stream ([`AdsState`]: versions, nonces, ACK and NACK, subscriptions
//!   across stream restarts);
//! - the Listener and RouteConfiguration resources ([`resource::parse_listener`],
//!   [`resource::parse_route_config`]): validated, with NACK reasons that name the field, and turned into
//!   typed values holding what the client acts on (A28, A31, A39, A41, A42, A44, A63);
//! - A28's virtual host choice ([`choose_virtual_host`]) and per-call routing in the chosen host
//!   ([`route_call`]: first matching route, weighted cluster choice, A31's deadline cap
//!   [`capped_deadline`]).
//!
//! Not yet: the ADS stream's I/O and its messages, the Cluster and ClusterLoadAssignment resources, the
//! cache and does-not-exist timers, the config selector's life cycle and request hashes, and the cluster
//! policies; the channel does not accept `xds:` targets yet.

mod ads;
mod bootstrap;
pub mod resource;
mod routing;
mod vhost;

pub use ads::{AdsState, Request, Verdict};
pub use routing::{
    call_header, capped_deadline, choose_cluster, route_call, route_matches, HeaderView,
    RouteOutcome, Routed,
};
pub use vhost::{choose_virtual_host, validate_domain};

pub use bootstrap::{
    Authority, Bootstrap, BootstrapError, ChannelCreds, Locality, Node, ServerFeatures, XdsServer,
    BOOTSTRAP_CONFIG_VARIABLE, BOOTSTRAP_FILE_VARIABLE,
};
