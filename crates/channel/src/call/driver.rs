//! Runs one call's [`RetryCall`] (gRFC A6) over real attempts until the call commits to one of them or
//! finishes. Every call passes through here, whatever its shape and whether or not its method has a policy:
//! a call without a policy is a policy of one attempt plus A6's transparent retries.
//!
//! The driver is a future that owns the state machine and its [`Attempt`]s and polls them all from one
//! task: it executes the machine's actions (start an attempt with a fresh pick avoiding the addresses the
//! call used, queue message n on attempt k, half-close, cancel, commit, finish), feeds back what the
//! attempts report (picked, message sent, response headers, end in A6's failure places), and runs the
//! machine's one timer. For calls whose request is known up front (unary, server-streaming) the caller
//! awaits the driver; for client-streaming and bidi calls it is spawned, and takes the application's
//! messages from the call's [`Shared`] inbox, everything queued (up to one DATA frame's worth) at once, only
//! once an open attempt has written the previous ones (so the readiest live attempt paces the sender, which
//! runs at most the bounded inbox ahead). Each attempt writes such a batch as one `send_data`.
//!
//! At commit the driver hands the committed attempt over to the call (`call::hand_over`): its stream,
//! with whatever it had not written yet (the call's writer task writes it under flow control), and its
//! response (headers already in, or still to come). From then on the call's halves use that stream
//! directly; the state machine goes along to hear how the committed attempt ends.
//!
//! Calls whose driver runs in the caller's task until the call commits or finishes (unary and
//! server-streaming calls, whose one request message is known before the first attempt): how they start
//! ([`Start`]), what makes their receiving half once the driver is done ([`Receiving`]), and a unary
//! call's one response ([`single_response`]). The channel (`channel.rs`) makes them; only what it awaits
//! across the call's waits is here, so its futures stay small.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use grpc_retry::{Action, AttemptDetails, AttemptId, LocalReason, Outcome, RetryCall};
use tokio::time::{Instant, Sleep};

use bytes::Bytes;

use crate::call::attempt::{Attempt, AttemptEvent, AttemptSetup, OpenAttempt};
use crate::call::connection_wait::waiting_for_connection;
use crate::call::send_stream::COALESCE_LIMIT;
use crate::call::telemetry::AttemptTelemetry;
use crate::call::{Committed, Input, ReceiveRules, SharedRef, Streaming};
use crate::control::outlier::AttemptResult;
use crate::control::{ControlPlane, Pick};
use crate::request::Response;
use crate::wire::status::{Code, Status};

/// Runs a call's attempts.
pub(crate) struct Driver {
    /// Where attempts pick their connections.
    control: ControlPlane,
    setup: Arc<AttemptSetup>,
    call: Box<RetryCall>,
    /// Indexed by attempt id; exactly as many as attempts started (one for most calls: a slot is a few
    /// hundred bytes, kept while the call is in flight, where growing by doubling would keep four).
    attempts: Vec<Slot>,
    committed: Option<AttemptId>,
    timer: Option<(std::time::Instant, Pin<Box<Sleep>>)>,
    /// The application's side, for calls that send after they start.
    input: Option<SharedRef>,
    half_close_sent: bool,
    /// The call's shared state (its telemetry).
    shared: SharedRef,
    /// Since when no attempt has been in flight (a retry's backoff), if so.
    idle_since: Option<Instant>,
}

/// An attempt's place in the driver.
// As large as the `Option<Attempt>` it replaces; boxing the attempt would cost an allocation per attempt.
#[allow(clippy::large_enum_variant)]
enum Slot {
    /// Running, with its span and metrics.
    Live(Attempt, AttemptTelemetry),
    /// Ended with this status (the call's status if the machine picks it).
    Ended(Status),
    /// Cancelled by the call, or handed over at commit.
    Gone,
}

impl Slot {
    fn live(&mut self) -> Option<&mut Attempt> {
        match self {
            Slot::Live(a, _) => Some(a),
            Slot::Ended(_) | Slot::Gone => None,
        }
    }

    /// A live attempt, taken out (the slot is then `Gone`); any other slot is left as it is.
    fn take_live(&mut self) -> Option<(Attempt, AttemptTelemetry)> {
        match std::mem::replace(self, Slot::Gone) {
            Slot::Live(attempt, telemetry) => Some((attempt, telemetry)),
            other => {
                *self = other;
                None
            }
        }
    }

