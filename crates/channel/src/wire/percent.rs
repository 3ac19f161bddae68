//! The `grpc-message` percent codec (`doc/PROTOCOL-HTTP2.md`, "Status-Message"): the UTF-8 text with every byte
//! outside 0x20..=0x7E, and `%` itself, written as `%XX`. Decoding never fails: a broken escape is kept as it
//! is and invalid UTF-8 becomes U+FFFD, so a status message is never lost.

use std::borrow::Cow;

use percent_encoding::{percent_decode, utf8_percent_encode, AsciiSet, CONTROLS};

/// Control bytes and `%`; non-ASCII bytes are always encoded by `percent_encoding`.
const GRPC_MESSAGE: &AsciiSet = &CONTROLS.add(b'%');

/// Percent-encodes a status message for the `grpc-message` header.
pub fn encode(message: &str) -> Cow<'_, str> {
    utf8_percent_encode(message, GRPC_MESSAGE).into()
}

/// Decodes a `grpc-message` header value. Never fails.
pub fn decode(value: &[u8]) -> String {
    percent_decode(value).decode_utf8_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_exactly_what_the_spec_says() {
        assert_eq!(encode("plain text"), "plain text");
        assert_eq!(encode("100%"), "100%25");
        assert_eq!(encode("\t\n"), "%09%0A");
        assert_eq!(encode("\u{7f}"), "%7F");
        assert_eq!(encode("☺"), "%E2%98%BA");
        assert_eq!(encode("😈"), "%F0%9F%98%88");
    }

    #[test]
    fn round_trips_the_special_status_message() {
        let msg = "\t\ntest with whitespace\r\nand Unicode BMP ☺ and non-BMP 😈\t\n";
        let wire = encode(msg);
        assert!(wire.bytes().all(|b| (0x20..=0x7e).contains(&b)));
        assert_eq!(decode(wire.as_bytes()), msg);
    }

    #[test]
    fn decoding_never_fails() {
        assert_eq!(decode(b"a%20b"), "a b");
        assert_eq!(decode(b"a%2"), "a%2");
        assert_eq!(decode(b"%zz%"), "%zz%");
        assert_eq!(decode(b"%FF ok"), "\u{fffd} ok");
        assert_eq!(decode(b"%e2%98%ba"), "☺");
    }
}
