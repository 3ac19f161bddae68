//! The gRPC status code (`doc/statuscodes.md`): the one vocabulary shared by every crate of the workspace, from
//! the service config's `retryableStatusCodes` to the retry state machine and the channel's `Status`.
//!
//! This crate does no I/O and, without features, has no dependencies. The tables that turn HTTP statuses and
//! HTTP/2 error codes into codes belong to the transport (`grpc-channel`), not here.
//!
//! With the `tonic` feature, [`Code`] converts to and from `tonic::Code` (`tonic::Code::from(code)`,
//! `Code::from(tonic_code)`), in `tonic_code.rs`; the conversions of whole statuses are `grpc-channel`'s.

use std::fmt;

#[cfg(feature = "tonic")]
mod tonic_code;

/// A gRPC status code (`doc/statuscodes.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Code {
    /// 0: not an error.
    Ok = 0,
    /// 1: the operation was cancelled, typically by the caller.
    Cancelled = 1,
    /// 2: an unknown error, or a status that could not be parsed.
    Unknown = 2,
    /// 3: the client gave an invalid argument.
    InvalidArgument = 3,
    /// 4: the deadline expired before the operation completed.
    DeadlineExceeded = 4,
    /// 5: an entity was not found.
    NotFound = 5,
    /// 6: an entity already exists.
    AlreadyExists = 6,
    /// 7: the caller may not do this.
    PermissionDenied = 7,
    /// 8: a resource (quota, memory, message size) ran out.
    ResourceExhausted = 8,
    /// 9: the system is not in a state that allows the operation.
    FailedPrecondition = 9,
    /// 10: the operation was aborted (concurrency conflict).
    Aborted = 10,
    /// 11: the operation went past the valid range.
    OutOfRange = 11,
    /// 12: not implemented or not supported.
    Unimplemented = 12,
    /// 13: an internal invariant was broken.
    Internal = 13,
    /// 14: the service is currently unavailable; a retry may succeed.
    Unavailable = 14,
    /// 15: unrecoverable data loss.
    DataLoss = 15,
    /// 16: no valid authentication credentials.
    Unauthenticated = 16,
}

/// Every code, in number order.
pub(crate) const ALL_CODES: [Code; 17] = [
    Code::Ok,
    Code::Cancelled,
    Code::Unknown,
    Code::InvalidArgument,
    Code::DeadlineExceeded,
    Code::NotFound,
    Code::AlreadyExists,
    Code::PermissionDenied,
    Code::ResourceExhausted,
    Code::FailedPrecondition,
    Code::Aborted,
    Code::OutOfRange,
    Code::Unimplemented,
    Code::Internal,
    Code::Unavailable,
    Code::DataLoss,
    Code::Unauthenticated,
];

impl Code {
    /// The code for a number, or `None` for a number outside 0..=16.
    pub fn from_i32(n: i32) -> Option<Code> {
        usize::try_from(n)
            .ok()
            .and_then(|i| ALL_CODES.get(i))
            .copied()
    }

    /// The code's number.
    pub fn as_i32(self) -> i32 {
        self as i32
    }

    /// The canonical upper-case name, e.g. `"UNAVAILABLE"`.
    pub fn name(self) -> &'static str {
        match self {
            Code::Ok => "OK",
            Code::Cancelled => "CANCELLED",
            Code::Unknown => "UNKNOWN",
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Code::NotFound => "NOT_FOUND",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::Aborted => "ABORTED",
            Code::OutOfRange => "OUT_OF_RANGE",
            Code::Unimplemented => "UNIMPLEMENTED",
            Code::Internal => "INTERNAL",
            Code::Unavailable => "UNAVAILABLE",
            Code::DataLoss => "DATA_LOSS",
            Code::Unauthenticated => "UNAUTHENTICATED",
        }
    }

    /// The code for a name, compared case-insensitively (`"unavailable"` and `"UNAVAILABLE"` both work).
    pub fn from_name(name: &str) -> Option<Code> {
        ALL_CODES
            .iter()
            .copied()
            .find(|c| c.name().eq_ignore_ascii_case(name))
    }

    /// The code for the decimal text of a `grpc-status` header: digits only, no sign, no leading zeros (a lone
    /// `0` is fine). Anything else, including a number outside 0..=16, is `None`.
    pub fn from_header_bytes(value: &[u8]) -> Option<Code> {
        if value.is_empty() || value.len() > 2 || !value.iter().all(u8::is_ascii_digit) {
            return None;
        }
        if value.len() > 1 && value[0] == b'0' {
            return None;
        }
        let n = value
            .iter()
            .fold(0i32, |acc, d| acc * 10 + i32::from(d - b'0'));
        Code::from_i32(n)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_numbers_and_names_round_trip() {
        for (i, c) in ALL_CODES.iter().enumerate() {
            assert_eq!(c.as_i32(), i as i32);
            assert_eq!(Code::from_i32(i as i32), Some(*c));
            assert_eq!(Code::from_name(c.name()), Some(*c));
            assert_eq!(Code::from_name(&c.name().to_ascii_lowercase()), Some(*c));
        }
        assert_eq!(Code::from_i32(17), None);
        assert_eq!(Code::from_i32(-1), None);
        assert_eq!(Code::from_name("NOPE"), None);
    }

    #[test]
    fn grpc_status_header_parsing_is_strict() {
        assert_eq!(Code::from_header_bytes(b"0"), Some(Code::Ok));
        assert_eq!(Code::from_header_bytes(b"14"), Some(Code::Unavailable));
        assert_eq!(Code::from_header_bytes(b"16"), Some(Code::Unauthenticated));
        for bad in [
            &b""[..],
            b"17",
            b"014",
            b"00",
            b"-1",
            b"+1",
            b"abc",
            b"1 ",
            b"999999999999",
        ] {
            assert_eq!(Code::from_header_bytes(bad), None, "{bad:?}");
        }
    }
}
