//! The control plane: service config through DNS, load balancing (built-in policies and the application's
//! own), client-side health checking (gRFC A17), outlier detection, the public resolver API (custom and
//! pushed endpoints) and DNS refresh.
//!
//! One test binary of grpc-channel's integration tests (rust-analyzer's `tests/slow-tests/main.rs` is the
//! model): each module was a test binary of its own, and its tests keep their names under the module's.

mod address_stats;
mod custom_policy;
mod custom_resolvers;
mod dns_refresh;
mod health_checking;
mod health_edges;
mod lb_api_edges;
mod load_balancing;
mod outlier_detection;
mod plugins;
mod resolver_edges;
mod service_config_dns;
