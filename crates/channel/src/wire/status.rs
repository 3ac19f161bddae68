//! `Status`: the outcome of a call, and the tables that make one up when the server did not send
//! `grpc-status` (HTTP status → code, RST_STREAM error code → code), per gRPC's `doc/statuscodes.md`,
//! `doc/http-grpc-status-mapping.md` and `doc/PROTOCOL-HTTP2.md`.
//!
//! Connection-level failures become `UNAVAILABLE` in exactly one place, [`Status::from_h2`]; the h2, I/O or DNS
//! error that caused them stays reachable through [`std::error::Error::source`].

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;

use crate::wire::error_details::{ErrorDetails, RpcStatus};
use crate::wire::metadata::MetadataMap;
pub use grpc_code::Code;

/// The code for an HTTP status when the response has no `grpc-status` (`doc/http-grpc-status-mapping.md`).
/// 200 maps to `UNKNOWN` here: a 200 response without `grpc-status` is itself an error.
pub(crate) fn code_from_http_status(status: u16) -> Code {
    match status {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502 | 503 | 504 => Code::Unavailable,
        431 => Code::Internal,
        _ => Code::Unknown,
    }
}

/// The code for an RST_STREAM or GOAWAY error code sent by the server (`doc/PROTOCOL-HTTP2.md`).
pub(crate) fn code_from_h2_reason(reason: h2::Reason) -> Code {
    match reason {
        h2::Reason::REFUSED_STREAM => Code::Unavailable,
        h2::Reason::CANCEL => Code::Cancelled,
        h2::Reason::ENHANCE_YOUR_CALM => Code::ResourceExhausted,
        h2::Reason::INADEQUATE_SECURITY => Code::PermissionDenied,
        // NO_ERROR (aggressive lame-ducking), PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR,
        // SETTINGS_TIMEOUT, STREAM_CLOSED, FRAME_SIZE_ERROR, COMPRESSION_ERROR, CONNECT_ERROR and unknown codes.
        _ => Code::Internal,
    }
}

/// The outcome of a call: a code, a message, the trailing metadata (and the response headers' metadata of a
/// call that failed after them), the raw `grpc-status-details-bin`, and the error that caused it when the
/// client made it up. One pointer wide, so `Result<T, Status>` stays small.
///
/// ```
/// use grpc_channel::{Code, Status};
/// use std::error::Error as _;
///
/// fn explain(status: &Status) -> String {
///     match status.code() {
///         Code::DeadlineExceeded => "too slow".to_owned(),
///         Code::Unavailable => match status.source() {
///             // A transport failure the client saw (refused connection, TLS...), with its cause.
///             Some(cause) => format!("unreachable: {cause}"),
///             None => format!("the server is unavailable: {}", status.message()),
///         },
///         other => format!("{other:?}: {}", status.message()),
///     }
/// }
/// assert_eq!(explain(&Status::new(Code::DeadlineExceeded, "")), "too slow");
/// ```
///
/// With the `tonic` feature, a `Status` converts to and from `tonic::Status` (`From` both ways: code,
/// message, metadata, details and source), so a tonic handler forwards this channel's failures with `?`.
#[derive(Clone)]
pub struct Status(Box<Inner>);

#[derive(Clone)]
struct Inner {
    code: Code,
    message: String,
    metadata: MetadataMap,
    response_headers: MetadataMap,
    details: Option<Bytes>,
    source: Option<Arc<dyn StdError + Send + Sync + 'static>>,
}

impl Status {
    /// A status with this code and message.
    pub fn new(code: Code, message: impl Into<String>) -> Status {
        Status(Box::new(Inner {
            code,
            message: message.into(),
            metadata: MetadataMap::new(),
            response_headers: MetadataMap::new(),
            details: None,
            source: None,
        }))
    }

    /// A status with code OK (as tonic offers it; a call that succeeded has no `Status`) and `message` (tonic's shorthand for [`Status::new`]).
    pub fn ok(message: impl Into<String>) -> Status {
        Status::new(Code::Ok, message)
    }

