//! Rich error details: the `grpc-status-details-bin` trailer as `google.rpc.Status` with the standard
//! detail types of `google/rpc/error_details.proto` (AIP-193), decoded and built with prost.
//!
//! [`Status::details`](crate::Status::details) decodes what a server sent;
//! [`Status::with_details`](crate::Status::with_details) builds a status that carries them (for test servers
//! and proxies). Detail messages of other types are kept as [`Any`] in [`ErrorDetails::other`].
//!
//! The message types are written out here with prost's derive (field numbers and names as in the
//! `.proto` files) rather than generated, so the crate needs no protobuf compiler.

use std::time::Duration;

use bytes::Bytes;
use prost::Message;

/// `google.protobuf.Any`: a message of some type, serialized.
#[derive(Clone, PartialEq, Eq, Message)]
pub struct Any {
    /// `type.googleapis.com/<full message name>`.
    #[prost(string, tag = "1")]
    pub type_url: String,
    /// The serialized message.
    #[prost(bytes = "bytes", tag = "2")]
    pub value: Bytes,
}

/// `google.protobuf.Duration`.
#[derive(Clone, Copy, PartialEq, Eq, Message)]
pub struct ProtoDuration {
    /// Whole seconds.
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    /// Nanoseconds, 0..1e9, with the sign of `seconds`.
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

impl ProtoDuration {
    /// The duration, if it is not negative.
    pub fn to_duration(self) -> Option<Duration> {
        if self.seconds < 0 || self.nanos < 0 || self.nanos >= 1_000_000_000 {
            return None;
        }
        Some(Duration::new(self.seconds as u64, self.nanos as u32))
    }
}

impl From<Duration> for ProtoDuration {
    fn from(d: Duration) -> Self {
        ProtoDuration {
            seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nanos: d.subsec_nanos() as i32,
        }
    }
}

/// `google.rpc.Status`: what `grpc-status-details-bin` carries.
#[derive(Clone, PartialEq, Message)]
pub struct RpcStatus {
    /// The status code (the same as `grpc-status`).
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// The developer-facing message.
    #[prost(string, tag = "2")]
    pub message: String,
    /// The details.
    #[prost(message, repeated, tag = "3")]
    pub details: Vec<Any>,
}

/// `google.rpc.RetryInfo`: when the client may retry.
#[derive(Clone, PartialEq, Message)]
pub struct RetryInfo {
    /// How long to wait before retrying.
    #[prost(message, optional, tag = "1")]
    pub retry_delay: Option<ProtoDuration>,
}

/// `google.rpc.DebugInfo`.
#[derive(Clone, PartialEq, Message)]
pub struct DebugInfo {
    /// The stack trace.
    #[prost(string, repeated, tag = "1")]
    pub stack_entries: Vec<String>,
    /// Other debugging information.
    #[prost(string, tag = "2")]
    pub detail: String,
}

/// `google.rpc.QuotaFailure`.
#[derive(Clone, PartialEq, Message)]
pub struct QuotaFailure {
    /// What was exceeded.
    #[prost(message, repeated, tag = "1")]
    pub violations: Vec<QuotaViolation>,
}

/// `google.rpc.QuotaFailure.Violation`.
#[derive(Clone, PartialEq, Message)]
pub struct QuotaViolation {
    /// The subject on which the check failed.
    #[prost(string, tag = "1")]
    pub subject: String,
    /// What failed.
    #[prost(string, tag = "2")]
    pub description: String,
}

/// `google.rpc.ErrorInfo`: the reason for an error, machine-readable.
#[derive(Clone, PartialEq, Message)]
pub struct ErrorInfo {
    /// The reason (UPPER_SNAKE_CASE).
    #[prost(string, tag = "1")]
    pub reason: String,
    /// The logical grouping the reason belongs to (a service name).
    #[prost(string, tag = "2")]
    pub domain: String,
    /// Further structured details.
    #[prost(map = "string, string", tag = "3")]
    pub metadata: std::collections::HashMap<String, String>,
}

/// `google.rpc.PreconditionFailure`.
#[derive(Clone, PartialEq, Message)]
pub struct PreconditionFailure {
    /// The failed preconditions.
    #[prost(message, repeated, tag = "1")]
    pub violations: Vec<PreconditionViolation>,
}

/// `google.rpc.PreconditionFailure.Violation`.
#[derive(Clone, PartialEq, Message)]
pub struct PreconditionViolation {
    /// The type of precondition (service-specific).
    #[prost(string, tag = "1")]
    pub r#type: String,
    /// The subject that failed.
    #[prost(string, tag = "2")]
    pub subject: String,
    /// How it failed.
    #[prost(string, tag = "3")]
    pub description: String,
}

/// `google.rpc.BadRequest`: what is wrong with the request's fields.
#[derive(Clone, PartialEq, Message)]
pub struct BadRequest {
    /// The bad fields.
    #[prost(message, repeated, tag = "1")]
    pub field_violations: Vec<FieldViolation>,
}

/// `google.rpc.BadRequest.FieldViolation`.
#[derive(Clone, PartialEq, Message)]
pub struct FieldViolation {
    /// A path to the field (`a.b[2].c`).
    #[prost(string, tag = "1")]
    pub field: String,
    /// What is wrong with it.
    #[prost(string, tag = "2")]
    pub description: String,
}

/// `google.rpc.RequestInfo`.
#[derive(Clone, PartialEq, Message)]
pub struct RequestInfo {
    /// The request's id, for logs.
    #[prost(string, tag = "1")]
    pub request_id: String,
    /// Data for debugging, opaque to the client.
    #[prost(string, tag = "2")]
    pub serving_data: String,
}

/// `google.rpc.ResourceInfo`.
#[derive(Clone, PartialEq, Message)]
pub struct ResourceInfo {
    /// The resource's type.
    #[prost(string, tag = "1")]
    pub resource_type: String,
    /// Its name.
    #[prost(string, tag = "2")]
    pub resource_name: String,
    /// Its owner.
    #[prost(string, tag = "3")]
    pub owner: String,
    /// What went wrong with it.
    #[prost(string, tag = "4")]
    pub description: String,
}

/// `google.rpc.Help`.
#[derive(Clone, PartialEq, Message)]
pub struct Help {
    /// Where to read more.
    #[prost(message, repeated, tag = "1")]
    pub links: Vec<HelpLink>,
}

/// `google.rpc.Help.Link`.
#[derive(Clone, PartialEq, Message)]
pub struct HelpLink {
    /// What the link is about.
    #[prost(string, tag = "1")]
    pub description: String,
    /// The URL.
    #[prost(string, tag = "2")]
    pub url: String,
}

/// `google.rpc.LocalizedMessage`.
#[derive(Clone, PartialEq, Message)]
pub struct LocalizedMessage {
    /// The locale (BCP 47).
    #[prost(string, tag = "1")]
    pub locale: String,
    /// The message in it.
    #[prost(string, tag = "2")]
    pub message: String,
}

const PREFIX: &str = "type.googleapis.com/google.rpc.";

/// The details of a `google.rpc.Status`, each standard type decoded (the last one of each type wins, as
/// AIP-193 allows one of each), the others kept as they came.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct ErrorDetails {
    /// When to retry.
    pub retry_info: Option<RetryInfo>,
    /// Debugging information.
    pub debug_info: Option<DebugInfo>,
    /// Quota violations.
    pub quota_failure: Option<QuotaFailure>,
    /// The reason, machine-readable.
    pub error_info: Option<ErrorInfo>,
    /// Failed preconditions.
    pub precondition_failure: Option<PreconditionFailure>,
    /// Bad request fields.
    pub bad_request: Option<BadRequest>,
    /// The request's identity.
    pub request_info: Option<RequestInfo>,
    /// The resource concerned.
    pub resource_info: Option<ResourceInfo>,
    /// Links to help.
    pub help: Option<Help>,
    /// A message for the user.
    pub localized_message: Option<LocalizedMessage>,
    /// Details of other types.
    pub other: Vec<Any>,
}

