//! Sans-IO pieces of an xDS client for gRPC (gRFC A27 and its successors), for `grpc-channel`'s
//! `xds:///` targets:
//!
//! - the bootstrap ([`Bootstrap`], gRFC A27 with A47's authorities and A71's server list), read from
//!   `GRPC_XDS_BOOTSTRAP` (a file) or `GRPC_XDS_BOOTSTRAP_CONFIG` (the JSON) or given by the application,
//!   validated with errors that name the field;
//! - the request side of an ADS stream ([`AdsState`]: versions, nonces, ACK and NACK, subscriptions
//!   across stream restarts) and its `DiscoveryRequest` ([`discovery_request`], with the node);
//! - the client's state per management server ([`XdsClient`]: watches, the cache, A46's partial NACKs,
//!   deletions per A53 and A88, A57's does-not-exist timers, stream restarts with backoff);
//! - A71's choice among the bootstrap's servers ([`ServerChoice`]: fall back, stay on the cache, switch
//!   back);
//! - the resources, validated with NACK reasons that name the field and turned into typed values holding
//!   what the client acts on ([`resource`]: Listener and RouteConfiguration per A28, A31, A39, A41, A42,
//!   A44, A63; Cluster per A32, A37, A42, A48, A50; ClusterLoadAssignment with priorities, weighted
//!   localities, A61's additional addresses and drops);
//! - A28's virtual host choice ([`choose_virtual_host`]) and per-call routing in the chosen host
//!   ([`route_call`]: first matching route, weighted cluster choice, A31's deadline cap
//!   [`capped_deadline`]).
//!
//! The stream's I/O, the resolver and the channel's use of the cluster policies live in grpc-channel
//! (feature `xds`); the cluster policies themselves in grpc-lb.

// Unit tests read the clock: they stand in for grpc-channel (clippy.toml bans it in the library).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod ads;
mod bootstrap;
mod client;
mod fallback;
mod messages;
pub mod resource;
mod routing;
mod vhost;

pub use ads::{AdsState, Request, Verdict};
pub use client::{
    Rejection, ResourceDump, ResourceStatus, WatchEvent, WatchId, XdsClient, DOES_NOT_EXIST_TIMEOUT,
};
pub use fallback::{ServerChoice, ServerHealth, ServerListError, Switch, MAX_XDS_SERVERS};
pub use messages::{discovery_request, node_proto, UserAgent, CLIENT_FEATURES};
pub use resource::{
    Cluster, ClusterKind, ClusterLb, DecodeContext, Decoded, DropOverload, Endpoint,
    EndpointHealth, Endpoints, LoadReporting, LocalityEndpoints, LocalityId, Priority,
};
pub use routing::{
    call_header, capped_deadline, choose_cluster, request_hash, route_call, route_matches,
    HeaderView, RouteOutcome, Routed,
};
pub use vhost::{choose_virtual_host, validate_domain};

pub use bootstrap::{
    Authority, Bootstrap, BootstrapError, CertificateFiles, ChannelCreds, Locality, Node,
    ServerFeatures, XdsServer, BOOTSTRAP_CONFIG_VARIABLE, BOOTSTRAP_FILE_VARIABLE,
    DEFAULT_REFRESH_INTERVAL, FILE_WATCHER_PLUGIN, MAX_CERTIFICATE_PROVIDERS, MAX_REFRESH_INTERVAL,
    MIN_REFRESH_INTERVAL,
};
