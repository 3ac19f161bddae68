//! [`Status`] ↔ `tonic::Status` (feature `tonic`), so a tonic handler that calls through this channel can
//! forward a failure with `?`, and a status made by tonic can stand for this crate's. The code conversions
//! themselves are `grpc-code`'s (its `tonic` feature, which this crate's turns on): the orphan rule lets
//! only the crate that defines `Code` convert it to tonic's.
//!
//! What crosses, both ways:
//! * the code (one-to-one: the same 17 codes; tonic reads numbers outside 0..=16 as `Unknown`);
//! * the message, as is (both hold it percent-decoded);
//! * the metadata: this crate's [`Status::metadata`] is the call's trailers (or the Trailers-Only response
//!   headers); tonic's `Status::metadata` is one map too, which a tonic server sends as the trailers. The
//!   response headers of a call that then failed are not in either direction's map: tonic's own client
//!   adds them to a failed unary call's status (a key in both keeps the header's values), this crate
//!   leaves them out of the status as grpc-go and grpc-java do (a streaming call keeps them:
//!   [`Streaming::metadata`](crate::Streaming::metadata)), so a handler that forwards with `?` forwards the
//!   backend's trailers. Entries this crate's
//!   [`MetadataMap`] could not hold are left out of a converted tonic status: `grpc-*` keys, the headers
//!   the channel sets (`content-type`, `user-agent`, `te`...), ASCII values outside printable ASCII, and
//!   `-bin` values that are not base64. Towards tonic, `grpc-*` keys are left out
//!   (`grpc-previous-rpc-attempts`, which this channel adds after retries, describes this client's call,
//!   not the one a tonic server answers);
//! * `grpc-status-details-bin`: [`Status::details_bin`] ↔ tonic's `details` (empty there is none here);
//! * the source error: towards tonic, the same `Arc` (the h2, I/O or TLS error stays reachable through
//!   `source()` and `downcast_ref`); from tonic, whose `Status` lends its source only by reference, the
//!   tonic status itself becomes the source when it had one, so its own source is one `source()` further.
//!
//! Not here: the conversion of codes (`grpc-code`), requests and responses (a handler moves the message:
//! `tonic::Response::new(reply.into_inner())`).

use std::sync::Arc;

use bytes::Bytes;

use crate::wire::metadata::MetadataMap;
use crate::wire::status::{Code, Status};

impl From<Status> for tonic::Status {
    /// The same failure as tonic holds it: code, message, metadata (the trailers; `grpc-*` keys left out),
    /// `grpc-status-details-bin` as tonic's `details`, and the source error. This is what makes `?` work on
    /// this channel's results in a tonic handler (`Result<_, tonic::Status>`); see the `tonic_status` module
    /// notes in the crate's source for what crosses and what does not.
    ///
    /// ```
    /// use grpc_channel::{Code, Status};
    ///
    /// fn handler(backend: Result<u32, Status>) -> Result<u32, tonic::Status> {
    ///     let n = backend?; // a grpc_channel::Status becomes a tonic::Status
    ///     Ok(n + 1)
    /// }
    /// let err = handler(Err(Status::new(Code::NotFound, "no such key"))).unwrap_err();
    /// assert_eq!(err.code(), tonic::Code::NotFound);
    /// assert_eq!(err.message(), "no such key");
    /// ```
    fn from(status: Status) -> tonic::Status {
        let mut headers = status.metadata().clone().into_headers();
        let protocol: Vec<http::HeaderName> = headers
            .keys()
            .filter(|k| k.as_str().starts_with("grpc-"))
            .cloned()
            .collect();
        for key in protocol {
            headers.remove(key);
        }
        let details = status.details_bin().cloned().unwrap_or_default();
        let mut converted = tonic::Status::with_details_and_metadata(
            tonic::Code::from(status.code()),
            status.message(),
            details,
            tonic::metadata::MetadataMap::from_headers(headers),
        );
        if let Some(source) = status.source_arc() {
            converted.set_source(Arc::clone(source));
        }
        converted
    }
}

