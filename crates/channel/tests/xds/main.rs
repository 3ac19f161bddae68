//! `xds:` targets against the test management server: end to end, ring_hash, cluster lifetimes, close,
//! xDS credentials (A29), the management servers (`unix:`, fallback), where these mesh features meet
//! (`xds_mesh`: transports, aggregates, outlier detection, priorities, close), and what the channel
//! shows of its xDS state.
//!
//! One test binary of grpc-channel's integration tests (rust-analyzer's `tests/slow-tests/main.rs` is the
//! model): each module was a test binary of its own, and its tests keep their names under the module's.

mod xds_bootstrap_server_uri;
mod xds_close;
mod xds_cluster_edges;
mod xds_cluster_lifetime;
mod xds_cluster_security;
mod xds_clusters;
mod xds_end_to_end;
mod xds_mesh;
mod xds_observability;
mod xds_readme;
mod xds_ring_hash;
mod xds_security;
mod xds_servers;
