//! What the two halves of a call and its retry driver share: the sending side (the driver's inbox before
//! commit, the committed attempt's stream after), the call's end, and what the driver hands over at commit.
//!
//! A call holds at most [`SEND_AHEAD_LIMIT`] bytes of the application's messages ahead of HTTP/2 flow
//! control, before and after commit: the hand-over keeps the committed attempt's unwritten messages queued
//! for the writer task rather than handing them to h2 whole, so the sender's bound sees them.

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::time::Instant;

use grpc_retry::{AttemptEnd, AttemptId, FailurePlace, Pushback, RetryCall};

use crate::call::attempt::{AttemptResponse, OpenAttempt};
use crate::call::send_stream::{OnError, SendHalf};
use crate::call::telemetry::{AttemptTelemetry, CallTelemetry};
use crate::control::outlier::{AttemptCount, AttemptResult};
use crate::wire::status::{Code, Status};

/// The attempt a call committed to.
pub(crate) struct Committed {
    pub(crate) call: Box<RetryCall>,
    pub(crate) attempt: AttemptId,
    pub(crate) open: OpenAttempt,
    /// How many attempts preceded it (A6's `grpc-previous-rpc-attempts`, for the application).
    pub(crate) previous_attempts: u32,
    /// Its span and metrics, which end with the call.
    pub(crate) telemetry: AttemptTelemetry,
}

/// What both halves of a call share: the sending side (the retry driver before the call commits, the
/// committed attempt's stream after), the call's end, and what the driver hands over at commit.
pub(crate) struct Shared {
    pub(super) side: Side,
    /// The application half-closed (finished or dropped the sender).
    pub(super) half_closed: bool,
    /// Set when the call ended locally (cancel, deadline, malformed response) or the response is complete.
    pub(super) ended: Option<Ended>,
    /// What a driver in a task of its own handed over ([`Shared::hand_over`]) until the receiving half
    /// takes it: the committed attempt's response (boxed: it is here only until that half takes it, and
    /// this state lasts as long as the call), or the call's status when it finished before committing. A
    /// driver in the caller's task hands over to the receiving half directly.
    pub(super) handed: Option<Result<Box<AttemptResponse>, Status>>,
    /// An attempt has opened its stream (the request HEADERS went to h2).
    pub(super) started: bool,
    /// The receiving half, or the caller waiting for the call to start.
    pub(super) receiver: Option<Waker>,
    /// A task pumping an application stream into the call, waiting for the call to end.
    pub(super) end_watcher: Option<Waker>,
    /// The status a failed send ended the call with (e.g. an oversize message), which the receiving half
    /// reports instead of the reset it sees.
    pub(super) sender_failure: Option<Status>,
    /// Counts the call as active for the channel's idle timeout while either half lives.
    _active: Option<crate::control::ActiveCallGuard>,
    /// The call's span and metrics.
    pub(crate) telemetry: CallTelemetry,
    /// An exactly-once call's id: in flight until the call ends (its status is known).
    pub(super) exactly_once: Option<Arc<crate::call::exactly_once::CallId>>,
    /// How many attempts preceded the committed one once the call committed; before, the most any started
    /// attempt had (what a status the client makes reports).
    pub(super) previous_attempts: u32,
    /// Set when an attempt had to wait for its pick (the control plane, and whether the call is
    /// wait-for-ready): a deadline that passes before any attempt opened a stream names what it waited for
    /// (`connection_wait.rs`).
    pub(super) picking: Option<(crate::control::ControlPlane, bool)>,
}

/// How the call ended, for the sending half.
pub(super) enum Ended {
    /// Sending stops with this status.
    With(Status),
    /// The call finished with this status: sending stops with INTERNAL "the call has ended", caused by it
    /// (made only if the application sends again).
    Finished(Status),
}

impl Ended {
    /// The status a send after the end returns.
    pub(super) fn status(&self) -> Status {
        match self {
            Ended::With(status) => status.clone(),
            Ended::Finished(status) => call_has_ended().with_source(status.clone()),
        }
    }
}

/// What a send after the call's end returns when the end was no failure of its own.
pub(super) fn call_has_ended() -> Status {
    Status::new(Code::Internal, "the call has ended")
}