    /// A status with code CANCELLED and `message` (tonic's shorthand for [`Status::new`]).
    pub fn cancelled(message: impl Into<String>) -> Status {
        Status::new(Code::Cancelled, message)
    }

    /// A status with code UNKNOWN and `message` (tonic's shorthand for [`Status::new`]).
    pub fn unknown(message: impl Into<String>) -> Status {
        Status::new(Code::Unknown, message)
    }

    /// A status with code INVALID_ARGUMENT and `message` (tonic's shorthand for [`Status::new`]).
    pub fn invalid_argument(message: impl Into<String>) -> Status {
        Status::new(Code::InvalidArgument, message)
    }

    /// A status with code DEADLINE_EXCEEDED and `message` (tonic's shorthand for [`Status::new`]).
    pub fn deadline_exceeded(message: impl Into<String>) -> Status {
        Status::new(Code::DeadlineExceeded, message)
    }

    /// A status with code NOT_FOUND and `message` (tonic's shorthand for [`Status::new`]).
    pub fn not_found(message: impl Into<String>) -> Status {
        Status::new(Code::NotFound, message)
    }

    /// A status with code ALREADY_EXISTS and `message` (tonic's shorthand for [`Status::new`]).
    pub fn already_exists(message: impl Into<String>) -> Status {
        Status::new(Code::AlreadyExists, message)
    }

    /// A status with code PERMISSION_DENIED and `message` (tonic's shorthand for [`Status::new`]).
    pub fn permission_denied(message: impl Into<String>) -> Status {
        Status::new(Code::PermissionDenied, message)
    }

    /// A status with code RESOURCE_EXHAUSTED and `message` (tonic's shorthand for [`Status::new`]).
    pub fn resource_exhausted(message: impl Into<String>) -> Status {
        Status::new(Code::ResourceExhausted, message)
    }

    /// A status with code FAILED_PRECONDITION and `message` (tonic's shorthand for [`Status::new`]).
    pub fn failed_precondition(message: impl Into<String>) -> Status {
        Status::new(Code::FailedPrecondition, message)
    }

    /// A status with code ABORTED and `message` (tonic's shorthand for [`Status::new`]).
    pub fn aborted(message: impl Into<String>) -> Status {
        Status::new(Code::Aborted, message)
    }

    /// A status with code OUT_OF_RANGE and `message` (tonic's shorthand for [`Status::new`]).
    pub fn out_of_range(message: impl Into<String>) -> Status {
        Status::new(Code::OutOfRange, message)
    }

    /// A status with code UNIMPLEMENTED and `message` (tonic's shorthand for [`Status::new`]).
    pub fn unimplemented(message: impl Into<String>) -> Status {
        Status::new(Code::Unimplemented, message)
    }

    /// A status with code INTERNAL and `message` (tonic's shorthand for [`Status::new`]).
    pub fn internal(message: impl Into<String>) -> Status {
        Status::new(Code::Internal, message)
    }

    /// A status with code UNAVAILABLE and `message` (tonic's shorthand for [`Status::new`]).
    pub fn unavailable(message: impl Into<String>) -> Status {
        Status::new(Code::Unavailable, message)
    }

    /// A status with code DATA_LOSS and `message` (tonic's shorthand for [`Status::new`]).
    pub fn data_loss(message: impl Into<String>) -> Status {
        Status::new(Code::DataLoss, message)
    }

    /// A status with code UNAUTHENTICATED and `message` (tonic's shorthand for [`Status::new`]).
    pub fn unauthenticated(message: impl Into<String>) -> Status {
        Status::new(Code::Unauthenticated, message)
    }

    /// The status code.
    pub fn code(&self) -> Code {
        self.0.code
    }

    /// The status message (already percent-decoded).
    pub fn message(&self) -> &str {
        &self.0.message
    }

    /// The trailing metadata that came with the status: the trailers, or the one header block of a
    /// Trailers-Only response (empty for statuses the client made up). The response headers of a call
    /// that failed after they arrived are not here but in [`Status::response_headers`].
    pub fn metadata(&self) -> &MetadataMap {
        &self.0.metadata
    }

