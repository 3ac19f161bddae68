//! xDS for `xds:` targets (feature `xds`): the ADS stream to the management server ([`ads`]), shared per
//! server and node, and the resolver that turns the resources into clusters and routes ([`resolver`]). The sans-IO parts (bootstrap, request rules, the client's cache and timers, resource
//! validation) live in the `grpc-xds` crate.

pub(crate) mod ads;
pub(crate) mod resolver;

#[cfg(test)]
mod ads_tests;

#[cfg(test)]
mod resolver_tests;
