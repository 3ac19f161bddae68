//! What the state machine asks of the channel ([`Action`]) and how a call ends ([`Outcome`], [`LocalReason`]).

use bytes::Bytes;
use grpc_base::Address;
use grpc_code::Code;

use super::AttemptId;

/// Why the state machine itself ended a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalReason {
    /// The call's deadline passed: DEADLINE_EXCEEDED.
    DeadlineExceeded,
    /// The application cancelled: CANCELLED.
    Cancelled,
    /// Over the safety cap of transparent retries: INTERNAL.
    TooManyTransparentRetries,
    /// The last attempt was cut by the policy's per-attempt receive timeout (`perAttemptRecvTimeout`) and
    /// not retried: CANCELLED.
    PerAttemptRecvTimeout,
}

impl LocalReason {
    /// The status code.
    pub fn code(self) -> Code {
        match self {
            LocalReason::DeadlineExceeded => Code::DeadlineExceeded,
            LocalReason::Cancelled => Code::Cancelled,
            LocalReason::TooManyTransparentRetries => Code::Internal,
            LocalReason::PerAttemptRecvTimeout => Code::Cancelled,
        }
    }

    /// The status message.
    pub fn message(self) -> &'static str {
        match self {
            LocalReason::DeadlineExceeded => "deadline exceeded",
            LocalReason::Cancelled => "call cancelled by the client",
            LocalReason::TooManyTransparentRetries => {
                "too many transparent retries: the call never left the client; this is likely a bug"
            }
            LocalReason::PerAttemptRecvTimeout => {
                "the attempt got no response within the retry policy's perAttemptRecvTimeout"
            }
        }
    }
}

/// The call's final outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The status of this attempt is the call's status.
    Attempt(AttemptId),
    /// A status made by the state machine.
    Local(LocalReason),
}

/// What the channel must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Pick a subchannel (preferring addresses not in `avoid`) and open a stream for a new attempt.
    StartAttempt {
        /// The new attempt.
        attempt: AttemptId,
        /// The value of `grpc-previous-rpc-attempts` (omit the header when 0).
        previous_attempts: u32,
        /// Whether this is a transparent retry.
        transparent: bool,
        /// Addresses this call already used; hedges and retries should prefer others.
        avoid: Vec<Address>,
    },
    /// Send message `index` of the call on `attempt` (in order; report with `handle_message_sent`).
    SendMessage {
        /// The attempt.
        attempt: AttemptId,
        /// The message's index in the call.
        index: usize,
        /// The message.
        message: Bytes,
    },
    /// Half-close `attempt` after its messages.
    HalfClose {
        /// The attempt.
        attempt: AttemptId,
    },
    /// Cancel `attempt` (RST_STREAM(CANCEL)); report nothing more about it.
    CancelAttempt {
        /// The attempt.
        attempt: AttemptId,
    },
    /// The call is committed to `attempt`: hand its response to the application.
    Commit {
        /// The attempt.
        attempt: AttemptId,
    },
    /// The call is over.
    Finish(Outcome),
}