    /// The response headers' metadata of a call that failed after they arrived (a backend that sent
    /// headers, then failed in the trailers; a stream that failed midway): what
    /// [`Streaming::metadata`](crate::Streaming::metadata) held, kept with the failure so that a failed
    /// unary call's headers stay reachable. Empty when the call failed before response headers (a
    /// Trailers-Only response puts its one block in [`Status::metadata`]), when they carried no
    /// metadata, and for statuses made by hand. With the `tonic` feature, `From<Status> for
    /// tonic::Status` merges them with the trailers as tonic's own client does.
    pub fn response_headers(&self) -> &MetadataMap {
        &self.0.response_headers
    }

    /// This status with the response headers' metadata of the call it ends.
    pub(crate) fn with_response_headers(mut self, headers: MetadataMap) -> Status {
        self.0.response_headers = headers;
        self
    }

    /// How many attempts preceded the one that produced this status (gRFC A6 "Exposed Retry Metadata"):
    /// retries and hedges under a retry or hedging policy, never transparent retries; 0 when the first
    /// attempt produced it. The same number is in [`Status::metadata`] as `grpc-previous-rpc-attempts`
    /// when it is not 0. For a status the client made after several attempts (a deadline during a
    /// retry's backoff, a cancel), it is the number of attempts before the last one the call started.
    pub fn previous_rpc_attempts(&self) -> u32 {
        self.0.metadata.previous_rpc_attempts()
    }

    /// This status with `n` previous attempts recorded in its metadata (none for 0).
    pub(crate) fn with_previous_rpc_attempts(mut self, n: u32) -> Status {
        self.0.metadata.set_previous_rpc_attempts(n);
        self
    }

    /// The `grpc-status-details-bin` trailer, base64-decoded: a serialized `google.rpc.Status`, if the server
    /// sent one.
    pub fn details_bin(&self) -> Option<&Bytes> {
        self.0.details.as_ref()
    }

    /// The rich error details of `grpc-status-details-bin` (`google.rpc.Status`), decoded: `Ok(None)` when
    /// the server sent none, an error when they do not decode.
    ///
    /// ```
    /// use grpc_channel::{Code, ErrorDetails, Status};
    /// use std::time::Duration;
    ///
    /// let status = Status::with_details(
    ///     Code::ResourceExhausted,
    ///     "slow down",
    ///     ErrorDetails::new().with_retry_delay(Duration::from_secs(2)),
    /// );
    /// let details = status.details().expect("decodes").expect("present");
    /// let delay = details.retry_info.and_then(|r| r.retry_delay).and_then(|d| d.to_duration());
    /// assert_eq!(delay, Some(Duration::from_secs(2)));
    /// ```
    pub fn details(&self) -> Result<Option<ErrorDetails>, prost::DecodeError> {
        let Some(bytes) = &self.0.details else {
            return Ok(None);
        };
        let rpc = RpcStatus::decode(bytes.clone())?;
        ErrorDetails::from_any(&rpc.details).map(Some)
    }

    /// A status carrying rich error details, as a server sends them in `grpc-status-details-bin` (for test
    /// servers, proxies and fakes).
    pub fn with_details(code: Code, message: impl Into<String>, details: ErrorDetails) -> Status {
        let message = message.into();
        let rpc = RpcStatus {
            code: code as i32,
            message: message.clone(),
            details: details.to_any(),
        };
        Status::new(code, message).with_details_bin(Some(Bytes::from(rpc.encode_to_vec())))
    }

    /// The status as a server sends it: `grpc-status`, `grpc-message` (percent-encoded, when not empty) and
    /// `grpc-status-details-bin` (when there are details). For the project's test servers (feature
    /// `unstable`); not part of the documented API.
    #[cfg(feature = "unstable")]
    #[doc(hidden)]
    pub fn to_headers(&self) -> http::HeaderMap {
        self.as_headers()
    }