    /// An ended attempt's status, taken out (the slot is then `Gone`); any other slot is left as it is.
    fn take_ended(&mut self) -> Option<Status> {
        match std::mem::replace(self, Slot::Gone) {
            Slot::Ended(status) => Some(status),
            other => {
                *self = other;
                None
            }
        }
    }
}

/// How driving a call ends: committed to an attempt (handed over with the state machine by
/// [`Driver::outcome`]), or finished with a status.
// Returned once per call and moved on at once: boxing the committed side would cost an allocation per call.
#[allow(clippy::large_enum_variant)]
enum DriveEnd {
    Committed {
        attempt: AttemptId,
        open: OpenAttempt,
        previous_attempts: u32,
        telemetry: AttemptTelemetry,
    },
    Finished(Status),
}

/// The future of [`Driver::run`]: the driver, polled where it lies (an `async fn` would hold it twice), until
/// its outcome takes it apart.
pub(crate) struct Run(Option<Driver>);

impl Future for Run {
    type Output = (SharedRef, Result<Committed, Status>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Polled after it completed: nothing more comes.
        let Some(driver) = self.0.as_mut() else {
            return Poll::Pending;
        };
        let end = std::task::ready!(driver.poll_drive(cx));
        match self.0.take() {
            Some(driver) => Poll::Ready(driver.outcome(end)),
            None => Poll::Pending,
        }
    }
}

impl Drop for Run {
    /// A driver dropped before the call committed or finished (the caller gave up on a unary or
    /// server-streaming call, or the call's task was aborted): the attempts it made still count in the
    /// call's telemetry (per-method stats, the call span's `grpc.attempts`), which otherwise hears of
    /// them only from the driver's finish or the committed call's end.
    fn drop(&mut self) {
        if let Some(driver) = &self.0 {
            driver
                .shared
                .lock()
                .telemetry
                .set_stats(driver.call.stats());
        }
    }
}

fn now() -> std::time::Instant {
    Instant::now().into_std()
}

impl Driver {
    pub(crate) fn new(
        control: ControlPlane,
        setup: Arc<AttemptSetup>,
        call: Box<RetryCall>,
        shared: SharedRef,
        input: bool,
    ) -> Driver {
        Driver {
            control,
            setup,
            call,
            attempts: Vec::new(),
            committed: None,
            timer: None,
            input: input.then(|| shared.clone()),
            half_close_sent: false,
            shared,
            idle_since: None,
        }
    }

    /// Runs until the call commits or finishes: the call's shared state, with the committed attempt and the
    /// state machine, or the call's status.
    pub(crate) fn run(self) -> Run {
        Run(Some(self))
    }

    /// Runs, then hands the outcome to the call's halves: the future of a driver in a task of its own. (Not
    /// an `async fn`, which would keep the driver twice: once as its argument, once in the future it
    /// awaits.)
    pub(crate) fn run_into(self) -> impl Future<Output = ()> {
        let mut run = self.run();
        poll_fn(move |cx| {
            let (shared, result) = std::task::ready!(Pin::new(&mut run).poll(cx));
            crate::call::hand_over(&shared, result);
            Poll::Ready(())
        })
    }

    /// How driving ended, for the call's halves: their shared state, and the committed attempt with the
    /// state machine, or the call's status.
    fn outcome(self, end: DriveEnd) -> (SharedRef, Result<Committed, Status>) {
        let result = match end {
            DriveEnd::Committed {
                attempt,
                open,
                previous_attempts,
                telemetry,
            } => Ok(Committed {
                call: self.call,
                attempt,
                open,
                previous_attempts,
                telemetry,
            }),
            DriveEnd::Finished(status) => Err(status),
        };
        (self.shared, result)
    }

    /// One turn: the machine's actions, the hand-over once committed, the application's input, what the
    /// attempts report, the machine's timer; again while any of them made progress.
    fn poll_drive(&mut self, cx: &mut Context<'_>) -> Poll<DriveEnd> {
        loop {
            if let Some(status) = self.run_actions(cx) {
                return Poll::Ready(DriveEnd::Finished(status));
            }
            if let Some(committed) = self.take_committed() {
                return Poll::Ready(committed);
            }
            if self.take_input(cx) || self.poll_attempts(cx) || self.poll_timer(cx) {
                continue;
            }
            return Poll::Pending;
        }
    }

