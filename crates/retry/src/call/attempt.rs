//! An attempt: its id and how it ended (the vocabulary the channel reports in; where it failed is
//! `grpc_base::FailurePlace`), and what the state machine keeps about each.

use std::time::Instant;

use grpc_base::FailurePlace;
use grpc_code::Code;

use crate::pushback::Pushback;

/// Identifies one attempt of a call: 0 is the original, then in the order they were started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttemptId(pub u32);

/// How an attempt ended: build it with [`AttemptEnd::status`] or [`AttemptEnd::failure`] (more fields may
/// come).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttemptEnd {
    /// The status code (OK for success).
    pub code: Code,
    /// Where it failed.
    pub place: FailurePlace,
    /// What the trailers said about retrying.
    pub pushback: Pushback,
}

impl AttemptEnd {
    /// The attempt ended with trailers carrying `code` (the server's application answered).
    pub fn status(code: Code, pushback: Pushback) -> AttemptEnd {
        AttemptEnd {
            code,
            place: FailurePlace::Processed,
            pushback,
        }
    }

    /// The attempt failed at `place` with `code`, and no pushback.
    pub fn failure(code: Code, place: FailurePlace) -> AttemptEnd {
        AttemptEnd {
            code,
            place,
            pushback: Pushback::None,
        }
    }
}

/// One attempt, as the state machine tracks it.
#[derive(Clone, Debug)]
pub(super) struct Attempt {
    pub(super) state: AttemptState,
    pub(super) previous_attempts: u32,
    /// Messages handed to the channel for this attempt.
    pub(super) queued: usize,
    /// Messages the channel reported as sent.
    pub(super) sent: usize,
    /// When the per-attempt receive timeout cuts it (until the call commits).
    pub(super) recv_deadline: Option<Instant>,
}

/// Whether an attempt is in flight, and how it stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AttemptState {
    /// In flight: the channel reports about it.
    Live,
    /// It ended, or the state machine cancelled it.
    Over,
    /// The per-attempt receive timeout cut it: the call's status, if it is the last, is local.
    TimedOut,
}

impl Attempt {
    /// A new attempt in flight.
    pub(super) fn new(previous_attempts: u32, recv_deadline: Option<Instant>) -> Attempt {
        Attempt {
            state: AttemptState::Live,
            previous_attempts,
            queued: 0,
            sent: 0,
            recv_deadline,
        }
    }

    pub(super) fn is_live(&self) -> bool {
        self.state == AttemptState::Live
    }

    pub(super) fn timed_out(&self) -> bool {
        self.state == AttemptState::TimedOut
    }
}
