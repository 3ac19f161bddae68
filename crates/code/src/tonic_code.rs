//! [`Code`] ↔ `tonic::Code` (feature `tonic`): the two enums list the same 17 codes of
//! `doc/statuscodes.md` with the same numbers, so each conversion is one-to-one and loses nothing. tonic maps
//! a number outside 0..=16 to its `Unknown` before it ever holds a `tonic::Code`; that `Unknown` becomes
//! [`Code::Unknown`] here, as gRPC says an unknown code must be read.
//!
//! Not here: statuses (message, metadata, details), which `grpc-channel` converts with its own `tonic`
//! feature, and the number or name parsing of [`Code`] itself.

use crate::Code;

impl From<Code> for tonic::Code {
    /// The tonic code of the same number and meaning (`tonic::Code::from(code)`).
    fn from(code: Code) -> tonic::Code {
        match code {
            Code::Ok => tonic::Code::Ok,
            Code::Cancelled => tonic::Code::Cancelled,
            Code::Unknown => tonic::Code::Unknown,
            Code::InvalidArgument => tonic::Code::InvalidArgument,
            Code::DeadlineExceeded => tonic::Code::DeadlineExceeded,
            Code::NotFound => tonic::Code::NotFound,
            Code::AlreadyExists => tonic::Code::AlreadyExists,
            Code::PermissionDenied => tonic::Code::PermissionDenied,
            Code::ResourceExhausted => tonic::Code::ResourceExhausted,
            Code::FailedPrecondition => tonic::Code::FailedPrecondition,
            Code::Aborted => tonic::Code::Aborted,
            Code::OutOfRange => tonic::Code::OutOfRange,
            Code::Unimplemented => tonic::Code::Unimplemented,
            Code::Internal => tonic::Code::Internal,
            Code::Unavailable => tonic::Code::Unavailable,
            Code::DataLoss => tonic::Code::DataLoss,
            Code::Unauthenticated => tonic::Code::Unauthenticated,
        }
    }
}

impl From<tonic::Code> for Code {
    /// The code of the same number and meaning (`Code::from(tonic_code)`).
    fn from(code: tonic::Code) -> Code {
        match code {
            tonic::Code::Ok => Code::Ok,
            tonic::Code::Cancelled => Code::Cancelled,
            tonic::Code::Unknown => Code::Unknown,
            tonic::Code::InvalidArgument => Code::InvalidArgument,
            tonic::Code::DeadlineExceeded => Code::DeadlineExceeded,
            tonic::Code::NotFound => Code::NotFound,
            tonic::Code::AlreadyExists => Code::AlreadyExists,
            tonic::Code::PermissionDenied => Code::PermissionDenied,
            tonic::Code::ResourceExhausted => Code::ResourceExhausted,
            tonic::Code::FailedPrecondition => Code::FailedPrecondition,
            tonic::Code::Aborted => Code::Aborted,
            tonic::Code::OutOfRange => Code::OutOfRange,
            tonic::Code::Unimplemented => Code::Unimplemented,
            tonic::Code::Internal => Code::Internal,
            tonic::Code::Unavailable => Code::Unavailable,
            tonic::Code::DataLoss => Code::DataLoss,
            tonic::Code::Unauthenticated => Code::Unauthenticated,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ALL_CODES;

    #[test]
    fn every_code_converts_both_ways_with_its_number() {
        for code in ALL_CODES {
            let theirs = tonic::Code::from(code);
            assert_eq!(i32::from(theirs), code.as_i32(), "{code}");
            assert_eq!(Code::from(theirs), code, "{code}");
        }
        // And every tonic code (by number, tonic's own table) comes back as ours of that number.
        for n in 0..=16 {
            let theirs = tonic::Code::from_i32(n);
            assert_eq!(Code::from(theirs), Code::from_i32(n).expect("0..=16"));
        }
    }

    #[test]
    fn an_unknown_tonic_code_is_unknown() {
        // tonic reads a number outside 0..=16 (from a peer, or `tonic::Code::from(i32)`) as Unknown.
        for n in [17, 99, -1, i32::MAX] {
            assert_eq!(Code::from(tonic::Code::from(n)), Code::Unknown, "{n}");
        }
        assert_eq!(
            Code::from(tonic::Code::from_bytes(b"42")),
            Code::Unknown,
            "a grpc-status header tonic could not read"
        );
    }
}
