//! The status of a call whose deadline passed while it waited for a connection (a wait-for-ready call, or
//! one queued while the channel connects) or for name resolution: DEADLINE_EXCEEDED with a message that
//! says what it waited for and quotes the last connection error and its address, or the resolver's error,
//! bounded in length (issue 35; grpc-go's "... while waiting for connections to become ready"). Used by the retry driver and by the receiving half,
//! whichever sees the deadline first.
//!
//! Not here: the deadline itself (`streaming.rs`, and grpc-retry's timer in `driver.rs`), and where the
//! last connection error is kept (the control plane's published state).

use crate::control::ControlPlane;
use crate::wire::status::{Code, Status};

/// The status of a call whose deadline passed while it waited for a connection: it names what it waited
/// for and the last connection error, as grpc-go's "context deadline exceeded while waiting for
/// connections to become ready" does (that error, if any, is also the status's source, and its text is cut
/// to [`MAX_CAUSE_LEN`] bytes).
pub(crate) fn waiting_for_connection(control: &ControlPlane, wait_for_ready: bool) -> Status {
    let what = match wait_for_ready {
        true => "deadline exceeded while waiting for connections to become ready (wait-for-ready)",
        false => "deadline exceeded while waiting for a connection to become ready",
    };
    match control.last_failure() {
        Some((cause, address)) => {
            let to = address.map(|a| format!(" (to {a})")).unwrap_or_default();
            Status::new(
                Code::DeadlineExceeded,
                format!(
                    "{what}; last connection error{}: {}",
                    bounded(&to, MAX_CAUSE_LEN),
                    bounded(cause.message(), MAX_CAUSE_LEN)
                ),
            )
            .with_source(cause)
        }
        None => Status::new(Code::DeadlineExceeded, what),
    }
}

/// The status of a call whose deadline passed while it waited for name resolution: it names what it
/// waited for and, if the resolver's state is a failure, that error (cut to [`MAX_CAUSE_LEN`] bytes, and
/// the status's source), as grpc-go quotes the latest resolver error.
pub(crate) fn waiting_for_resolution(resolver_error: Option<Status>) -> Status {
    let what = "deadline exceeded while waiting for name resolution";
    match resolver_error {
        Some(cause) => Status::new(
            Code::DeadlineExceeded,
            format!(
                "{what}; last resolver error: {}",
                bounded(cause.message(), MAX_CAUSE_LEN)
            ),
        )
        .with_source(cause),
        None => Status::new(Code::DeadlineExceeded, what),
    }
}

/// The most bytes of a connection error's text quoted in a call's DEADLINE_EXCEEDED message (the error
/// comes from a peer, a proxy or the system: its length is not ours to trust).
const MAX_CAUSE_LEN: usize = 256;

/// `text`, cut to at most `max` bytes on a character boundary, with "…" when cut.
fn bounded(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end]).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quoted_connection_error_is_bounded_on_a_character_boundary() {
        assert_eq!(bounded("short", MAX_CAUSE_LEN), "short");
        let long = "é".repeat(MAX_CAUSE_LEN);
        let cut = bounded(&long, MAX_CAUSE_LEN);
        assert!(cut.len() <= MAX_CAUSE_LEN + "…".len(), "{}", cut.len());
        assert!(cut.ends_with('…'));
        let odd = format!("a{long}");
        assert!(bounded(&odd, MAX_CAUSE_LEN).len() <= MAX_CAUSE_LEN + "…".len());
    }
}
