//! xDS for `xds:` targets (feature `xds`): the ADS stream to the management server ([`ads`]), shared per
//! server and node. The sans-IO parts (bootstrap, request rules, the client's cache and timers, resource
//! validation) live in the `grpc-xds` crate.

// Used by the tests only until the `xds:` resolver lands.
#[allow(dead_code)]
pub(crate) mod ads;

#[cfg(test)]
mod ads_tests;
