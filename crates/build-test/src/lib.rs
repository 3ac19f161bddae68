//! The code grpc-build generates for `proto/kitchen/sink/v1/sink.proto` (package `kitchen.sink.v1`, with a
//! service of every RPC kind) and the `kitchen.types` package it imports, in a module tree that mirrors the
//! packages. The tests in `tests/` call every method against a server.
//!
//! [`split`] holds the same packages generated apart: messages without clients, and clients without
//! messages (`build_messages(false)`) included beside them with `grpc_channel::include_clients!`.

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

/// The same packages generated in two passes, as when the messages come from another generator: grpc-build
/// with `build_client(false)` wrote the messages (`$OUT_DIR/split/<package>.rs`), and with
/// `build_messages(false)` the clients (`$OUT_DIR/<package>.grpc-client.rs`).
pub mod split {
    /// The `kitchen` packages.
    pub mod kitchen {
        /// The `kitchen.sink` packages.
        pub mod sink {
            /// The `kitchen.sink.v1` package: its messages, and the `Sink` client over them.
            pub mod v1 {
                include!(concat!(env!("OUT_DIR"), "/split/kitchen.sink.v1.rs"));
                grpc_channel::include_clients!("kitchen.sink.v1");
            }
        }

        /// The `kitchen.types` package (messages only: it has no service).
        pub mod types {
            include!(concat!(env!("OUT_DIR"), "/split/kitchen.types.rs"));
        }
    }
}