/// Where the application's messages go: the call's sending side through its life cycle.
///
/// ```text
///   Driving ──commit──▶ Committed
///      │
///      └──the driver finishes the call, or commits after the call ended──▶ Finished
/// ```
pub(super) enum Side {
    /// Before commit: the inbox the retry driver takes messages from (in batches), writing them to every
    /// live attempt.
    Driving(Driving),
    /// After commit: the committed attempt's stream, its writer task, and the committed attempt until its
    /// end is reported.
    Committed(CommittedStream),
    /// The driver finished the call without a stream to hand over (the call's status is in
    /// [`Shared::ended`]): nothing more is sent. When the driver committed after the call had ended, the
    /// committed attempt's telemetry ends with the call.
    Finished { attempt: Option<AttemptTelemetry> },
}

/// The most bytes of application messages a call holds that HTTP/2 flow control has not let out yet (a
/// larger message waits until everything before it went, then goes alone): before commit, the retry
/// driver's inbox and the batch the driver took last, until an attempt has written it; after, the committed
/// attempt's send half, which keeps what the attempt had not written at commit, for the writer task. The
/// sender runs ahead of the task that writes by up to this much, so that task takes a batch per wake-up
/// (and packs it into DATA frames) instead of the two tasks handing over one message per task switch.
pub(crate) const SEND_AHEAD_LIMIT: usize = 64 << 10;

/// The driver's side of a call that has not committed yet.
#[derive(Default)]
pub(super) struct Driving {
    /// The messages the application sent, in order, until the driver takes them (everything queued, when
    /// an open attempt has written the previous ones).
    pub(super) queue: VecDeque<Bytes>,
    /// The bytes in `queue`.
    pub(super) queued: usize,
    /// The bytes of the messages the driver took since an open attempt had last written everything it was
    /// given: not let out yet, they count toward [`SEND_AHEAD_LIMIT`] with `queued`.
    pub(super) taken: usize,
    /// The sender, waiting for room in `queue`.
    pub(super) sender: Option<Waker>,
    pub(super) driver: Option<Waker>,
    /// The application cancelled (or the receiving half ended the call) before commit.
    pub(super) cancelled: bool,
    /// An attempt with a stream has written every message the driver took (the driver says so when it
    /// finds nothing more to take while an attempt is caught up). See [`crate::RequestSender`]'s
    /// `flushed`.
    pub(super) written: bool,
    /// A task waiting for the messages sent so far to be written (`RequestSender::flushed`).
    pub(super) flush_waiter: Option<Waker>,
    /// The call's reference to the cluster its route chose (xDS, gRFC A28): the resolver keeps the cluster
    /// while it lives, for every attempt of the call. Released at commit (the committed attempt goes on
    /// over its connection, which a removed cluster lets finish its calls) or when the call ends before.
    pub(super) cluster: Option<crate::control::resolver_state::ClusterHold>,
}

/// The sending side of a committed call.
pub(super) struct CommittedStream {
    /// The committed attempt's send half.
    pub(super) send: SendHalf,
    /// The task writing the queued messages.
    pub(super) writer: Writer,
    /// The sender, waiting for the writer task to make room.
    pub(super) blocked_sender: Option<Waker>,
    /// Why the writer task stopped writing, for the next send. Set, the stream is over at h2 (the server
    /// reset or ended it, or the connection failed): the receiving half reports how, the server's status
    /// when it sent one, and the sending half neither half-closes nor cancels the call.
    pub(super) write_failed: Option<Status>,
    /// The bytes queued in the send half as the channel's
    /// [`unsent_request_bytes`](crate::ChannelStats::unsent_request_bytes) last counted them.
    unsent_counted: usize,
    /// The committed attempt, until its end is reported ([`Shared::report_end`]).
    attempt: Option<CommittedAttempt>,
}

/// What a committed call keeps of its attempt until the attempt's end is reported.
struct CommittedAttempt {
    /// The call's retry state machine, told how the committed attempt ended (throttle).
    call: Box<RetryCall>,
    id: AttemptId,
    /// Where the committed attempt's result counts (outlier detection, the address's stats).
    results: Option<AttemptCount>,
    /// The call's place under its cluster's circuit breaker (xDS, gRFC A32), released when the call ends.
    breaker: Option<grpc_lb::PickGuard>,
    /// The attempt's span and metrics.
    telemetry: AttemptTelemetry,
}