    /// Executes the machine's actions until it has none; the call's status if one finished it.
    fn run_actions(&mut self, cx: &mut Context<'_>) -> Option<Status> {
        while let Some(action) = self.call.poll_action() {
            match action {
                Action::StartAttempt {
                    attempt,
                    previous_attempts,
                    avoid,
                    transparent,
                } => self.start_attempt(attempt, previous_attempts, avoid, transparent, cx),
                Action::SendMessage {
                    attempt,
                    index,
                    message,
                    ..
                } => {
                    if let Some(a) = self.live(attempt) {
                        a.send(index, message);
                    }
                }
                Action::HalfClose { attempt } => {
                    if let Some(a) = self.live(attempt) {
                        a.half_close();
                    }
                }
                Action::CancelAttempt { attempt } => self.cancel_attempt(attempt),
                Action::Commit { attempt } => self.committed = Some(attempt),
                Action::Finish(outcome) => return Some(self.finish(outcome)),
            }
        }
        None
    }

    fn live(&mut self, attempt: AttemptId) -> Option<&mut Attempt> {
        self.attempts
            .get_mut(attempt.0 as usize)
            .and_then(Slot::live)
    }

    fn start_attempt(
        &mut self,
        attempt: AttemptId,
        previous_attempts: u32,
        avoid: Vec<grpc_lb::Address>,
        transparent: bool,
        cx: &mut Context<'_>,
    ) {
        let pick = self.control.pick_for(
            &self.setup.uri,
            self.setup.cluster.clone(),
            self.setup.wait_for_ready,
            avoid,
            cx,
        );
        let index = attempt.0 as usize;
        if self.attempts.len() <= index {
            self.attempts.reserve_exact(index + 1 - self.attempts.len());
            self.attempts.resize_with(index + 1, || Slot::Gone);
        }
        let delay = self
            .idle_since
            .take()
            .map(|t| t.elapsed())
            .unwrap_or_default();
        let mut shared = self.shared.lock();
        shared.attempt_started(previous_attempts);
        if matches!(pick, Pick::Later(_)) && shared.picking.is_none() {
            // Kept for the message of a deadline that passes while the call waits (the slow path only).
            shared.picking = Some((self.control.clone(), self.setup.wait_for_ready));
        }
        let telemetry = shared.telemetry.attempt(attempt.0 + 1, transparent, delay);
        drop(shared);
        self.attempts[index] = Slot::Live(
            Attempt::new(pick, self.setup.clone(), previous_attempts),
            telemetry,
        );
    }

    /// Whether the call's deadline has passed: an attempt cancelled then was cut by it (outlier detection
    /// counts it as DEADLINE_EXCEEDED on its address).
    fn deadline_passed(&self) -> bool {
        self.setup
            .deadline
            .is_some_and(|d| d <= tokio::time::Instant::now())
    }

    fn cancel_attempt(&mut self, attempt: AttemptId) {
        // What cut the attempt, as outlier detection counts it on the address it went to: the call's
        // deadline (DEADLINE_EXCEEDED, as an attempt that ended so after commit counts), or its own
        // `perAttemptRecvTimeout` (CANCELLED, as in C-core: the backend took the call and did not answer
        // in time), the latter only once its HEADERS left for the server: an attempt h2 still held in its
        // local queue (the server's MAX_CONCURRENT_STREAMS reached, by this channel's own streams) says
        // nothing of how the backend answers. Cancelled for another reason (a hedge that lost: another
        // attempt won, which says nothing about this one's backend), it does not count.
        let deadline_passed = self.deadline_passed();
        let timed_out = self.call.timed_out(attempt);
        if let Some(slot) = self.attempts.get_mut(attempt.0 as usize) {
            if let Slot::Live(mut a, mut t) = std::mem::replace(slot, Slot::Gone) {
                if deadline_passed {
                    a.record_result(AttemptResult::Ended(Code::DeadlineExceeded));
                } else if timed_out && a.reached_connection() {
                    a.record_result(AttemptResult::Ended(Code::Cancelled));
                }
                a.cancel();
                t.cancelled();
            }
        }
    }

