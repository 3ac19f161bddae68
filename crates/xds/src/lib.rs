//! Sans-IO pieces of an xDS client for gRPC (gRFC A27 and its successors), for `grpc-channel`'s
//! `xds:///` targets. So far: the bootstrap ([`Bootstrap`], gRFC A27 with A47's authorities and A71's
//! server list), read from `GRPC_XDS_BOOTSTRAP` (a file) or `GRPC_XDS_BOOTSTRAP_CONFIG` (the JSON) or given
//! by the application, validated with errors that name the field.
//!
//! Not yet: the ADS client, resource parsing (LDS, RDS, CDS, EDS), routing and the cluster policies; the
//! channel does not accept `xds:` targets yet.

mod bootstrap;

pub use bootstrap::{
    Authority, Bootstrap, BootstrapError, ChannelCreds, Locality, Node, ServerFeatures, XdsServer,
    BOOTSTRAP_CONFIG_VARIABLE, BOOTSTRAP_FILE_VARIABLE,
};
