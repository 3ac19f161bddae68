//! Code generation for `grpc-channel`, run from a `build.rs`: compiles `.proto` files with protox (a
//! pure-Rust protobuf compiler, so no system `protoc`) and writes, per protobuf package, `<package>.rs` into
//! `OUT_DIR` with prost's messages and, per service, a module `<service_snake>_client` holding a
//! `<Service>Client`.
//!
//! ```no_run
//! // build.rs
//! fn main() -> Result<(), grpc_build::Error> {
//!     grpc_build::compile_protos(&["proto/kv.proto"], &["proto"])
//! }
//! ```
//!
//! ```ignore
//! // src/lib.rs
//! pub mod kv {
//!     grpc_channel::include_proto!("kv");
//! }
//! ```
//!
//! The generated clients are shaped like tonic's, so code can move between the two:
//! `KvClient::new(channel)`, `KvClient::connect("http://host:port").await?` (connects now; the error says
//! why the backend is unreachable), `Clone`, and one `async` method per RPC, in snake_case, taking
//! `&mut self`:
//!
//! | RPC kind | argument | result |
//! |---|---|---|
//! | unary | `impl IntoRequest<Req>` (a message or a `Request` of one) | `Result<Response<Resp>, Status>` |
//! | server streaming | `impl IntoRequest<Req>` | `Result<Response<Streaming<Resp>>, Status>` |
//! | client streaming | `impl IntoStreamingRequest<Message = Req>` (a `Stream` or a `Request` of one) | `Result<Response<Resp>, Status>` |
//! | bidi streaming | `impl IntoStreamingRequest<Message = Req>` | `Result<Response<Streaming<Resp>>, Status>` |
//!
//! Like tonic's, a client is generic over the service that carries its calls: `KvClient<T =
//! grpc_channel::Channel>`, where `T` may be any tower service over the channel
//! (`tower_service::Service<grpc_channel::service::GrpcCall, Response = GrpcReply>`, its error into a
//! `BoxError`), so `KvClient::new(ServiceBuilder::new().concurrency_limit(2).timeout(d).service(channel))`
//! puts tower's layers in front of the calls; `connect` is on `KvClient<Channel>` only.
//!
//! Generated code names `grpc-channel` as `::grpc_channel` and prost as `::prost`, so the crate that includes
//! it depends on those two (and on `prost-types` if its protos use well-known types other than
//! `google.protobuf.Empty`, which prost maps to `()`). Comments in the `.proto` files become doc comments.
//!
//! Each client also takes tonic's per-client settings, by value: `send_compressed(Encoding)`,
//! `accept_compressed(Encoding)`, `max_decoding_message_size(usize)` and `max_encoding_message_size(usize)`
//! (kept in a `grpc_channel::ClientDefaults` and applied to each request before the client's interceptor
//! runs; a request's own settings win, the channel's defaults apply to what neither set), and
//! `with_interceptor(channel, interceptor)` makes a client whose interceptor sees each call before the
//! channel's interceptors.
//!
//! An RPC keeps its name when it meets one of these: a service with `rpc Connect` gets a `connect(request)`
//! method and no `connect(dst)` constructor (build the channel and call `new`), and likewise for
//! `with_interceptor` and the four settings. Only `new` stays the constructor: `rpc New` becomes `new_rpc`.
//!
//! # Clients over messages generated elsewhere (a tonic server in the same crate)
//!
//! A crate that serves with tonic and calls with `grpc-channel` needs one set of message types, not two
//! (two generators each writing `$OUT_DIR/<package>.rs` would clash, and two out dirs give two
//! incompatible `Point`s). [`Builder::build_messages`]`(false)` generates only the client modules, into
//! `$OUT_DIR/<package>.grpc-client.rs` (a name no protobuf package's `<package>.rs` can take: package names
//! have no `-`), with the same type paths as beside prost's messages (`super::Point`,
//! `super::super::other::Msg`, `::prost_types::Timestamp`, your `extern_path`s). Include that file into the
//! module that holds the other generator's messages, with `grpc_channel::include_clients!`:
//!
//! ```ignore
//! // build.rs: tonic's messages and server, this crate's clients, from the same protos.
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let protos = ["proto/routeguide.proto"];
//!     // tonic-prost-build runs protoc unless given descriptors: compile them with protox.
//!     let fds = protox::compile(protos, ["proto"])?;
//!     tonic_prost_build::configure()
//!         .build_client(false) // this crate's client takes the `route_guide_client` module
//!         .compile_fds(fds)?;
//!     grpc_build::configure()
//!         .build_messages(false)
//!         .compile_protos(&protos, &["proto"])?;
//!     Ok(())
//! }
//! ```
//!
//! ```ignore
//! // src/lib.rs
//! pub mod routeguide {
//!     tonic::include_proto!("routeguide"); // messages + route_guide_server
//!     grpc_channel::include_clients!("routeguide"); // route_guide_client over the same messages
//! }
//! ```
//!
//! tonic's client must be off (`build_client(false)`): both generators name their client module
//! `<service_snake>_client`. The two generators must agree on type paths: give grpc-build the same
//! `extern_path`s (through [`Builder::compile_with_config`]) as the message generator. A package without
//! services gets no `.grpc-client.rs` file. `grpc-channel`'s `Streaming` and `Status` are not tonic's: the
//! server side uses tonic's types, the client side this crate's, and the messages are shared.
//!
//! Not here: server code (`grpc-channel` is a client), `protoc` plugins.