    /// The machine finished the call: with an attempt's status, or one of its own.
    fn finish(&mut self, outcome: Outcome) -> Status {
        let status = match outcome {
            // The machine finishes with the outcome of an attempt that reported its end, which the slot
            // keeps; should grpc-retry ever break that rule, the call fails INTERNAL rather than panics.
            Outcome::Attempt(a) => self
                .attempts
                .get_mut(a.0 as usize)
                .and_then(Slot::take_ended)
                .unwrap_or_else(|| {
                    Status::new(Code::Internal, "the attempt ended without a status")
                }),
            // Made by the client after the attempts so far: it follows the last one started.
            Outcome::Local(reason) => {
                let stats = self.call.stats();
                let policy_attempts = stats.attempts.saturating_sub(stats.transparent_retries);
                let waiting = reason == LocalReason::DeadlineExceeded
                    && self.attempts.iter().any(|s| match s {
                        Slot::Live(a, _) => a.is_picking(),
                        _ => false,
                    });
                let status = match waiting {
                    true => waiting_for_connection(&self.control, self.setup.wait_for_ready),
                    false => Status::new(reason.code(), reason.message()),
                };
                status.with_previous_rpc_attempts(policy_attempts.saturating_sub(1))
            }
        };
        let deadline_passed = self.deadline_passed();
        for slot in self.attempts.drain(..) {
            // Attempts still live are cancelled (their telemetry says so as it drops); cut by the deadline,
            // they count as DEADLINE_EXCEEDED on their address, as in `cancel_attempt`.
            if let Slot::Live(mut a, _) = slot {
                if deadline_passed {
                    a.record_result(AttemptResult::Ended(Code::DeadlineExceeded));
                }
                a.cancel();
            }
        }
        self.shared.lock().telemetry.set_stats(self.call.stats());
        status
    }

    /// Once committed, the committed attempt as soon as it has a stream.
    fn take_committed(&mut self) -> Option<DriveEnd> {
        let id = self.committed?;
        let slot = self.attempts.get_mut(id.0 as usize)?;
        if !slot.live()?.is_open() {
            return None;
        }
        let (mut attempt, mut telemetry) = slot.take_live()?;
        let open = attempt.take_open()?;
        let previous_attempts = attempt.previous_attempts();
        // What is left of the attempt goes now; its stream went with `open`.
        drop(attempt);
        // What the call now writes will never be replayed: free it.
        if let Some(last) = open.handed_over {
            self.call.handle_message_sent(id, last);
        }
        telemetry.committed();
        Some(DriveEnd::Committed {
            attempt: id,
            open,
            previous_attempts,
            telemetry,
        })
    }

    /// The application's next message, half-close or cancel; whether there was one.
    fn take_input(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(shared) = &self.input else {
            return false;
        };
        // Take the next message once an attempt with a stream has written everything it was given: the
        // readiest attempt paces the sender, and slower ones queue what the retry buffer holds anyway (its
        // limit commits the call to the most advanced attempt). After commit, the committed attempt alone
        // paces it, stream or not.
        let accept = match self.committed {
            Some(c) => match self.attempts.get(c.0 as usize) {
                Some(Slot::Live(a, _)) => a.caught_up(),
                _ => true,
            },
            None => self.attempts.iter().any(|slot| match slot {
                Slot::Live(a, _) => a.is_open() && a.caught_up(),
                Slot::Ended(_) | Slot::Gone => false,
            }),
        };
        // Everything queued is taken together (up to one DATA frame's worth), so the attempts write it as one
        // batch.
        let mut budget = if accept { usize::MAX } else { 0 };
        let mut taken = false;
        loop {
            let input = shared.lock().poll_input(cx, budget, self.half_close_sent);
            match input {
                None => return taken,
                Some(Input::Message(message)) => {
                    // The first message whatever its size, then what fits beside it, and never the one
                    // that overflows the retry buffer: that one comes alone, once the attempts have
                    // reported what they wrote, so the overflow commits to the most advanced attempt.
                    budget = budget.min(COALESCE_LIMIT).saturating_sub(message.len());
                    taken = true;
                    self.call.send_message(message, now());
                    budget = budget.min(self.call.buffer_room());
                }
                Some(Input::HalfClose) => {
                    self.half_close_sent = true;
                    self.call.half_close();
                    return true;
                }
                Some(Input::Cancel) => {
                    self.call.cancel(now());
                    return true;
                }
            }
        }
    }