impl From<tonic::Status> for Status {
    /// The same failure as this crate holds it: code, message, metadata (what [`MetadataMap`] can hold),
    /// tonic's `details` as `grpc-status-details-bin`, and, when the tonic status had a source error, the
    /// tonic status as the source (its source one `source()` further).
    ///
    /// ```
    /// use grpc_channel::{Code, Status};
    ///
    /// let mut theirs = tonic::Status::unavailable("draining");
    /// theirs.metadata_mut().insert("x-shard", "7".parse().unwrap());
    /// let ours = Status::from(theirs);
    /// assert_eq!(ours.code(), Code::Unavailable);
    /// assert_eq!(ours.metadata().get("x-shard"), Some("7"));
    /// ```
    fn from(status: tonic::Status) -> Status {
        let mut metadata = MetadataMap::new();
        for entry in status.metadata().iter() {
            // An entry MetadataMap refuses (a reserved key, a value it could not send) is left out.
            let _refused = match entry {
                tonic::metadata::KeyAndValueRef::Ascii(key, value) => match value.to_str() {
                    Ok(value) => metadata.append(key.as_str(), value),
                    Err(_) => continue,
                },
                tonic::metadata::KeyAndValueRef::Binary(key, value) => match value.to_bytes() {
                    Ok(value) => metadata.append_bin(key.as_str(), &value),
                    Err(_) => continue,
                },
            };
        }
        let details =
            (!status.details().is_empty()).then(|| Bytes::copy_from_slice(status.details()));
        let mut converted = Status::new(Code::from(status.code()), status.message())
            .with_metadata(metadata)
            .with_details_bin(details);
        if std::error::Error::source(&status).is_some() {
            converted = converted.with_source(status);
        }
        converted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorDetails;
    use std::error::Error as _;
    use std::time::Duration;

    const ALL: [Code; 17] = [
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

    #[test]
    fn every_code_crosses_both_ways_in_a_status() {
        for code in ALL {
            let theirs = tonic::Status::from(Status::new(code, "m"));
            assert_eq!(i32::from(theirs.code()), code.as_i32(), "{code}");
            assert_eq!(tonic::Code::from(code), theirs.code());
            let back = Status::from(theirs);
            assert_eq!(back.code(), code);
            assert_eq!(back.message(), "m");
        }
    }

    #[test]
    fn an_unknown_tonic_code_is_unknown() {
        let theirs = tonic::Status::new(tonic::Code::from(42), "from the future");
        let ours = Status::from(theirs);
        assert_eq!(ours.code(), Code::Unknown);
        assert_eq!(ours.message(), "from the future");
    }

    fn with_trailers() -> Status {
        let mut trailers = MetadataMap::new();
        trailers.append("x-reason", "quota").expect("valid");
        trailers.append("x-reason", "again").expect("valid");
        trailers
            .append_bin("x-blob-bin", &[0, 1, 2, 255])
            .expect("valid");
        trailers.set_previous_rpc_attempts(2);
        Status::with_details(
            Code::ResourceExhausted,
            "slow down: 50% over",
            ErrorDetails::new().with_retry_delay(Duration::from_secs(3)),
        )
        .with_metadata(trailers)
    }

    #[test]
    fn ours_to_tonic_keeps_message_metadata_and_details() {
        let ours = with_trailers();
        let theirs = tonic::Status::from(ours.clone());
        assert_eq!(theirs.code(), tonic::Code::ResourceExhausted);
        assert_eq!(theirs.message(), "slow down: 50% over");
        let values: Vec<&str> = theirs
            .metadata()
            .get_all("x-reason")
            .iter()
            .map(|v| v.to_str().expect("ascii"))
            .collect();
        assert_eq!(values, ["quota", "again"]);
        let blob = theirs
            .metadata()
            .get_bin("x-blob-bin")
            .expect("present")
            .to_bytes()
            .expect("base64");
        assert_eq!(&blob[..], &[0, 1, 2, 255]);
        assert!(
            !theirs.metadata().contains_key("grpc-previous-rpc-attempts"),
            "grpc-* keys stay on this side"
        );
        assert_eq!(theirs.details(), &ours.details_bin().expect("details")[..]);
    }

    #[test]
    fn tonic_to_ours_keeps_message_metadata_and_details() {
        let mut md = tonic::metadata::MetadataMap::new();
        md.insert("x-reason", "quota".parse().expect("ascii"));
        md.insert_bin(
            "x-blob-bin",
            tonic::metadata::MetadataValue::from_bytes(&[9, 8, 7]),
        );
        // What tonic's client puts in a status made from response headers: not metadata here.
        md.insert("content-type", "application/grpc".parse().expect("ascii"));
        md.insert("grpc-accept-encoding", "gzip".parse().expect("ascii"));
        let details = Bytes::from_static(b"\x08\x05\x12\x01x");
        let theirs = tonic::Status::with_details_and_metadata(
            tonic::Code::NotFound,
            "no such key",
            details.clone(),
            md,
        );
        let ours = Status::from(theirs);
        assert_eq!(ours.code(), Code::NotFound);
        assert_eq!(ours.message(), "no such key");
        assert_eq!(ours.metadata().get("x-reason"), Some("quota"));
        let blob = ours
            .metadata()
            .get_bin("x-blob-bin")
            .expect("present")
            .expect("base64");
        assert_eq!(&blob[..], &[9, 8, 7]);
        assert_eq!(ours.metadata().len(), 2, "{:?}", ours.metadata());
        assert_eq!(ours.details_bin(), Some(&details));
        assert!(ours.source().is_none());
    }

    #[test]
    fn no_details_stay_none() {
        let theirs = tonic::Status::from(Status::new(Code::Internal, ""));
        assert!(theirs.details().is_empty());
        assert!(theirs.metadata().is_empty());
        assert_eq!(Status::from(theirs).details_bin(), None);
    }

    #[test]
    fn a_round_trip_keeps_everything_that_crosses() {
        let ours = with_trailers();
        let back = Status::from(tonic::Status::from(ours.clone()));
        assert_eq!(back.code(), ours.code());
        assert_eq!(back.message(), ours.message());
        assert_eq!(back.details_bin(), ours.details_bin());
        let details = back.details().expect("decodes").expect("present");
        let delay = details
            .retry_info
            .and_then(|r| r.retry_delay)
            .and_then(|d| d.to_duration());
        assert_eq!(delay, Some(Duration::from_secs(3)));
        assert_eq!(back.metadata().get_all("x-reason"), ["quota", "again"]);
        assert_eq!(back.previous_rpc_attempts(), 0, "grpc-* keys do not cross");
    }

    #[test]
    fn the_source_error_survives() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let ours = Status::from_io("connect to 127.0.0.1:1", io);
        let theirs = tonic::Status::from(ours);
        let source = theirs.source().expect("a source");
        let io = source
            .downcast_ref::<std::io::Error>()
            .expect("the same io::Error");
        assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);

        // Back again: the tonic status is the source, and its source the io::Error.
        let back = Status::from(theirs);
        let tonic_status = back
            .source()
            .and_then(|s| s.downcast_ref::<tonic::Status>())
            .expect("the tonic status");
        assert!(tonic_status
            .source()
            .is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some()));
    }
}