mod client;
mod clients_only;

use std::fmt;
use std::path::{Path, PathBuf};

pub use prost_build;

/// Why code generation failed.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A `.proto` file could not be read, parsed or checked (protox's diagnostic says where).
    #[error("cannot compile the .proto files")]
    Compile(#[source] protox::Error),
    /// prost-build could not generate or write the Rust code (or no output directory was given and
    /// `OUT_DIR` is not set).
    #[error("cannot generate the Rust code")]
    Generate(#[source] std::io::Error),
}

/// Shows the whole cause chain, so a `build.rs` whose `main` returns this error prints why it failed.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")?;
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

/// Compiles `protos` (paths of `.proto` files, found under one of `includes`, which imports are resolved
/// against too) and writes `<package>.rs` files into `OUT_DIR`, with default settings. See [`Builder`] to
/// change them.
pub fn compile_protos(
    protos: &[impl AsRef<Path>],
    includes: &[impl AsRef<Path>],
) -> Result<(), Error> {
    configure().compile_protos(protos, includes)
}

/// A [`Builder`] with default settings: messages and clients on, output into `OUT_DIR`,
/// `cargo:rerun-if-changed` lines for every `.proto` file read.
pub fn configure() -> Builder {
    Builder {
        out_dir: None,
        emit_rerun_if_changed: true,
        build_client: true,
        build_messages: true,
    }
}

/// Code generation settings.
#[derive(Clone, Debug)]
pub struct Builder {
    out_dir: Option<PathBuf>,
    emit_rerun_if_changed: bool,
    build_client: bool,
    build_messages: bool,
}

impl Builder {
    /// Writes the generated files into `dir` instead of `OUT_DIR`.
    pub fn out_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.out_dir = Some(dir.into());
        self
    }

    /// Whether to print `cargo:rerun-if-changed=<path>` for every `.proto` file read from disk (on by
    /// default; the well-known types protox ships are not files).
    pub fn emit_rerun_if_changed(mut self, enabled: bool) -> Self {
        self.emit_rerun_if_changed = enabled;
        self
    }

    /// Whether to generate the `<service>_client` modules (on by default); off, only messages are generated.
    pub fn build_client(mut self, enabled: bool) -> Self {
        self.build_client = enabled;
        self
    }

    /// Whether to generate the messages (on by default). Off, only the `<service>_client` modules are
    /// generated, each package's into `<package>.grpc-client.rs` (`_.grpc-client.rs` for the empty package)
    /// instead of `<package>.rs`, for a crate whose messages come from another generator (tonic-prost-build,
    /// or prost-build run separately): include it into the module holding that package's messages with
    /// `grpc_channel::include_clients!`. Type paths are those prost would use beside the messages. Packages
    /// without services get no file. See the crate docs for the tonic recipe.
    ///
    /// With messages off, a prost-build config passed to [`Builder::compile_with_config`] only shapes type
    /// paths (`extern_path`, `compile_well_known_types`, `prost_types_path`) and comments; its `out_dir`,
    /// `include_file`, `file_descriptor_set_path` and `default_package_filename` are not used (the
    /// directory is this builder's [`Builder::out_dir`], else `OUT_DIR`).
    pub fn build_messages(mut self, enabled: bool) -> Self {
        self.build_messages = enabled;
        self
    }

    /// Compiles `protos` with prost-build's default settings. See [`compile_protos`].
    pub fn compile_protos(
        self,
        protos: &[impl AsRef<Path>],
        includes: &[impl AsRef<Path>],
    ) -> Result<(), Error> {
        self.compile_with_config(prost_build::Config::new(), protos, includes)
    }

    /// Compiles `protos` with a prost-build `config` (e.g. `bytes`, `btree_map`, attributes). Its service
    /// generator is replaced with this crate's, and its output directory with this builder's if set.
    pub fn compile_with_config(
        self,
        mut config: prost_build::Config,
        protos: &[impl AsRef<Path>],
        includes: &[impl AsRef<Path>],
    ) -> Result<(), Error> {
        let mut compiler = protox::Compiler::new(includes).map_err(Error::Compile)?;
        compiler.include_source_info(true).include_imports(true);
        for proto in protos {
            compiler.open_file(proto).map_err(Error::Compile)?;
        }
        if self.emit_rerun_if_changed {
            for file in compiler.files() {
                if let Some(path) = file.path() {
                    println!("cargo:rerun-if-changed={}", path.display());
                }
            }
        }
        if !self.build_messages {
            let dir = match self.out_dir {
                Some(dir) => dir,
                None => std::env::var_os("OUT_DIR")
                    .map(PathBuf::from)
                    .ok_or_else(|| Error::Generate(std::io::Error::other("OUT_DIR is not set")))?,
            };
            if !self.build_client {
                return Ok(());
            }
            return clients_only::write(config, compiler.file_descriptor_set(), &dir)
                .map_err(Error::Generate);
        }
        if let Some(dir) = &self.out_dir {
            config.out_dir(dir);
        }
        if self.build_client {
            config.service_generator(Box::new(client::ClientGenerator));
        }
        config
            .compile_fds(compiler.file_descriptor_set())
            .map_err(Error::Generate)
    }
}
