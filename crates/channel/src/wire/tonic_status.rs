//! [`Status`] ↔ `tonic::Status` (feature `tonic`), so a tonic handler that calls through this channel can
//! forward a failure with `?`, and a status made by tonic can stand for this crate's. The code conversions
//! themselves are `grpc-code`'s (its `tonic` feature, which this crate's turns on): the orphan rule lets
//! only the crate that defines `Code` convert it to tonic's.
//!
//! What crosses, both ways:
//! * the code (one-to-one: the same 17 codes; tonic reads numbers outside 0..=16 as `Unknown`);
//! * the message, as is (both hold it percent-decoded; towards tonic within a bound, below);
//! * the metadata: this crate's [`Status::metadata`] is the call's trailers (or the Trailers-Only response
//!   headers), and [`Status::response_headers`] the response headers of a call that failed after them;
//!   tonic's `Status::metadata` is one map, which a tonic server sends as the trailers. Towards tonic the
//!   two are merged as tonic's own client merges a failed call's headers into its status
//!   (`Grpc::client_streaming`: `status.metadata_mut().merge(headers)`, an `HeaderMap::extend`, so a key
//!   in both keeps the headers' values), and `grpc-*` keys are left out (`grpc-previous-rpc-attempts`,
//!   which this channel adds after retries, describes this client's call, not the one a tonic server
//!   answers). From tonic, the map becomes [`Status::metadata`]; entries this crate's [`MetadataMap`]
//!   could not hold are left out: `grpc-*` keys, the headers the channel sets (`content-type`,
//!   `user-agent`, `te`...), ASCII values outside printable ASCII, and `-bin` parts that are not base64
//!   (a `-bin` value holding comma-joined values is split, and each part trimmed and decoded, as values
//!   off the wire are read);
//! * the bounds: towards tonic, what a peer sent is bounded so that a tonic server can send it and its
//!   caller accept it (the message, the details and the metadata within `Status::TONIC_*` budgets, about
//!   11 KiB in all once tonic has percent-encoded the message; see `From<Status> for tonic::Status`);
//! * `grpc-status-details-bin`: [`Status::details_bin`] ↔ tonic's `details` (empty there is none here);
//! * the source error: towards tonic, the same `Arc` (the h2, I/O or TLS error stays reachable through
//!   `source()` and `downcast_ref`); from tonic, whose `Status` lends its source only by reference, the
//!   tonic status itself becomes the source when it had one, so its own source is one `source()` further.
//!
//! Not here: the conversion of codes (`grpc-code`), requests and responses (a handler moves the message:
//! `tonic::Response::new(reply.into_inner())`).

use std::sync::Arc;

use bytes::Bytes;

use crate::wire::metadata::{decode_bin, MetadataMap};
use crate::wire::status::{Code, Status};

impl Status {
    /// The most bytes of the message `From<Status> for tonic::Status` hands on, counted as tonic's server sends `grpc-message`: percent-encoded with a wider set than
    /// gRPC's (space, `"`, `#`, `%`, `<`, `>`, `` ` ``, `?`, `{`, `}`, controls and every non-ASCII byte
    /// take 3 bytes). A longer message is cut at a character boundary and ends with
    /// [`Status::TONIC_TRUNCATED_MARKER`], within this many bytes.
    pub const TONIC_MESSAGE_MAX_BYTES: usize = 4096;

    /// What ends a message cut to [`Status::TONIC_MESSAGE_MAX_BYTES`] (nothing in it is percent-encoded).
    pub const TONIC_TRUNCATED_MARKER: &'static str = "...[truncated]";

    /// The largest `grpc-status-details-bin` (decoded bytes) handed on as tonic's `details`; larger details
    /// are left out whole (a cut `google.rpc.Status` would not decode). 2 KiB is about 2.7 KiB of base64
    /// on the wire.
    pub const TONIC_DETAILS_MAX_BYTES: usize = 2048;

    /// The most metadata bytes handed on, counted as an HTTP/2 header list counts them (RFC 7541 §4.1:
    /// name, value as sent, and 32 bytes per entry). Entries go in order (the trailers, then the keys only
    /// the response headers had) until the next one would pass this budget or
    /// [`Status::TONIC_METADATA_MAX_ENTRIES`]; it and the rest are left out.
    pub const TONIC_METADATA_MAX_BYTES: usize = 4096;

    /// The most metadata entries (values) handed on; see [`Status::TONIC_METADATA_MAX_BYTES`].
    pub const TONIC_METADATA_MAX_ENTRIES: usize = 64;
}