    /// The status as a server sends it, as `to_headers` says (the tower adapter's answer).
    #[cfg_attr(not(any(feature = "unstable", feature = "tower")), allow(dead_code))]
    pub(crate) fn as_headers(&self) -> http::HeaderMap {
        use http::HeaderValue;
        let mut h = http::HeaderMap::new();
        h.insert("grpc-status", HeaderValue::from(self.code().as_i32()));
        if !self.message().is_empty() {
            if let Ok(v) =
                HeaderValue::try_from(crate::wire::percent::encode(self.message()).into_owned())
            {
                h.insert("grpc-message", v);
            }
        }
        if let Some(details) = self.details_bin() {
            if let Ok(v) = HeaderValue::try_from(crate::wire::metadata::encode_bin(details)) {
                h.insert("grpc-status-details-bin", v);
            }
        }
        h
    }

    /// The error that caused this status, shared (the tonic conversion hands tonic the same one).
    #[cfg(feature = "tonic")]
    pub(crate) fn source_arc(&self) -> Option<&Arc<dyn StdError + Send + Sync + 'static>> {
        self.0.source.as_ref()
    }

    /// Attaches the error that caused this status.
    pub fn with_source(mut self, source: impl StdError + Send + Sync + 'static) -> Status {
        self.0.source = Some(Arc::new(source));
        self
    }

    pub(crate) fn with_metadata(mut self, metadata: MetadataMap) -> Status {
        self.0.metadata = metadata;
        self
    }

    pub(crate) fn with_details_bin(mut self, details: Option<Bytes>) -> Status {
        self.0.details = details;
        self
    }

    /// The status for an h2 error on a stream or connection. This is the one place where transport failures
    /// are turned into statuses:
    /// * RST_STREAM from the server: the RST_STREAM table (REFUSED_STREAM → UNAVAILABLE, CANCEL → CANCELLED, ...);
    /// * a GOAWAY from the server and I/O errors: UNAVAILABLE (the server went away; nothing says the call
    ///   was bad);
    /// * a GOAWAY the client sent because of what the server sent: RESOURCE_EXHAUSTED for ENHANCE_YOUR_CALM
    ///   (a flood, or a header block far over the limit), INTERNAL for a protocol or flow-control violation;
    /// * a stream the client reset after a protocol error: INTERNAL;
    /// * a request h2 refused to encode (the caller's metadata): INTERNAL.
    pub(crate) fn from_h2(err: h2::Error) -> Status {
        let (code, what) = if err.is_io() {
            (Code::Unavailable, "connection error")
        } else if err.is_go_away() && err.is_remote() {
            (Code::Unavailable, "connection closed by GOAWAY")
        } else if err.is_go_away() {
            // The client closed the connection because of what the server sent.
            match err.reason() {
                Some(h2::Reason::ENHANCE_YOUR_CALM) => (
                    Code::ResourceExhausted,
                    "the server sent more than the client allows (a header block far over the header \
                     list limit, or a flood of frames)",
                ),
                Some(h2::Reason::NO_ERROR) | None => (Code::Unavailable, "connection closed"),
                Some(_) => (Code::Internal, "the server broke the HTTP/2 protocol"),
            }
        } else if err.is_reset() && err.is_remote() {
            let reason = err.reason().unwrap_or(h2::Reason::INTERNAL_ERROR);
            (code_from_h2_reason(reason), "stream reset by server")
        } else if err.is_reset() {
            (
                Code::Internal,
                "stream reset by client after a protocol error",
            )
        } else if err.is_library() {
            (Code::Internal, "HTTP/2 error")
        } else if grpc_transparent::is_user_error(&err) {
            (Code::Internal, "the request could not be sent")
        } else {
            (Code::Unavailable, "transport error")
        };
        let message = match err.reason() {
            Some(reason) => format!("{what} ({reason:?}): {err}"),
            None => format!("{what}: {err}"),
        };
        Status::new(code, message).with_source(err)
    }

    /// The status for an I/O error while connecting or talking to the server: UNAVAILABLE.
    pub(crate) fn from_io(what: &str, err: std::io::Error) -> Status {
        Status::new(Code::Unavailable, format!("{what}: {err}")).with_source(err)
    }

    /// A status of this code that says the deadline rule (`DEADLINE_EXCEEDED`).
    pub(crate) fn deadline_passed() -> Status {
        Status::new(Code::DeadlineExceeded, "deadline exceeded")
    }

    /// The status of a call cancelled by the application.
    /// This status, its source `source` (an error already boxed: kept as it is, so it can be downcast).
    pub(crate) fn with_boxed_source(
        mut self,
        source: Box<dyn StdError + Send + Sync + 'static>,
    ) -> Status {
        self.0.source = Some(Arc::from(source));
        self
    }

    pub(crate) fn cancelled_by_client() -> Status {
        Status::new(Code::Cancelled, "call cancelled by the client")
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.0;
        let mut d = f.debug_struct("Status");
        d.field("code", &s.code).field("message", &s.message);
        if !s.metadata.is_empty() {
            d.field("metadata", &s.metadata);
        }
        if !s.response_headers.is_empty() {
            d.field("response_headers", &s.response_headers);
        }
        if let Some(details) = &s.details {
            d.field("details", details);
        }
        if let Some(source) = &s.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.message.is_empty() {
            write!(f, "{}", self.0.code)
        } else {
            write!(f, "{}: {}", self.0.code, self.0.message)
        }
    }
}

