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

/// Protos with awkward names, generated with messages and clients together (`adv`) and apart (`adv_split`,
/// clients from `build_messages(false)` included with `include_clients!`'s file naming).
#[allow(missing_docs, clippy::all)]
pub mod adv {
    pub mod adv {
        pub mod names {
            include!(concat!(env!("OUT_DIR"), "/adv/adv.names.rs"));
            pub mod inner {
                include!(concat!(env!("OUT_DIR"), "/adv/adv.names.inner.rs"));
            }
        }
        pub mod connect {
            include!(concat!(env!("OUT_DIR"), "/adv/adv.connect.rs"));
        }
        pub mod tower {
            pub mod service {
                include!(concat!(env!("OUT_DIR"), "/adv/adv.tower.service.rs"));
            }
        }
    }
}

/// The same protos generated apart: messages, then clients only.
#[allow(missing_docs, clippy::all)]
pub mod adv_split {
    pub mod adv {
        pub mod names {
            include!(concat!(env!("OUT_DIR"), "/adv-split/adv.names.rs"));
            include!(concat!(
                env!("OUT_DIR"),
                "/adv-split/adv.names.grpc-client.rs"
            ));
            pub mod inner {
                include!(concat!(env!("OUT_DIR"), "/adv-split/adv.names.inner.rs"));
                include!(concat!(
                    env!("OUT_DIR"),
                    "/adv-split/adv.names.inner.grpc-client.rs"
                ));
            }
        }
        pub mod connect {
            include!(concat!(env!("OUT_DIR"), "/adv-split/adv.connect.rs"));
            include!(concat!(
                env!("OUT_DIR"),
                "/adv-split/adv.connect.grpc-client.rs"
            ));
        }
        pub mod tower {
            pub mod service {
                include!(concat!(env!("OUT_DIR"), "/adv-split/adv.tower.service.rs"));
                include!(concat!(
                    env!("OUT_DIR"),
                    "/adv-split/adv.tower.service.grpc-client.rs"
                ));
            }
        }
    }
}