    /// What the attempts have to say; whether any said something.
    fn poll_attempts(&mut self, cx: &mut Context<'_>) -> bool {
        let mut progressed = false;
        let mut ended = false;
        for (index, slot) in self.attempts.iter_mut().enumerate() {
            let Slot::Live(attempt, telemetry) = slot else {
                continue;
            };
            let id = AttemptId(index as u32);
            while let Poll::Ready(event) = attempt.poll(cx) {
                progressed = true;
                match event {
                    AttemptEvent::Picked(addr) => {
                        telemetry.picked(&addr);
                        self.call.handle_picked(id, addr);
                        if let Some(shared) = &self.input {
                            shared.lock().mark_started();
                        }
                    }
                    AttemptEvent::Sent(message) => self.call.handle_message_sent(id, message),
                    AttemptEvent::Headers => {
                        self.call.handle_headers(id, now());
                        break;
                    }
                    AttemptEvent::Ended(end, status) => {
                        telemetry.ended(&status);
                        attempt.record_result(AttemptResult::Ended(status.code()));
                        // An application policy may read the status message and trailers.
                        let details = AttemptDetails {
                            message: status.message(),
                            trailers: status.metadata(),
                        };
                        self.call.handle_end_with(id, end, &details, now());
                        // Should the call end with this status, the application learns how many
                        // attempts came before it.
                        let previous = attempt.previous_attempts();
                        *slot = Slot::Ended(status.with_previous_rpc_attempts(previous));
                        ended = true;
                        break;
                    }
                }
            }
        }
        if ended
            && self.idle_since.is_none()
            && !self.attempts.iter().any(|s| matches!(s, Slot::Live(..)))
        {
            self.idle_since = Some(Instant::now());
        }
        progressed
    }

    /// The machine's timer (backoff, hedging delay, deadline, per-attempt receive timeouts); whether it
    /// fired.
    fn poll_timer(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(at) = self.call.poll_timeout() else {
            self.timer = None;
            return false;
        };
        let sleep = match &mut self.timer {
            Some((armed, sleep)) if *armed == at => sleep,
            _ => {
                let sleep = Box::pin(tokio::time::sleep_until(Instant::from_std(at)));
                &mut self.timer.insert((at, sleep)).1
            }
        };
        if sleep.as_mut().poll(cx).is_ready() {
            self.timer = None;
            self.call.handle_timeout(now());
            return true;
        }
        false
    }
}

/// How a call whose one request message is known up front starts (`Channel::start_with_request`): a
/// future, ready at once unless the call waits for name resolution.
// Built once per call and polled at once: boxing the ready side would cost an allocation per call.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Start<Resp, F> {
    /// Started, or failed, without waiting.
    Now(std::future::Ready<Result<Started<Resp>, Status>>),
    /// Started once name resolution has a result: boxed, as few calls wait for it.
    Resolving(Pin<Box<F>>),
}

impl<Resp, F: Future<Output = Result<Started<Resp>, Status>>> Future for Start<Resp, F> {
    type Output = Result<Started<Resp>, Status>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Start::Now(started) => Pin::new(started).poll(cx),
            Start::Resolving(started) => started.as_mut().poll(cx),
        }
    }
}

/// A started call: its retry driver, for the caller to run, and what makes its receiving half then.
pub(crate) type Started<Resp> = (Driver, Receiving<Resp>);

/// What the receiving half of a call needs, besides its shared state, while the call's retry driver runs in
/// the caller's task.
pub(crate) struct Receiving<Resp> {
    pub(crate) decode: fn(Bytes) -> Result<Resp, Status>,
    /// How response messages are read (limit, advertised encodings).
    pub(crate) rules: ReceiveRules,
    pub(crate) deadline: Option<Instant>,
}

impl<Resp> Receiving<Resp> {
    /// The receiving half, once the driver has committed the call (`Ok`) or finished it.
    pub(crate) fn handed(
        self,
        shared: SharedRef,
        result: Result<Committed, Status>,
        header_limit: usize,
    ) -> Streaming<Resp> {
        Streaming::taking_over(
            shared,
            result,
            self.decode,
            self.rules,
            header_limit,
            self.deadline,
        )
    }
}

/// Reads exactly one response message and the status after it.
pub(crate) async fn single_response<Resp>(
    receiver: &mut Streaming<Resp>,
) -> Result<Response<Resp>, Status> {
    let message = match receiver.message().await? {
        Some(m) => m,
        None => {
            return Err(Status::new(
                Code::Unimplemented,
                "response cardinality violation: the server sent no response message",
            )
            .with_previous_rpc_attempts(receiver.previous_rpc_attempts()))
        }
    };
    let compressed = receiver.last_message_compressed();
    if receiver.message().await?.is_some() {
        receiver.cancel();
        return Err(Status::new(
            Code::Unimplemented,
            "response cardinality violation: the server sent more than one response message",
        )
        .with_previous_rpc_attempts(receiver.previous_rpc_attempts()));
    }
    let (metadata, trailers) = receiver.take_metadata();
    Ok(Response::new(message, metadata, trailers, compressed))
}