impl StdError for Status {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0
            .source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_the_code_then_the_message_if_any() {
        assert_eq!(
            Status::new(Code::Unimplemented, "").to_string(),
            "UNIMPLEMENTED"
        );
        assert_eq!(
            Status::new(Code::Unavailable, "no route").to_string(),
            "UNAVAILABLE: no route"
        );
    }

    #[test]
    fn http_status_table() {
        let table = [
            (400, Code::Internal),
            (401, Code::Unauthenticated),
            (403, Code::PermissionDenied),
            (404, Code::Unimplemented),
            (429, Code::Unavailable),
            (431, Code::Internal),
            (502, Code::Unavailable),
            (503, Code::Unavailable),
            (504, Code::Unavailable),
            (200, Code::Unknown),
            (500, Code::Unknown),
            (418, Code::Unknown),
        ];
        for (http, code) in table {
            assert_eq!(code_from_http_status(http), code, "HTTP {http}");
        }
    }

    #[test]
    fn rst_stream_table() {
        use h2::Reason;
        let table = [
            (Reason::NO_ERROR, Code::Internal),
            (Reason::PROTOCOL_ERROR, Code::Internal),
            (Reason::INTERNAL_ERROR, Code::Internal),
            (Reason::FLOW_CONTROL_ERROR, Code::Internal),
            (Reason::SETTINGS_TIMEOUT, Code::Internal),
            (Reason::FRAME_SIZE_ERROR, Code::Internal),
            (Reason::REFUSED_STREAM, Code::Unavailable),
            (Reason::CANCEL, Code::Cancelled),
            (Reason::COMPRESSION_ERROR, Code::Internal),
            (Reason::CONNECT_ERROR, Code::Internal),
            (Reason::ENHANCE_YOUR_CALM, Code::ResourceExhausted),
            (Reason::INADEQUATE_SECURITY, Code::PermissionDenied),
            (Reason::from(0xff), Code::Internal),
        ];
        for (reason, code) in table {
            assert_eq!(code_from_h2_reason(reason), code, "{reason:?}");
        }
    }

    #[test]
    fn status_is_one_pointer_wide() {
        assert_eq!(std::mem::size_of::<Status>(), std::mem::size_of::<usize>());
    }

    #[test]
    fn status_keeps_its_source() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let s = Status::from_io("connect to 127.0.0.1:1", io);
        assert_eq!(s.code(), Code::Unavailable);
        let src = s.source().expect("source");
        assert!(src.to_string().contains("refused"));
    }
}