/// The bytes of `c` as tonic's server percent-encodes `grpc-message` (its `ENCODING_SET`: controls,
/// non-ASCII, and `` "#%<>`?{}`` and space).
fn tonic_encoded_len(c: char) -> usize {
    match c {
        ' ' | '"' | '#' | '%' | '<' | '>' | '`' | '?' | '{' | '}' => 3,
        c if c.is_ascii_control() => 3,
        c => 3 * c.len_utf8() - 2 * usize::from(c.is_ascii()),
    }
}

/// `message` within [`Status::TONIC_MESSAGE_MAX_BYTES`] once tonic has percent-encoded it: whole when it
/// fits, else its longest prefix (at a character boundary) that fits with the marker after it.
fn bounded_message(message: &str) -> std::borrow::Cow<'_, str> {
    let encoded: usize = message.chars().map(tonic_encoded_len).sum();
    if encoded <= Status::TONIC_MESSAGE_MAX_BYTES {
        return message.into();
    }
    let room = Status::TONIC_MESSAGE_MAX_BYTES - Status::TONIC_TRUNCATED_MARKER.len();
    let mut used = 0;
    let mut end = 0;
    for (at, c) in message.char_indices() {
        used += tonic_encoded_len(c);
        if used > room {
            break;
        }
        end = at + c.len_utf8();
    }
    format!("{}{}", &message[..end], Status::TONIC_TRUNCATED_MARKER).into()
}

/// The metadata handed to tonic: the trailers merged with the response headers as tonic's client merges
/// them into a failed call's status (`HeaderMap::extend`: a key in both keeps the headers' values), `grpc-*`
/// keys left out, then the entries in order within [`Status::TONIC_METADATA_MAX_BYTES`] and
/// [`Status::TONIC_METADATA_MAX_ENTRIES`].
fn bounded_metadata(status: &Status) -> http::HeaderMap {
    let mut merged = status.metadata().clone().into_headers();
    if !status.response_headers().is_empty() {
        merged.extend(status.response_headers().clone().into_headers());
    }
    let mut out = http::HeaderMap::new();
    let (mut bytes, mut entries) = (0, 0);
    for (name, value) in &merged {
        if name.as_str().starts_with("grpc-") {
            continue;
        }
        let size = name.as_str().len() + value.len() + 32;
        if entries + 1 > Status::TONIC_METADATA_MAX_ENTRIES
            || bytes + size > Status::TONIC_METADATA_MAX_BYTES
        {
            break;
        }
        bytes += size;
        entries += 1;
        out.append(name.clone(), value.clone());
    }
    out
}

