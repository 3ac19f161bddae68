//! A trailer block becomes a status without panicking, and the status follows the rules: `grpc-status` strict
//! decimal 0..=16 (anything else, or none, UNKNOWN), `grpc-message` percent-decoded, `grpc-status-details-bin`
//! kept when it is base64, the protocol's headers never in the metadata. The header block is built as in
//! `common` (lines of `name:value`).
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let headers = common::header_map(data);
    let (status, metadata) = grpc_channel::fuzzing::trailers(headers.clone());
    common::check_trailers(&headers, &status, &metadata);
});