impl CommittedAttempt {
    /// Tells the retry state machine how the committed attempt ended: from the server (a success refills
    /// the throttle, a qualifying failure or a "don't retry" pushback costs a token), or locally (a cancel,
    /// the deadline, a malformed response: nobody's failure, which the throttle never counts).
    fn report(self, status: &Status, end: CommittedEnd, call_telemetry: &mut CallTelemetry) {
        let CommittedAttempt {
            mut call,
            id,
            results,
            breaker,
            mut telemetry,
        } = self;
        drop(breaker);
        if let Some(results) = results {
            results.record(match end {
                CommittedEnd::Local if status.code() == Code::Cancelled => AttemptResult::Cancelled,
                _ => AttemptResult::Ended(status.code()),
            });
        }
        let end = match end {
            CommittedEnd::Remote(pushback) => AttemptEnd::status(status.code(), pushback),
            CommittedEnd::Local => AttemptEnd::failure(status.code(), FailurePlace::Local),
        };
        call.handle_end(id, end, Instant::now().into_std());
        call_telemetry.set_stats(call.stats());
        telemetry.ended(status);
    }
}

impl CommittedStream {
    /// Brings the channel's count of unwritten request bytes up to what the send half holds now. Called
    /// when the call commits, each time the writer task has run (which every send after commit wakes), so
    /// one update covers a batch, and when the stream is over ([`CommittedStream::discard_unsent`]).
    pub(super) fn recount_unsent(&mut self, telemetry: &CallTelemetry) {
        let now = self.send.queued_bytes();
        if now != self.unsent_counted {
            telemetry.unsent_changed(self.unsent_counted, now);
            self.unsent_counted = now;
        }
    }

    /// The stream is over (the call ended, or a write failed): the messages the send half still queues
    /// will never be written, so they are dropped now and the channel stops counting them, even while the
    /// application keeps either half of the call.
    pub(super) fn discard_unsent(&mut self, telemetry: &CallTelemetry) {
        self.send.discard();
        self.recount_unsent(telemetry);
    }

    /// Wakes the sender waiting for the writer task to make room.
    pub(super) fn wake_blocked_sender(&mut self) {
        if let Some(w) = self.blocked_sender.take() {
            w.wake();
        }
    }
}

/// Where a committed call's writer task (`writer.rs`) stands.
#[derive(Default)]
pub(super) enum Writer {
    /// No task yet: the first send after commit spawns it.
    #[default]
    NotStarted,
    /// The task runs, or waits for messages (woken with the waker) or for flow control (woken by h2).
    Running(Option<Waker>),
    /// The task stopped: the call ended, half-closed, or a write failed.
    Stopped,
}

impl Writer {
    /// Wakes the task if it waits for messages.
    pub(super) fn wake(&mut self) {
        if let Writer::Running(waker) = self {
            if let Some(w) = waker.take() {
                w.wake();
            }
        }
    }
}

pub(crate) type SharedRef = Arc<Mutex<Shared>>;

/// What the retry driver may see of the application's side of an uncommitted call.
pub(crate) enum Input {
    /// A message to send.
    Message(Bytes),
    /// The application half-closed after its last message.
    HalfClose,
    /// The call was cancelled.
    Cancel,
}

impl Shared {
    /// The status of the call's deadline, now passed: naming the connection it waited for if no attempt
    /// opened a stream while one waited for its pick, plain "deadline exceeded" otherwise.
    pub(super) fn deadline_status(&self) -> Status {
        match &self.picking {
            Some((control, wait_for_ready)) if !self.started => {
                crate::call::connection_wait::waiting_for_connection(control, *wait_for_ready)
            }
            _ => Status::deadline_passed(),
        }
    }

