//! A proxy's answer to CONNECT (gRFC A1), as `grpc_channel`'s proxy handshake parses it, never panics and
//! is consistent:
//! * a complete answer's header ends within the input, after its blank line, and its status code has three
//!   digits (at most 999);
//! * a prefix of a complete answer is incomplete or the same answer (more bytes never change a complete
//!   header, and a complete header never turns incomplete);
//! * an input without a blank line (`\r\n\r\n` or `\n\n`) is never complete;
//! * a realm, when one is read, is at most 128 characters.
#![no_main]

use grpc_channel::fuzzing::proxy_answer;
use libfuzzer_sys::fuzz_target;

fn has_blank_line(data: &[u8]) -> bool {
    data.windows(4).any(|w| w == b"\r\n\r\n") || data.windows(2).any(|w| w == b"\n\n")
}

fuzz_target!(|data: &[u8]| {
    match proxy_answer(data) {
        Ok(Some(answer)) => {
            assert!(answer.header_len <= data.len());
            assert!(answer.code <= 999, "{}", answer.code);
            assert!(has_blank_line(&data[..answer.header_len]));
            assert!(answer.realm.as_ref().is_none_or(|r| r.chars().count() <= 128));
            // The header alone parses to the same answer.
            let again = proxy_answer(&data[..answer.header_len]);
            assert_eq!(again, Ok(Some(answer)));
        }
        Ok(None) => {}
        Err(_) => {}
    }
    if !has_blank_line(data) {
        assert!(!matches!(proxy_answer(data), Ok(Some(_))));
    }
});
