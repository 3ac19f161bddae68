//! The prost-build [`ServiceGenerator`] that writes a tonic-shaped client module per service.
//!
//! For `service Kv` in package `store.v1` it appends to `store.v1.rs`:
//!
//! ```text
//! pub mod kv_client {
//!     pub struct KvClient<T = ::grpc_channel::Channel> { inner: T, interceptor: .., defaults: .. }  // private
//!     impl KvClient<::grpc_channel::Channel> {
//!         pub async fn connect(dst: impl Into<String>) -> Result<Self, ::grpc_channel::ConnectError>;
//!     }
//!     impl<T> KvClient<T> {
//!         pub fn new(inner: T) -> Self;   // a Channel, or a tower service over one
//!         pub fn with_interceptor(inner: T, interceptor: impl Interceptor) -> Self;
//!         pub fn send_compressed(self, encoding: ::grpc_channel::Encoding) -> Self;   // tonic's names
//!         pub fn accept_compressed(self, encoding: ::grpc_channel::Encoding) -> Self;
//!         pub fn max_decoding_message_size(self, limit: usize) -> Self;
//!         pub fn max_encoding_message_size(self, limit: usize) -> Self;
//!         pub fn into_inner(self) -> T;
//!     }
//!     impl<T: Service<GrpcCall, Response = GrpcReply>> KvClient<T> where T::Error: Into<BoxError> {
//!         pub async fn get(&mut self, request: impl IntoRequest<super::GetRequest>)
//!             -> Result<Response<super::GetResponse>, Status>;
//!         ...
//!     }
//! }
//! ```
//!
//! Each RPC method applies the client's defaults and interceptor, encodes the request
//! (`GrpcCall::encode`), hands a unary or client-streaming call its response's decoder
//! (`GrpcCall::decoding`, so the channel decodes inside the call), waits for the service to be ready and
//! calls it (`grpc_channel::service::ready_call`, which maps a layer's errors to a `Status` and bounds the
//! wait by the call's deadline), then takes the reply's message (`GrpcReply::decode`).

use std::fmt::Write as _;

use heck::ToSnakeCase;
use prost_build::{Method, Service, ServiceGenerator};

/// Generates `<service_snake>_client` modules.
#[derive(Debug, Default)]
pub(crate) struct ClientGenerator;

impl ServiceGenerator for ClientGenerator {
    fn generate(&mut self, service: Service, buf: &mut String) {
        generate_client(&service, buf);
    }
}

/// The full name of the service (`package.Service`, or `Service` without a package).
fn full_name(service: &Service) -> String {
    if service.package.is_empty() {
        service.proto_name.clone()
    } else {
        format!("{}.{}", service.package, service.proto_name)
    }
}

/// A prost type path as seen from inside the client module, one level below the package's module.
fn type_path(rust_type: &str) -> String {
    if rust_type.starts_with("::") || rust_type.starts_with("crate::") || rust_type == "()" {
        rust_type.to_owned()
    } else {
        format!("super::{rust_type}")
    }
}

/// The method's kind, in words for its doc comment.
fn kind(method: &Method) -> &'static str {
    match (method.client_streaming, method.server_streaming) {
        (false, false) => "unary",
        (false, true) => "server-streaming",
        (true, false) => "client-streaming",
        (true, true) => "bidi-streaming",
    }
}