    /// A call whose attempts the retry driver runs until it commits; routed (xDS), it keeps `cluster`, its
    /// reference to its cluster, until it commits (every attempt of the call goes there).
    pub(crate) fn driving(
        active: Option<crate::control::ActiveCallGuard>,
        cluster: Option<crate::control::resolver_state::ClusterHold>,
        telemetry: CallTelemetry,
    ) -> SharedRef {
        Arc::new(Mutex::new(Shared {
            side: Side::Driving(Driving {
                cluster,
                ..Driving::default()
            }),
            half_closed: false,
            ended: None,
            handed: None,
            started: false,
            receiver: None,
            end_watcher: None,
            sender_failure: None,
            _active: active,
            telemetry,
            exactly_once: None,
            previous_attempts: 0,
            picking: None,
        }))
    }

    /// For the driver: the next application input; a message only if it has at most `budget` bytes (0: no
    /// message now). The whole budget (`usize::MAX`) says an open attempt has written every message taken
    /// so far. Registers the driver's waker otherwise.
    pub(crate) fn poll_input(
        &mut self,
        cx: &Context<'_>,
        budget: usize,
        half_close_sent: bool,
    ) -> Option<Input> {
        let Side::Driving(inbox) = &mut self.side else {
            return None;
        };
        if inbox.cancelled {
            return Some(Input::Cancel);
        }
        if !inbox
            .driver
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            inbox.driver = Some(cx.waker().clone());
        }
        let held = inbox.queued + inbox.taken;
        if budget == usize::MAX {
            inbox.taken = 0;
        }
        let message = match inbox.queue.front() {
            Some(m) if m.len() <= budget => inbox.queue.pop_front(),
            _ => None,
        };
        if let Some(m) = &message {
            inbox.queued -= m.len();
            inbox.taken += m.len();
        }
        // A waiting sender goes on once an attempt's writes have freed half the room, not after every
        // message (taking one frees no room: it is still to be written).
        let now = inbox.queued + inbox.taken;
        if now < held && now <= SEND_AHEAD_LIMIT / 2 {
            if let Some(w) = inbox.sender.take() {
                w.wake();
            }
        }
        if let Some(message) = message {
            inbox.written = false;
            return Some(Input::Message(message));
        }
        let input = (inbox.queue.is_empty() && self.half_closed && !half_close_sent)
            .then_some(Input::HalfClose);
        // The whole budget: an attempt had written everything and nothing more was taken this round.
        if budget == usize::MAX && inbox.queue.is_empty() {
            inbox.written = true;
            if let Some(w) = inbox.flush_waiter.take() {
                w.wake();
            }
        }
        input
    }

    /// For the driver: an attempt opened its stream.
    pub(crate) fn mark_started(&mut self) {
        if !self.started {
            self.started = true;
            if let Some(w) = self.receiver.take() {
                w.wake();
            }
        }
    }

    /// Ready once an attempt has opened its stream, or with the call's status if it ended before any did.
    pub(crate) fn poll_started(&mut self, cx: &Context<'_>) -> Poll<Result<(), Status>> {
        match &self.handed {
            _ if self.started => Poll::Ready(Ok(())),
            Some(Err(status)) => Poll::Ready(Err(status.clone())),
            Some(Ok(_)) => Poll::Ready(Ok(())),
            None => {
                self.receiver = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    /// For a driver in a task of its own: [`Shared::take_over`], what the receiving half takes kept for it
    /// (`call::hand_over` then starts the writer task if needed).
    pub(super) fn hand_over(&mut self, result: Result<Committed, Status>) {
        if let Some(handed) = self.take_over(result) {
            self.handed = Some(handed.map(Box::new));
            if let Some(w) = self.receiver.take() {
                w.wake();
            }
        }
    }

    /// Whether the committed call has messages left to write and no writer task yet (nor an end); if so,
    /// the task counts as running from now (the caller spawns it).
    pub(super) fn claim_writer(&mut self) -> bool {
        match &mut self.side {
            Side::Committed(c)
                if self.ended.is_none()
                    && matches!(c.writer, Writer::NotStarted)
                    && !c.send.caught_up() =>
            {
                c.writer = Writer::Running(None);
                true
            }
            _ => false,
        }
    }

    /// For the driver: the call committed (the attempt's stream, with the messages it had not written and
    /// those the driver had not taken behind them, which the writer task writes under flow control:
    /// `writer::start`), or finished before committing. Returns what the receiving half takes: the
    /// committed attempt's response, or the call's status; `None` if the call was handed over already.
    pub(super) fn take_over(
        &mut self,
        result: Result<Committed, Status>,
    ) -> Option<Result<AttemptResponse, Status>> {
        let inbox = match std::mem::replace(&mut self.side, Side::Finished { attempt: None }) {
            Side::Driving(inbox) => inbox,
            handed_over => {
                self.side = handed_over;
                return None;
            }
        };
        // A28: a call no longer holds its cluster in the config once it committed or finished.
        let Driving {
            queue,
            sender,
            driver,
            flush_waiter,
            cluster,
            ..
        } = inbox;
        drop(cluster);
        for w in [sender, driver, flush_waiter].into_iter().flatten() {
            w.wake();
        }
        match result {
            Ok(committed) => {
                let OpenAttempt {
                    mut send,
                    response,
                    results,
                    breaker,
                    ..
                } = committed.open;
                if let Some(ended) = &self.ended {
                    // The call ended (cancelled, or aborted by its sender) while the driver committed: the
                    // stream is reset, and a receiving half still waiting hears how the call ended.
                    send.reset(h2::Reason::CANCEL);
                    self.side = Side::Finished {
                        attempt: Some(committed.telemetry),
                    };
                    return Some(Err(ended.status()));
                }
                // The messages the driver had not taken yet follow the attempt's own; they stay queued, so
                // the sender's bound counts them all. With nothing to write, a half-close goes at once
                // (errors reappear on the response side).
                for message in queue {
                    send.push(0, message);
                }
                if self.half_closed {
                    send.close_after_queue();
                }
                if send.caught_up() {
                    send.flush_all(OnError::Drop);
                }
                self.half_closed |= send.half_closed();
                let mut stream = CommittedStream {
                    send,
                    writer: Writer::NotStarted,
                    blocked_sender: None,
                    write_failed: None,
                    unsent_counted: 0,
                    attempt: Some(CommittedAttempt {
                        call: committed.call,
                        id: committed.attempt,
                        results,
                        breaker,
                        telemetry: committed.telemetry,
                    }),
                };
                stream.recount_unsent(&self.telemetry);
                self.side = Side::Committed(stream);
                self.previous_attempts = committed.previous_attempts;
                Some(Ok(response))
            }
            Err(status) => {
                self.previous_attempts = status.previous_rpc_attempts();
                if self.ended.is_none() {
                    // Sending stops with the call's status, or a plain "ended" when that is OK.
                    self.ended = Some(if status.code() == Code::Ok {
                        Ended::Finished(status.clone())
                    } else {
                        Ended::With(status.clone())
                    });
                    self.wake_end_watcher();
                }
                Some(Err(status))
            }
        }
    }

    /// For the driver: an attempt with `previous_attempts` before it started.
    pub(crate) fn attempt_started(&mut self, previous_attempts: u32) {
        self.previous_attempts = self.previous_attempts.max(previous_attempts);
    }

    /// Cancels the call (the application gave up before it had both halves).
    pub(crate) fn cancel(&mut self) {
        self.end(&Status::cancelled_by_client(), h2::Reason::CANCEL);
    }

    /// The one local end of a call (a cancel, the deadline, a malformed response, a dropped receiving
    /// half): the stream is reset with CANCEL (or the driver cancels the attempts), the committed attempt's
    /// end is reported as nobody's failure, and the call's telemetry and exactly-once id finish with
    /// `status`.
    pub(crate) fn end_locally(&mut self, status: &Status) {
        self.end(status, h2::Reason::CANCEL);
        self.report_end(status, CommittedEnd::Local);
        self.telemetry.finish(status);
        self.exactly_once = None;
    }

    /// Ends the call locally with `status`, resetting the stream with `reason` (or cancelling the driver).
    pub(super) fn end(&mut self, status: &Status, reason: h2::Reason) {
        if self.ended.is_none() {
            self.ended = Some(Ended::With(status.clone()));
            self.wake_end_watcher();
            match &mut self.side {
                Side::Committed(c) => c.send.reset(reason),
                Side::Driving(inbox) => {
                    inbox.cancelled = true;
                    if let Some(w) = inbox.driver.take() {
                        w.wake();
                    }
                }
                Side::Finished { .. } => {}
            }
            self.discard_unsent();
        }
    }

    /// The committed call's stream is over (the call ended): see [`CommittedStream::discard_unsent`].
    pub(super) fn discard_unsent(&mut self) {
        if let Side::Committed(c) = &mut self.side {
            c.discard_unsent(&self.telemetry);
        }
    }

    /// Why the committed call's writer task stopped writing, if a write failed (see
    /// [`CommittedStream::write_failed`]).
    pub(super) fn write_failed(&self) -> Option<&Status> {
        match &self.side {
            Side::Committed(c) => c.write_failed.as_ref(),
            Side::Driving(_) | Side::Finished { .. } => None,
        }
    }

    /// Keeps an exactly-once call's id (counted in flight) until the call ends.
    pub(crate) fn keep_exactly_once(&mut self, id: Arc<crate::call::exactly_once::CallId>) {
        self.exactly_once = Some(id);
    }

    /// The call ended: wakes the task feeding the sender, a task waiting for a flush, the writer task and a
    /// sender waiting for room.
    pub(super) fn wake_end_watcher(&mut self) {
        if let Some(w) = self.end_watcher.take() {
            w.wake();
        }
        match &mut self.side {
            Side::Driving(inbox) => {
                if let Some(w) = inbox.flush_waiter.take() {
                    w.wake();
                }
            }
            Side::Committed(c) => {
                c.writer.wake();
                c.wake_blocked_sender();
            }
            Side::Finished { .. } => {}
        }
    }

    /// Reports the committed attempt's end ([`CommittedAttempt::report`]), once; before commit the call
    /// lets go of its cluster (A28), and an attempt committed after the call ended ends its telemetry.
    pub(super) fn report_end(&mut self, status: &Status, end: CommittedEnd) {
        match &mut self.side {
            Side::Driving(inbox) => inbox.cluster = None,
            Side::Committed(c) => {
                if let Some(attempt) = c.attempt.take() {
                    attempt.report(status, end, &mut self.telemetry);
                }
            }
            Side::Finished { attempt } => {
                if let Some(mut attempt) = attempt.take() {
                    attempt.ended(status);
                }
            }
        }
    }
}

impl Drop for Shared {
    /// The call is gone, with whatever its send half still held: the channel no longer counts it.
    fn drop(&mut self) {
        if let Side::Committed(c) = &self.side {
            self.telemetry.unsent_changed(c.unsent_counted, 0);
        }
    }
}

/// How the committed attempt ended, for the throttle.
pub(super) enum CommittedEnd {
    /// The server's status, with the pushback its trailers carried.
    Remote(Pushback),
    /// Ended by the client.
    Local,
}

/// Cancels a call whose halves were never handed to the application.
pub(crate) struct CancelOnDrop(pub(crate) Option<SharedRef>);

impl CancelOnDrop {
    /// The halves reached the application: dropping this does nothing.
    pub(crate) fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            shared.lock().cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::sender::RequestSender;
    use super::*;
    use crate::call::send_stream::COALESCE_LIMIT;
    use crate::wire::codec::Codec;
    use crate::wire::framing;
    use std::future::Future;

    /// Counts its wake-ups.
    #[derive(Default)]
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    impl Wakes {
        fn count(&self) -> usize {
            self.0.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    /// A call whose retry driver has not committed, and its sending half (raw messages, no limit).
    fn uncommitted_call() -> (SharedRef, RequestSender<Bytes>) {
        let shared = Shared::driving(
            None,
            None,
            crate::call::telemetry::Telemetry::new("test".into())
                .call(&Arc::new(http::Uri::from_static("http://h/t.S/M"))),
        );
        let sender = RequestSender::new(
            shared.clone(),
            Codec::<Bytes, Bytes>::raw().encoder(),
            None,
            crate::wire::limits::Limit::call(crate::wire::limits::Direction::Send, usize::MAX),
            None,
        );
        (shared, sender)
    }

    #[test]
    fn before_commit_the_sender_runs_at_most_the_inbox_ahead_of_the_driver_which_takes_messages_in_order(
    ) {
        let (shared, mut sender) = uncommitted_call();
        let sender_wakes = Arc::new(Wakes::default());
        let sender_waker = Waker::from(sender_wakes.clone());
        let mut sender_cx = Context::from_waker(&sender_waker);
        let frame_len = framing::HEADER_LEN + 1000;
        let fits = SEND_AHEAD_LIMIT / frame_len;
        for i in 0..fits {
            let send = std::pin::pin!(sender.send(Bytes::from(vec![i as u8; 1000])));
            assert!(
                matches!(send.poll(&mut sender_cx), Poll::Ready(Ok(()))),
                "message {i} fits"
            );
        }
        // The inbox is full: the next send waits for the driver.
        let mut blocked = Box::pin(sender.send(Bytes::from(vec![fits as u8; 1000])));
        assert!(blocked.as_mut().poll(&mut sender_cx).is_pending());

        let driver_waker = Waker::from(Arc::new(Wakes::default()));
        let driver_cx = Context::from_waker(&driver_waker);
        // Taken while no attempt has written it (a budget short of the whole), a message still counts: the
        // sender is not woken.
        match shared.lock().poll_input(&driver_cx, COALESCE_LIMIT, false) {
            Some(Input::Message(m)) => assert_eq!(m[framing::HEADER_LEN], 0),
            _ => panic!("a message was queued"),
        }
        assert_eq!(sender_wakes.count(), 0, "no room was freed");
        assert!(blocked.as_mut().poll(&mut sender_cx).is_pending());
        // Then the driver takes the messages in order, one per call, each once an attempt wrote the one
        // before (the whole budget); the sender is woken once half the room is free, not per message.
        let mut taken = 1;
        while sender_wakes.count() == 0 {
            match shared.lock().poll_input(&driver_cx, usize::MAX, false) {
                Some(Input::Message(m)) => {
                    assert_eq!((m.len(), m[framing::HEADER_LEN]), (frame_len, taken as u8));
                    taken += 1;
                }
                _ => panic!("a message was queued"),
            }
        }
        // Half the room is free once the inbox and the message taken last (not written yet) hold half.
        assert!(taken > 1 && taken <= fits / 2 + 2, "woken after {taken}");
        assert!(blocked.as_mut().poll(&mut sender_cx).is_ready());
        drop(blocked);
        // Not taking (no attempt ready) leaves the messages queued; they come out in order later.
        assert!(shared.lock().poll_input(&driver_cx, 0, false).is_none());
        for i in taken..=fits {
            match shared.lock().poll_input(&driver_cx, usize::MAX, false) {
                Some(Input::Message(m)) => assert_eq!(m[framing::HEADER_LEN], i as u8),
                _ => panic!("message {i} was queued"),
            }
        }
        assert!(shared
            .lock()
            .poll_input(&driver_cx, usize::MAX, false)
            .is_none());
        // The half-close comes after the last message.
        drop(sender);
        assert!(matches!(
            shared.lock().poll_input(&driver_cx, usize::MAX, false),
            Some(Input::HalfClose)
        ));
    }

    #[test]
    fn an_aborted_sender_cancels_the_uncommitted_call_and_never_half_closes_it() {
        let (shared, mut sender) = uncommitted_call();
        let waker = Waker::from(Arc::new(Wakes::default()));
        let mut cx = Context::from_waker(&waker);
        {
            let send = std::pin::pin!(sender.send(Bytes::from_static(b"whole")));
            assert!(matches!(send.poll(&mut cx), Poll::Ready(Ok(()))));
        }
        sender.abort(Status::new(Code::Internal, "the rest is broken"));
        let mut s = shared.lock();
        // The driver is told to cancel (resetting every live attempt), ahead of the queued message, and the
        // sender's drop half-closed nothing.
        assert!(matches!(
            s.poll_input(&cx, usize::MAX, false),
            Some(Input::Cancel)
        ));
        assert!(!s.half_closed);
        assert_eq!(
            s.sender_failure.as_ref().map(Status::code),
            Some(Code::Internal)
        );
    }
}