impl ErrorDetails {
    /// No details.
    pub fn new() -> ErrorDetails {
        ErrorDetails::default()
    }

    /// Decodes the details of a `google.rpc.Status`; a standard type that does not decode is an error.
    pub fn from_any(details: &[Any]) -> Result<ErrorDetails, prost::DecodeError> {
        let mut out = ErrorDetails::default();
        for any in details {
            let Some(name) = any.type_url.strip_prefix(PREFIX) else {
                out.other.push(any.clone());
                continue;
            };
            let v = any.value.clone();
            match name {
                "RetryInfo" => out.retry_info = Some(RetryInfo::decode(v)?),
                "DebugInfo" => out.debug_info = Some(DebugInfo::decode(v)?),
                "QuotaFailure" => out.quota_failure = Some(QuotaFailure::decode(v)?),
                "ErrorInfo" => out.error_info = Some(ErrorInfo::decode(v)?),
                "PreconditionFailure" => {
                    out.precondition_failure = Some(PreconditionFailure::decode(v)?)
                }
                "BadRequest" => out.bad_request = Some(BadRequest::decode(v)?),
                "RequestInfo" => out.request_info = Some(RequestInfo::decode(v)?),
                "ResourceInfo" => out.resource_info = Some(ResourceInfo::decode(v)?),
                "Help" => out.help = Some(Help::decode(v)?),
                "LocalizedMessage" => out.localized_message = Some(LocalizedMessage::decode(v)?),
                _ => out.other.push(any.clone()),
            }
        }
        Ok(out)
    }

