//! xDS for `xds:` targets (feature `xds`): the ADS streams to the management servers ([`ads`], with A71's
//! fallback among them and A65's TLS), shared per server list and node, the resolver that turns the
//! resources into clusters and routes ([`resolver`]; with `cluster_config.rs`, the cluster manager's view of
//! each cluster, `aggregate.rs`, A37's aggregate graph walk, and `logical_dns.rs`, LOGICAL_DNS names
//! resolved by the channel's DNS resolver), and
//! the admin view of the client's resources ([`admin`], `Channel::xds_resources`). The sans-IO parts
//! (bootstrap, request rules, the client's cache and timers, resource validation) live in the `grpc-xds`
//! crate.
//!
//! In the API layer, beside the crate root rather than under `control/`: the ADS stream runs on this crate's
//! own [`Channel`](crate::Channel) (and its `RequestSender` and `Streaming`), and `builder.rs` gives the
//! channel its resolver, a `ResolverBuilder` of the public resolver API (`control/resolver_api.rs`) whose
//! routing goes through the sink's crate-private `publish_state`.

pub(crate) mod admin;
pub(crate) mod ads;
mod ads_state;
mod ads_stream;
mod ads_task;
mod aggregate;
pub(crate) mod cert_provider;
mod cluster_config;
pub(crate) mod credentials;
mod logical_dns;
pub(crate) mod resolver;
pub(crate) mod setup;

#[cfg(test)]
mod ads_servers_tests;
#[cfg(test)]
mod ads_tests;
#[cfg(test)]
mod credentials_tests;
#[cfg(test)]
mod temp_dir;

#[cfg(test)]
mod resolver_tests;
