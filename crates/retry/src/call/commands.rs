//! Commands from the application (send, half-close, cancel), and when the call's replay buffer
//! (`buffer.rs`) keeps and releases messages: every message is kept for replay within the per-call and
//! per-channel limits until the committed attempt has sent it; an overflow commits the call (A6 commit
//! point 2).

use std::time::Instant;

use bytes::Bytes;

use super::{Action, LocalReason, NextAttempt, Outcome, Phase, RetryCall};

impl RetryCall {
    /// The application sends a message. Returns `false` if the call has already finished.
    pub fn send_message(&mut self, message: Bytes, now: Instant) -> bool {
        let commit_pending = match self.phase {
            Phase::Finished { .. } => return false,
            Phase::Committed(c) => {
                let index = self.next_index;
                self.next_index += 1;
                self.queue_send(c, index, message);
                return true;
            }
            Phase::BackingOff { next, .. } => next == NextAttempt::Committed,
            Phase::Attempting { .. } => false,
        };
        let index = self.next_index;
        self.next_index += 1;
        if !commit_pending && self.replay.push(&message) {
            for i in 0..self.attempts.len() {
                if let Some(id) = self.live_at(i) {
                    self.queue_send(id, index, message.clone());
                }
            }
            return true;
        }
        // A6 commit point 2: the outgoing messages overflowed the retry buffer.
        self.stats.committed_by_buffer_overflow = true;
        match self.most_advanced_live_attempt() {
            Some(winner) => {
                self.commit(winner, now);
                self.queue_send(winner, index, message);
            }
            None => {
                // No attempt in flight (backing off): keep the message for the next attempt, which is then
                // committed. It is not retry-buffered: it will be sent once.
                if let Phase::BackingOff { next, .. } = &mut self.phase {
                    *next = NextAttempt::Committed;
                }
                self.replay.push_unbuffered(message);
            }
        }
        true
    }

    /// The application half-closes.
    pub fn half_close(&mut self) {
        if self.phase.is_finished() || self.half_closed {
            return;
        }
        self.half_closed = true;
        for i in 0..self.attempts.len() {
            if let Some(id) = self.live_at(i) {
                self.actions.push_back(Action::HalfClose { attempt: id });
            }
        }
    }

    /// The application cancels the call.
    pub fn cancel(&mut self, now: Instant) {
        if !self.phase.is_finished() {
            self.finish(Outcome::Local(LocalReason::Cancelled), now);
        }
    }

    /// Releases the buffered messages the committed attempt has sent: they will never be replayed.
    pub(super) fn release_sent(&mut self) {
        let Phase::Committed(c) = self.phase else {
            return;
        };
        self.replay.release_to(self.attempts[c.0 as usize].sent);
    }

    pub(super) fn release_all(&mut self) {
        self.replay.clear();
    }
}