    /// The details as `Any`s, standard types first in `error_details.proto` order, then the others.
    pub fn to_any(&self) -> Vec<Any> {
        fn pack<M: Message>(out: &mut Vec<Any>, name: &str, m: &Option<M>) {
            if let Some(m) = m {
                out.push(Any {
                    type_url: format!("{PREFIX}{name}"),
                    value: m.encode_to_vec().into(),
                });
            }
        }
        let mut out = Vec::new();
        pack(&mut out, "RetryInfo", &self.retry_info);
        pack(&mut out, "DebugInfo", &self.debug_info);
        pack(&mut out, "QuotaFailure", &self.quota_failure);
        pack(&mut out, "ErrorInfo", &self.error_info);
        pack(&mut out, "PreconditionFailure", &self.precondition_failure);
        pack(&mut out, "BadRequest", &self.bad_request);
        pack(&mut out, "RequestInfo", &self.request_info);
        pack(&mut out, "ResourceInfo", &self.resource_info);
        pack(&mut out, "Help", &self.help);
        pack(&mut out, "LocalizedMessage", &self.localized_message);
        out.extend(self.other.iter().cloned());
        out
    }

    /// Sets the retry delay.
    pub fn with_retry_delay(mut self, delay: Duration) -> ErrorDetails {
        self.retry_info = Some(RetryInfo {
            retry_delay: Some(delay.into()),
        });
        self
    }

    /// Sets the machine-readable reason.
    pub fn with_error_info(
        mut self,
        reason: impl Into<String>,
        domain: impl Into<String>,
        metadata: impl IntoIterator<Item = (String, String)>,
    ) -> ErrorDetails {
        self.error_info = Some(ErrorInfo {
            reason: reason.into(),
            domain: domain.into(),
            metadata: metadata.into_iter().collect(),
        });
        self
    }

    /// Adds a bad field.
    pub fn with_field_violation(
        mut self,
        field: impl Into<String>,
        description: impl Into<String>,
    ) -> ErrorDetails {
        self.bad_request
            .get_or_insert_with(BadRequest::default)
            .field_violations
            .push(FieldViolation {
                field: field.into(),
                description: description.into(),
            });
        self
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        *self == ErrorDetails::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_details_round_trip_and_others_are_kept() {
        let mut details = ErrorDetails::new()
            .with_retry_delay(Duration::from_millis(1500))
            .with_error_info("QUOTA", "example.com", [("k".into(), "v".into())])
            .with_field_violation("name", "too long");
        details.other.push(Any {
            type_url: "type.googleapis.com/acme.Custom".into(),
            value: Bytes::from_static(b"\x08\x01"),
        });
        let status = RpcStatus {
            code: 8,
            message: "slow down".into(),
            details: details.to_any(),
        };
        let decoded = RpcStatus::decode(status.encode_to_vec().as_slice()).expect("decodes");
        let back = ErrorDetails::from_any(&decoded.details).expect("details decode");
        assert_eq!(back, details);
        assert_eq!(
            back.retry_info
                .and_then(|r| r.retry_delay)
                .and_then(ProtoDuration::to_duration),
            Some(Duration::from_millis(1500))
        );
    }

    #[test]
    fn a_standard_type_that_does_not_decode_is_an_error() {
        let any = Any {
            type_url: format!("{PREFIX}RetryInfo"),
            value: Bytes::from_static(b"\xff\xff"),
        };
        assert!(ErrorDetails::from_any(&[any]).is_err());
    }

    #[test]
    fn negative_or_malformed_durations_are_none() {
        assert_eq!(
            ProtoDuration {
                seconds: -1,
                nanos: 0
            }
            .to_duration(),
            None
        );
        assert_eq!(
            ProtoDuration {
                seconds: 1,
                nanos: 2_000_000_000
            }
            .to_duration(),
            None
        );
        assert_eq!(
            ProtoDuration::from(Duration::MAX).to_duration(),
            Some(Duration::new(i64::MAX as u64, 999_999_999))
        );
    }
}
