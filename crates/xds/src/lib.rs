//! Sans-IO pieces of an xDS client for gRPC (gRFC A27 and its successors), for `grpc-channel`'s
//! `xds:///` targets. So far: the bootstrap ([`Bootstrap`], gRFC A27 with A47's authorities and A71's
//! server list), read from `GRPC_XDS_BOOTSTRAP` (a file) or `GRPC_XDS_BOOTSTRAP_CONFIG` (the JSON) or given
//! by the application, validated with errors that name the field; and the request side of an ADS stream
//! ([`AdsState`]: versions, nonces, ACK and NACK, subscriptions across stream restarts); A28's virtual
//! host choice ([`choose_virtual_host`]); and, in [`resource`], the CDS and EDS resources decoded and
//! validated ([`Cluster`] with A32's circuit breaker, A37's aggregate clusters, A42's ring hash,
//! A48's least request and A50's outlier detection as a `grpc_lb::OutlierDetectionConfig`;
//! [`Endpoints`] with priorities, weighted localities, A61's additional addresses and drops).
//!
//! The client's state per management server is [`XdsClient`]: watches, the cache, A46's partial NACKs,
//! deletions (A53, A88), A57's does-not-exist timers and stream restarts with backoff.
//!
//! Not yet: LDS and RDS parsing, routing; the stream's I/O lives in grpc-channel.

mod ads;
mod bootstrap;
mod client;
mod messages;
pub mod resource;
mod vhost;

pub use ads::{AdsState, Request, Verdict};
pub use client::{Decoded, ResourceStatus, WatchEvent, WatchId, XdsClient, DOES_NOT_EXIST_TIMEOUT};
pub use messages::{discovery_request, node_proto, UserAgent, CLIENT_FEATURES};
pub use resource::{
    Cluster, ClusterKind, ClusterLb, DropOverload, Endpoint, EndpointHealth, Endpoints,
    LoadReporting, LocalityEndpoints, LocalityId, Priority,
};
pub use vhost::{choose_virtual_host, validate_domain};

pub use bootstrap::{
    Authority, Bootstrap, BootstrapError, ChannelCreds, Locality, Node, ServerFeatures, XdsServer,
    BOOTSTRAP_CONFIG_VARIABLE, BOOTSTRAP_FILE_VARIABLE,
};
