//! An etcd naming resolver for `grpc-channel`: targets `etcd://HOST:PORT/NAME` follow the endpoints
//! registered in etcd under `NAME/`, in the format the etcd project's `endpoints.Manager` writes
//! (`{"Addr":"10.0.0.1:50051","Metadata":...}`) and etcd 3.4's `clientv3/naming` form with `"Op"`.
//!
//! ```no_run
//! use grpc_channel::Channel;
//! use grpc_etcd_resolver::EtcdResolverBuilder;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! grpc_channel::resolver::register(EtcdResolverBuilder::new()).expect("etcd is a URI scheme");
//! let channel = Channel::new("etcd://127.0.0.1:2379/my-service")?;
//! # Ok(()) }
//! ```
//!
//! What it does, beyond etcd's own grpc-go resolver:
//! - it watches `NAME/` as the prefix, never `NAME` alone (so `svc-a-old/...` does not leak into `svc-a`);
//! - a read, then a watch from the read's revision + 1: nothing is missed; events change the list as they
//!   come, in key order (stable across updates, which matters to `pick_first`);
//! - a value that is not such JSON is ignored and logged (`tracing`), never fatal; `Metadata` may be any
//!   JSON and rides with the endpoint as the [`METADATA_ATTRIBUTE`] attribute (JSON text);
//! - while etcd is unreachable the channel keeps its last endpoints and calls go on; the watch reconnects
//!   with backoff and resynchronises with a full read, also after a compaction of its revision;
//! - the table is bounded: [`MAX_ENDPOINTS`] endpoints (keys whose values are not endpoints take no
//!   place), [`MAX_VALUE_BYTES`] per value, [`MAX_KEY_BYTES`] per key; a full read asks for pages of at most
//!   8 MiB (fewer keys while a page is larger; a single larger value is skipped) and reads at most
//!   64 × [`MAX_ENDPOINTS`] keys.
//!
//! **Deleting the last key does not stop the traffic.** An empty prefix is reported to the channel as a
//! resolution error rather than published as an empty list (gRPC's rule: no addresses is an error; grpc-go's
//! and grpc-java's balancers likewise keep their endpoints on a resolver's empty list). Before any endpoint
//! is known calls fail UNAVAILABLE; after, the channel keeps the last endpoints and calls go on to them,
//! until a key is registered again (then followed as usual). To move traffic off a backend, register its
//! replacement first, or stop the backend.
//!
//! Over TLS with several etcd members ([`EtcdResolverBuilder::with_endpoints`]) the resolver opens a channel
//! to each member, so that each is verified by its own host name (grpc-channel has no per-address server
//! name); it uses one member at a time and fails over to the next.
//!
//! **Why through grpc-channel rather than the `etcd-client` crate.** etcd speaks gRPC, so this crate calls
//! `etcdserverpb.KV/Range` and `etcdserverpb.Watch/Watch` through a `grpc-channel` `Channel` of its own,
//! with hand-written prost messages of the few fields it needs (`proto.rs`). That keeps one gRPC stack in
//! an application's dependency tree (`etcd-client` brings tonic, its own hyper and tower stack), gives the
//! etcd connection this channel's keepalive, reconnect backoff and TLS, and exercises the channel itself against a real gRPC server. It uses grpc-channel's public
//! resolver API only ([`grpc_channel::resolver`]), like any user's resolver would.
//!
//! The crate's files: `value.rs` (one value's JSON), `table.rs` (the sans-IO key → endpoint table),
//! `backoff.rs` (reconnect delays), `proto.rs` (the etcd messages), `resolver.rs` (the builder and the
//! task that reads and watches etcd).
//!
//! Not here: registering endpoints in etcd (a server does that with etcd's own client, e.g. `endpoints.
//! Manager` in Go, or any `Put` of the JSON above, best with a lease), etcd authentication by user name and
//! password, service configs from etcd.

mod backoff;
mod proto;
mod resolver;
mod table;
mod value;

pub use resolver::{EtcdResolverBuilder, KEY_ATTRIBUTE, METADATA_ATTRIBUTE};
pub use table::{MAX_ENDPOINTS, MAX_KEY_BYTES, MAX_VALUE_BYTES};