fn generate_client(service: &Service, buf: &mut String) {
    let full = full_name(service);
    let module = format!("{}_client", service.name.to_snake_case());
    let client = format!("{}Client", service.name);
    // `write!` into a String cannot fail.
    let _ = writeln!(
        buf,
        "/// A client for the `{full}` service, on a [`::grpc_channel::Channel`]."
    );
    let _ = writeln!(buf, "pub mod {module} {{");
    let _ = writeln!(
        buf,
        "    #![allow(unused_variables, dead_code, missing_docs, unreachable_pub, clippy::wildcard_imports, clippy::let_unit_value)]"
    );
    if service.comments.leading.is_empty() && service.comments.trailing.is_empty() {
        let _ = writeln!(buf, "    /// A client for the `{full}` service.");
    } else {
        service.comments.append_with_indent(1, buf);
    }
    let _ = writeln!(
        buf,
        "    ///
    /// Generic over the tower service that carries its calls ([`::grpc_channel::service`]): a
    /// [`::grpc_channel::Channel`] by default, or a channel wrapped in tower layers
    /// (`tower::ServiceBuilder::new().concurrency_limit(2).timeout(d).service(channel)`).
    /// Cloning is cheap: clones share the channel and its connections.
    #[derive(Clone)]
    pub struct {client}<T = ::grpc_channel::Channel> {{
        inner: T,
        interceptor: ::core::option::Option<::std::sync::Arc<dyn ::grpc_channel::Interceptor>>,
        defaults: ::grpc_channel::ClientDefaults,
    }}

    impl<T: ::core::fmt::Debug> ::core::fmt::Debug for {client}<T> {{
        fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {{
            f.debug_struct(\"{client}\")
                .field(\"inner\", &self.inner)
                .field(\"interceptor\", &self.interceptor.is_some())
                .field(\"defaults\", &self.defaults)
                .finish()
        }}
    }}

    impl {client}<::grpc_channel::Channel> {{"
    );
    if !rpcs_named(service, "connect") {
        buf.push_str(&connect());
    }
    let _ = writeln!(
        buf,
        "    }}

    impl<T> {client}<T> {{
        /// A client whose calls go out on `inner`: a [`::grpc_channel::Channel`], or a tower service
        /// over one.
        pub fn new(inner: T) -> Self {{
            Self {{
                inner,
                interceptor: ::core::option::Option::None,
                defaults: ::grpc_channel::ClientDefaults::new(),
            }}
        }}"
    );
    // An RPC keeps its name; a helper whose name an RPC takes is left out (`new` stays: the RPC is renamed).
    let rpcs: Vec<&str> = service.methods.iter().map(|m| m.name.as_str()).collect();
    for (name, code) in helpers() {
        if !rpcs.contains(&name) {
            buf.push_str(&code);
        }
    }
    let _ = writeln!(
        buf,
        "    }}

    impl<T> {client}<T>
    where
        T: ::grpc_channel::service::Service<
            ::grpc_channel::service::GrpcCall,
            Response = ::grpc_channel::service::GrpcReply,
        >,
        T::Error: ::core::convert::Into<::grpc_channel::service::BoxError>,
    {{"
    );
    for (i, method) in service.methods.iter().enumerate() {
        if i > 0 {
            buf.push('\n');
        }
        generate_method(&full, method, buf);
    }
    let _ = writeln!(buf, "    }}\n}}");
}

/// Whether an RPC of `service` is named `name` (its snake_case name), which then wins over the client's
/// own method of that name.
fn rpcs_named(service: &Service, name: &str) -> bool {
    service.methods.iter().any(|m| m.name == name)
}

/// `connect`, tonic's eager constructor: the channel with default options, connected before it returns.
fn connect() -> String {
    "
        /// Connects to `dst` now (`http://host:port`, `host:port`, `dns:///host:port`, `unix:path`... see
        /// [`::grpc_channel::Target`]) on a channel with default options, and returns a client on it once a
        /// connection is READY: [`::grpc_channel::ChannelBuilder::connect`]. When the backend is
        /// unreachable the error names the cause (its source chain ends in the last connection error, such
        /// as connection refused). For other options, build the channel with
        /// [`::grpc_channel::Channel::builder`] and pass it to `new`. Must be called inside a tokio runtime.
        pub async fn connect(
            dst: impl ::core::convert::Into<::std::string::String>,
        ) -> ::core::result::Result<Self, ::grpc_channel::ConnectError> {
            ::grpc_channel::Channel::builder(dst).connect().await.map(Self::new)
        }
"
    .to_owned()
}

/// The client's own methods besides `new`, by name: each is generated unless an RPC of the service has
/// its name (`connect`, `with_interceptor` and tonic's builder methods), which wins.
fn helpers() -> Vec<(&'static str, String)> {
    vec![
        (
            "with_interceptor",
            r#"
        /// A client whose calls first go through `interceptor` (before the channel's own interceptors):
        /// it sees each call's method, metadata and options, may change them, or fail the call unsent.
        pub fn with_interceptor(
            inner: T,
            interceptor: impl ::grpc_channel::Interceptor,
        ) -> Self {
            Self {
                inner,
                interceptor: ::core::option::Option::Some(::std::sync::Arc::new(interceptor)),
                defaults: ::grpc_channel::ClientDefaults::new(),
            }
        }
"#
                .to_owned(),
        ),
        (
            "send_compressed",
            r#"
        /// Compresses this client's request messages with `encoding` (tonic's `send_compressed`). A request's
        /// own `Request::with_compression` wins; `Encoding::Identity` sends uncompressed
        /// whatever the channel's default. The server must support the encoding, or it answers UNIMPLEMENTED
        /// (`zstd` is tonic's extension, which C-core and grpc-java servers lack).
        pub fn send_compressed(mut self, encoding: ::grpc_channel::Encoding) -> Self {
            self.defaults = self.defaults.send_compressed(encoding);
            self
        }
"#
                .to_owned(),
        ),
        (
            "accept_compressed",
            r#"
        /// Advertises `encoding` in this client's `grpc-accept-encoding` too (tonic's `accept_compressed`),
        /// on top of what the channel advertises (`gzip` by default), so the server may compress responses
        /// with it.
        pub fn accept_compressed(mut self, encoding: ::grpc_channel::Encoding) -> Self {
            self.defaults = self.defaults.accept_compressed(encoding);
            self
        }
"#
                .to_owned(),
        ),
        (
            "max_decoding_message_size",
            r#"
        /// The largest response message this client's calls accept, decompressed (tonic's
        /// `max_decoding_message_size`). It replaces the channel's limit (4 MiB by default) and may raise it;
        /// a request's own limit wins, and the service config's `maxResponseMessageBytes` caps it.
        pub fn max_decoding_message_size(mut self, limit: usize) -> Self {
            self.defaults = self.defaults.max_decoding_message_size(limit);
            self
        }
"#
                .to_owned(),
        ),
        (
            "max_encoding_message_size",
            r#"
        /// The largest request message this client's calls send (tonic's `max_encoding_message_size`). It
        /// replaces the channel's limit; a request's own limit wins, and the service config's
        /// `maxRequestMessageBytes` caps it.
        pub fn max_encoding_message_size(mut self, limit: usize) -> Self {
            self.defaults = self.defaults.max_encoding_message_size(limit);
            self
        }"#
                .to_owned(),
        ),
        (
            "into_inner",
            r#"
        /// The channel, or the tower service over it, that carries this client's calls.
        pub fn into_inner(self) -> T {
            self.inner
        }"#
                .to_owned(),
        ),
    ]
}

/// The client method of an RPC: its snake_case name, but `new_rpc` for an RPC named `New`, as `new` is the
/// constructor every client has.
fn rpc_method_name(method: &Method) -> &str {
    if method.name == "new" {
        "new_rpc"
    } else {
        &method.name
    }
}

fn generate_method(service: &str, method: &Method, buf: &mut String) {
    let path = format!("/{service}/{}", method.proto_name);
    let input = type_path(&method.input_type);
    let output = type_path(&method.output_type);
    buf.push('\n');
    let comments = &method.comments;
    if !comments.leading.is_empty() || !comments.trailing.is_empty() {
        // Detached comments are not about this method.
        let attached = prost_build::Comments {
            leading_detached: Vec::new(),
            ..comments.clone()
        };
        attached.append_with_indent(2, buf);
        let _ = writeln!(buf, "        ///");
    }
    let _ = writeln!(buf, "        /// `{path}`, a {} call.", kind(method));
    let (argument, conversion, encode) = if method.client_streaming {
        (
            format!("impl ::grpc_channel::IntoStreamingRequest<Message = {input}>"),
            "into_streaming_request",
            "encode_stream",
        )
    } else {
        (
            format!("impl ::grpc_channel::IntoRequest<{input}>"),
            "into_request",
            "encode",
        )
    };
    // Unary and client-streaming calls hand the channel their response's decoder, so that a malformed
    // response fails the call inside the channel (its statistics, outlier detection, span), as on its own
    // prost path; streaming responses are decoded inside the channel's receiving half anyway.
    let decoding = if method.server_streaming {
        String::new()
    } else {
        format!(".decoding::<{output}>()")
    };
    let (response, call, decode) = match (method.client_streaming, method.server_streaming) {
        (false, false) => (output, "unary", "decode"),
        (false, true) => (
            format!("::grpc_channel::Streaming<{output}>"),
            "server_streaming",
            "decode_streaming",
        ),
        (true, false) => (output, "client_streaming", "decode"),
        (true, true) => (
            format!("::grpc_channel::Streaming<{output}>"),
            "bidi_streaming",
            "decode_streaming",
        ),
    };
    let _ = writeln!(
        buf,
        "        pub async fn {name}(
            &mut self,
            request: {argument},
        ) -> ::core::result::Result<::grpc_channel::Response<{response}>, ::grpc_channel::Status> {{
            let mut request = request.{conversion}();
            self.defaults.apply(&mut request);
            if let ::core::option::Option::Some(interceptor) = &self.interceptor {{
                request.intercept({path:?}, interceptor.as_ref())?;
            }}
            let call = ::grpc_channel::service::GrpcCall::{call}(
                {path:?},
                ::grpc_channel::service::GrpcCall::{encode}(request),
            ){decoding};
            ::grpc_channel::service::ready_call(&mut self.inner, call)
                .await?
                .{decode}()
        }}",
        name = rpc_method_name(method),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_paths_outside_the_package_stay_absolute() {
        assert_eq!(type_path("Msg"), "super::Msg");
        assert_eq!(type_path("super::other::Msg"), "super::super::other::Msg");
        assert_eq!(type_path("()"), "()");
        assert_eq!(
            type_path("::prost_types::Timestamp"),
            "::prost_types::Timestamp"
        );
    }
}
