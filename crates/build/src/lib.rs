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
//! `KvClient::new(channel)`, `Clone`, and one `async` method per RPC, in snake_case, taking `&mut self`:
//!
//! | RPC kind | argument | result |
//! |---|---|---|
//! | unary | `impl IntoRequest<Req>` (a message or a `Request` of one) | `Result<Response<Resp>, Status>` |
//! | server streaming | `impl IntoRequest<Req>` | `Result<Response<Streaming<Resp>>, Status>` |
//! | client streaming | `impl IntoStreamingRequest<Message = Req>` (a `Stream` or a `Request` of one) | `Result<Response<Resp>, Status>` |
//! | bidi streaming | `impl IntoStreamingRequest<Message = Req>` | `Result<Response<Streaming<Resp>>, Status>` |
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
//! Not here: server code (`grpc-channel` is a client), `protoc` plugins.

mod client;

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
    /// prost-build could not generate or write the Rust code.
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

/// A [`Builder`] with default settings: clients on, output into `OUT_DIR`, `cargo:rerun-if-changed` lines
/// for every `.proto` file read.
pub fn configure() -> Builder {
    Builder {
        out_dir: None,
        emit_rerun_if_changed: true,
        build_client: true,
    }
}

/// Code generation settings.
#[derive(Clone, Debug)]
pub struct Builder {
    out_dir: Option<PathBuf>,
    emit_rerun_if_changed: bool,
    build_client: bool,
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
