//! The code grpc-build generates for `proto/kitchen/sink/v1/sink.proto` (package `kitchen.sink.v1`, with a
//! service of every RPC kind) and the `kitchen.types` package it imports, in a module tree that mirrors the
//! packages. The tests in `tests/` call every method against a server.

/// The `kitchen` packages.
pub mod kitchen {
    /// The `kitchen.sink` packages.
    pub mod sink {
        /// The `kitchen.sink.v1` package: the `Sink` service and its messages.
        pub mod v1 {
            grpc_channel::include_proto!("kitchen.sink.v1");
        }
    }

    /// The `kitchen.types` package.
    pub mod types {
        grpc_channel::include_proto!("kitchen.types");
    }
}
