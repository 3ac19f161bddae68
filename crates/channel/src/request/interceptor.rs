//! Interceptors: code that sees every call before its first attempt, with the call's method, metadata and
//! options, and may change them (an auth token on every call, a default deadline) or fail the call with a
//! status, in which case nothing is sent and the channel does not even connect for it.
//!
//! A channel's interceptors ([`ChannelBuilder::interceptor`](crate::ChannelBuilder::interceptor)) run in
//! the order they were added, on every call shape; a generated client may have its own, which run first.
//! They run once per call, not per attempt: retries and hedges send what the interceptors produced.
//! [`Request::intercept`] runs one on a request, for clients with interceptors of their own. The channel's
//! health Watch runs them too (gRFC A17: they add its credentials).

use std::sync::Arc;

use crate::request::{CallOptions, Request};
use crate::wire::metadata::MetadataMap;
use crate::wire::status::Status;

/// What an interceptor sees of a call.
#[derive(Debug)]
pub struct CallInfo<'a> {
    method: &'a str,
    metadata: &'a mut MetadataMap,
    options: &'a mut CallOptions,
}

impl<'a> CallInfo<'a> {
    pub(crate) fn new(
        method: &'a str,
        metadata: &'a mut MetadataMap,
        options: &'a mut CallOptions,
    ) -> CallInfo<'a> {
        CallInfo {
            method,
            metadata,
            options,
        }
    }

    /// The full method name, `/package.Service/Method`.
    pub fn method(&self) -> &str {
        self.method
    }

    /// The request metadata.
    pub fn metadata(&self) -> &MetadataMap {
        self.metadata
    }

    /// The request metadata, for adding to it.
    pub fn metadata_mut(&mut self) -> &mut MetadataMap {
        self.metadata
    }

    /// The call's options.
    pub fn options(&self) -> &CallOptions {
        self.options
    }

    /// The call's options, for changing them.
    pub fn options_mut(&mut self) -> &mut CallOptions {
        self.options
    }
}

impl<T> Request<T> {
    /// Runs `interceptor` on this request as a call of `method` would (for clients that have their own
    /// interceptors; the channel's run after them).
    pub fn intercept(&mut self, method: &str, interceptor: &dyn Interceptor) -> Result<(), Status> {
        interceptor.intercept(&mut CallInfo::new(
            method,
            &mut self.metadata,
            &mut self.options,
        ))
    }
}

/// Sees each call before its first attempt; an error fails the call with that status, unsent.
///
/// Any `Fn(&mut CallInfo<'_>) -> Result<(), Status> + Send + Sync + 'static` is one:
///
/// ```
/// use grpc_channel::{Channel, Code, Status};
///
/// # fn example(token: String) -> Result<(), grpc_channel::BuildError> {
/// let channel = Channel::builder("dns:///api.example.com:443")
///     .interceptor(move |call: &mut grpc_channel::CallInfo<'_>| {
///         if call.method().starts_with("/admin.") {
///             return Err(Status::new(Code::PermissionDenied, "no admin calls from here"));
///         }
///         call.metadata_mut()
///             .append("authorization", &format!("Bearer {token}"))
///             .map_err(|e| Status::new(Code::Internal, e.to_string()))
///     })
///     .build()?;
/// # Ok(()) }
/// ```
pub trait Interceptor: Send + Sync + 'static {
    /// Looks at (and may change) the call, or fails it.
    fn intercept(&self, call: &mut CallInfo<'_>) -> Result<(), Status>;
}

impl<F> Interceptor for F
where
    F: Fn(&mut CallInfo<'_>) -> Result<(), Status> + Send + Sync + 'static,
{
    fn intercept(&self, call: &mut CallInfo<'_>) -> Result<(), Status> {
        self(call)
    }
}

/// A list of interceptors, run in order.
#[derive(Clone, Default)]
pub(crate) struct Interceptors(Vec<Arc<dyn Interceptor>>);

impl Interceptors {
    pub(crate) fn push(&mut self, interceptor: Arc<dyn Interceptor>) {
        self.0.push(interceptor);
    }

    /// Runs every interceptor on the call; the first error fails it.
    pub(crate) fn run(
        &self,
        method: &str,
        metadata: &mut MetadataMap,
        options: &mut CallOptions,
    ) -> Result<(), Status> {
        for interceptor in &self.0 {
            interceptor.intercept(&mut CallInfo::new(method, metadata, options))?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for Interceptors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} interceptor(s)", self.0.len())
    }
}