impl From<Status> for tonic::Status {
    /// The same failure as tonic holds it: code, message, metadata (the trailers and, for a call that
    /// failed after response headers, those headers, merged as tonic's own client merges them: a key in
    /// both keeps the headers' values; `grpc-*` keys left out), `grpc-status-details-bin` as tonic's
    /// `details`, and the source error. This is what makes `?` work on this channel's results in a tonic
    /// handler (`Result<_, tonic::Status>`).
    ///
    /// A peer decides how much a status holds, and tonic's server sends what it is given (the message
    /// percent-encoded, up to about twice as long for JSON-shaped text, three times for non-ASCII), so
    /// the conversion keeps the forwarded header block well under the 16 KiB header list that gRPC
    /// clients accept by default (about 11 KiB at most): the message within
    /// [`Status::TONIC_MESSAGE_MAX_BYTES`] (cut with [`Status::TONIC_TRUNCATED_MARKER`]), the details when
    /// within [`Status::TONIC_DETAILS_MAX_BYTES`], the metadata entries in order until
    /// [`Status::TONIC_METADATA_MAX_BYTES`] or [`Status::TONIC_METADATA_MAX_ENTRIES`] is reached. The code
    /// always crosses.
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
        let details = status
            .details_bin()
            .filter(|d| d.len() <= Status::TONIC_DETAILS_MAX_BYTES)
            .cloned()
            .unwrap_or_default();
        let mut converted = tonic::Status::with_details_and_metadata(
            tonic::Code::from(status.code()),
            bounded_message(status.message()),
            details,
            tonic::metadata::MetadataMap::from_headers(bounded_metadata(&status)),
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
                tonic::metadata::KeyAndValueRef::Binary(key, value) => {
                    // As values off the wire are read: comma-joined values split, each trimmed and
                    // decoded padded or not; a part that is not base64 is left out.
                    for part in value.as_encoded_bytes().split(|b| *b == b',') {
                        if let Ok(value) = decode_bin(part) {
                            let _refused = metadata.append_bin(key.as_str(), &value);
                        }
                    }
                    continue;
                }
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

    /// Every code, 0 to 16.
    fn all_codes() -> impl Iterator<Item = Code> {
        (0..=16).map(|n| Code::from_i32(n).expect("a code"))
    }

    #[test]
    fn every_code_crosses_both_ways_in_a_status() {
        for code in all_codes() {
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

    /// The header list size (RFC 7541 §4.1) of the block tonic's server sends for `status`.
    fn sent_size(status: &tonic::Status) -> usize {
        let mut block = http::HeaderMap::new();
        status.add_header(&mut block).expect("tonic can send it");
        block
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len() + 32)
            .sum()
    }

    fn encoded(message: &str) -> usize {
        message.chars().map(tonic_encoded_len).sum()
    }

    #[test]
    fn a_message_at_the_bound_crosses_whole_and_one_byte_more_is_cut_with_the_marker() {
        let max = Status::TONIC_MESSAGE_MAX_BYTES;
        let at = "a".repeat(max);
        let theirs = tonic::Status::from(Status::new(Code::Internal, at.clone()));
        assert_eq!(theirs.message(), at);

        let over = "a".repeat(max + 1);
        let theirs = tonic::Status::from(Status::new(Code::Internal, over.clone()));
        let cut = theirs
            .message()
            .strip_suffix(Status::TONIC_TRUNCATED_MARKER)
            .expect("the marker");
        assert_eq!(cut.len(), max - Status::TONIC_TRUNCATED_MARKER.len());
        assert!(over.starts_with(cut));
        assert_eq!(encoded(theirs.message()), max);
    }

    #[test]
    fn the_message_bound_counts_tonics_percent_encoding_and_cuts_at_a_char_boundary() {
        // Spaces take 3 bytes each once tonic has encoded them.
        let spaces = " ".repeat(Status::TONIC_MESSAGE_MAX_BYTES / 3 + 1);
        let theirs = tonic::Status::from(Status::new(Code::Internal, spaces));
        assert!(encoded(theirs.message()) <= Status::TONIC_MESSAGE_MAX_BYTES);
        assert!(theirs.message().ends_with(Status::TONIC_TRUNCATED_MARKER));
        // `é` is 2 bytes, 6 once encoded: the cut never splits it.
        let accents = "é".repeat(Status::TONIC_MESSAGE_MAX_BYTES);
        let theirs = tonic::Status::from(Status::new(Code::Internal, accents));
        let cut = theirs
            .message()
            .strip_suffix(Status::TONIC_TRUNCATED_MARKER)
            .expect("the marker");
        assert!(cut.chars().all(|c| c == 'é'));
        assert!(encoded(theirs.message()) <= Status::TONIC_MESSAGE_MAX_BYTES);
        assert!(encoded(theirs.message()) > Status::TONIC_MESSAGE_MAX_BYTES - 6);
    }

    #[test]
    fn details_within_the_bound_cross_and_larger_ones_are_left_out() {
        let max = Status::TONIC_DETAILS_MAX_BYTES;
        let at = Bytes::from(vec![7; max]);
        let theirs = tonic::Status::from(
            Status::new(Code::Internal, "d").with_details_bin(Some(at.clone())),
        );
        assert_eq!(theirs.details(), &at[..]);
        let over = Bytes::from(vec![7; max + 1]);
        let theirs =
            tonic::Status::from(Status::new(Code::Internal, "d").with_details_bin(Some(over)));
        assert!(theirs.details().is_empty());
        assert_eq!(theirs.code(), tonic::Code::Internal);
    }

    #[test]
    fn metadata_entries_cross_in_order_up_to_the_entry_count() {
        let mut md = MetadataMap::new();
        for i in 0..Status::TONIC_METADATA_MAX_ENTRIES + 1 {
            md.append("x-n", &i.to_string()).expect("valid");
        }
        let theirs = tonic::Status::from(Status::new(Code::Internal, "m").with_metadata(md));
        let values: Vec<String> = theirs
            .metadata()
            .get_all("x-n")
            .iter()
            .map(|v| v.to_str().expect("ascii").to_owned())
            .collect();
        let want: Vec<String> = (0..Status::TONIC_METADATA_MAX_ENTRIES)
            .map(|i| i.to_string())
            .collect();
        assert_eq!(values, want);
    }

    #[test]
    fn metadata_entries_cross_up_to_the_byte_budget() {
        // Entries of 128 bytes as a header list counts them: "x-k" (3) + 93 value bytes + 32.
        let value = "v".repeat(93);
        let fits = Status::TONIC_METADATA_MAX_BYTES / 128;
        let with = |extra: usize| {
            let mut md = MetadataMap::new();
            for _ in 0..fits {
                md.append("x-k", &value).expect("valid");
            }
            md.append("x-last", &"w".repeat(extra)).expect("valid");
            tonic::Status::from(Status::new(Code::Internal, "m").with_metadata(md))
        };
        assert_eq!(fits * 128, Status::TONIC_METADATA_MAX_BYTES);
        // The budget is used up: the next entry, however small, is left out.
        let theirs = with(0);
        assert_eq!(theirs.metadata().len(), fits);
        assert!(!theirs.metadata().contains_key("x-last"));
    }

    #[test]
    fn the_worst_case_tonic_sends_stays_well_under_16_kib() {
        let mut md = MetadataMap::new();
        for _ in 0..10_000 {
            md.append("x-big", &"{".repeat(1000)).expect("valid");
            md.append("x-small", "v").expect("valid");
        }
        let message = "{\"é\": \"?\"} ".repeat(10_000);
        let ours = Status::new(Code::FailedPrecondition, message)
            .with_metadata(md.clone())
            .with_response_headers(md)
            .with_details_bin(Some(Bytes::from(vec![
                0xff;
                Status::TONIC_DETAILS_MAX_BYTES
            ])));
        let theirs = tonic::Status::from(ours);
        assert_eq!(theirs.code(), tonic::Code::FailedPrecondition);
        let size = sent_size(&theirs);
        assert!(size <= 11 * 1024 + 512, "{size} bytes");
    }

    #[test]
    fn response_headers_merge_with_the_trailers_as_tonics_client_merges_them() {
        let mut trailers = MetadataMap::new();
        trailers.append("x-a", "1").expect("valid");
        trailers.append("x-b", "trailer").expect("valid");
        trailers.set_previous_rpc_attempts(1);
        let mut headers = MetadataMap::new();
        headers.append("x-b", "header").expect("valid");
        headers.append("x-b", "header2").expect("valid");
        headers.append("x-c", "3").expect("valid");
        let ours = Status::new(Code::Aborted, "m")
            .with_metadata(trailers)
            .with_response_headers(headers);
        assert_eq!(ours.response_headers().get("x-c"), Some("3"));
        assert_eq!(
            ours.metadata().get("x-c"),
            None,
            "metadata() is the trailers"
        );

        // What tonic's client does: the trailers' status metadata, then `merge` (HeaderMap::extend).
        let theirs = tonic::Status::from(ours);
        let all = |k: &str| -> Vec<String> {
            theirs
                .metadata()
                .get_all(k)
                .iter()
                .map(|v| v.to_str().expect("ascii").to_owned())
                .collect()
        };
        assert_eq!(all("x-a"), ["1"]);
        assert_eq!(all("x-b"), ["header", "header2"]);
        assert_eq!(all("x-c"), ["3"]);
        assert!(!theirs.metadata().contains_key("grpc-previous-rpc-attempts"));
    }

    #[test]
    fn comma_joined_and_padded_bin_values_from_tonic_are_split_and_decoded() {
        let mut block = http::HeaderMap::new();
        block.append("x-trace-bin", http::HeaderValue::from_static("AQ,Ag"));
        block.append("x-pad-bin", http::HeaderValue::from_static(" AQ== , Ag "));
        block.append("x-bad-bin", http::HeaderValue::from_static("AQ,!!"));
        let theirs = tonic::Status::with_metadata(
            tonic::Code::NotFound,
            "m",
            tonic::metadata::MetadataMap::from_headers(block),
        );
        let ours = Status::from(theirs);
        let one_two = [Bytes::from_static(&[1]), Bytes::from_static(&[2])];
        assert_eq!(
            ours.metadata().get_bin_all("x-trace-bin").expect("base64"),
            one_two
        );
        assert_eq!(
            ours.metadata().get_bin_all("x-pad-bin").expect("base64"),
            one_two
        );
        assert_eq!(
            ours.metadata().get_bin_all("x-bad-bin").expect("base64"),
            [Bytes::from_static(&[1])],
            "a part that is not base64 is left out"
        );
    }
}
