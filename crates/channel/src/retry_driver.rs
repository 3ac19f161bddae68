//! Executes `grpc-retry`'s decisions (gRFC A6) for a unary call whose method has a `retryPolicy` or a
//! `hedgingPolicy`: every attempt is a fresh pick (avoiding the addresses the call already used), sends the
//! one request message with `grpc-previous-rpc-attempts`, and reports back how it ended. The driver feeds
//! those events to the call's [`RetryCall`], runs its timers, and executes its actions until the call commits
//! to an attempt whose response headers arrived (the caller then reads that response) or finishes.
//!
//! Failure places: a pick that fails is `PickFailed` (a drop is `Dropped`); an h2 error before the request
//! was handed to the connection is `NotSent`; RST_STREAM(REFUSED_STREAM) and a GOAWAY that did not cover the
//! stream are `Unprocessed`; anything else is `Processed`.
//!
//! Not here yet: streaming calls, and transparent retries for calls without a policy (both run on the
//! single-attempt path for now).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use grpc_retry::{
    Action, AttemptEnd, AttemptId, CallConfig, FailurePlace, Outcome, Policy, Pushback, RetryCall,
    Shared,
};
use h2::{RecvStream, SendStream};
use http::{HeaderMap, HeaderValue};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::call::{classify_head, Head};
use crate::channel::Channel;
use crate::status::{Code, Status};
use crate::timeout;

/// What every attempt of the call sends.
pub(crate) struct AttemptSetup {
    pub(crate) uri: http::Uri,
    /// The request headers, without `grpc-timeout` and `grpc-previous-rpc-attempts` (set per attempt).
    pub(crate) headers: HeaderMap,
    pub(crate) method: String,
    pub(crate) wait_for_ready: bool,
    pub(crate) deadline: Option<Instant>,
}

/// The attempt the call committed to, with its response headers.
pub(crate) struct Committed {
    pub(crate) call: RetryCall,
    pub(crate) attempt: AttemptId,
    pub(crate) response: http::Response<RecvStream>,
    pub(crate) send: SendStream<Bytes>,
}

enum Event {
    Picked(AttemptId, SocketAddr),
    Sent(AttemptId),
    Headers(AttemptId, http::Response<RecvStream>, SendStream<Bytes>),
    Ended(AttemptId, AttemptEnd, Status),
}

/// Where an h2 error on an attempt's stream leaves it (A6 "Transparent Retries").
fn classify(err: &h2::Error) -> FailurePlace {
    if err.is_remote()
        && (err.reason() == Some(h2::Reason::REFUSED_STREAM) && err.is_reset() || err.is_go_away())
    {
        FailurePlace::Unprocessed
    } else {
        FailurePlace::Processed
    }
}

/// Runs the attempts of one unary call until it commits to one with response headers, or finishes.
pub(crate) async fn run_unary(
    channel: Channel,
    setup: AttemptSetup,
    frame: Bytes,
    policy: Policy,
    shared: Shared,
    seed: u64,
) -> Result<Committed, Status> {
    let setup = Arc::new(setup);
    let config = CallConfig {
        policy,
        deadline: setup.deadline.map(Instant::into_std),
        ..CallConfig::default()
    };
    let now = || Instant::now().into_std();
    let mut call = RetryCall::new(
        config,
        shared,
        Box::new(grpc_retry::SplitMix64::new(seed)),
        now(),
    );
    call.send_message(frame.clone(), now());
    call.half_close();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut tasks = JoinSet::new();
    let mut aborts = HashMap::new();
    let mut statuses: HashMap<AttemptId, Status> = HashMap::new();
    let mut heads: HashMap<AttemptId, (http::Response<RecvStream>, SendStream<Bytes>)> =
        HashMap::new();
    loop {
        while let Some(action) = call.poll_action() {
            match action {
                Action::StartAttempt {
                    attempt,
                    previous_attempts,
                    avoid,
                    ..
                } => {
                    let handle = tasks.spawn(attempt_task(
                        channel.clone(),
                        attempt,
                        previous_attempts,
                        avoid,
                        setup.clone(),
                        frame.clone(),
                        tx.clone(),
                    ));
                    aborts.insert(attempt, handle);
                }
                // A unary attempt sends its one message and half-closes by itself.
                Action::SendMessage { .. } | Action::HalfClose { .. } => {}
                Action::CancelAttempt { attempt } => {
                    if let Some(handle) = aborts.remove(&attempt) {
                        handle.abort();
                    }
                    // Dropping its streams sends RST_STREAM(CANCEL).
                    heads.remove(&attempt);
                }
                Action::Commit { attempt } => {
                    if let Some((response, send)) = heads.remove(&attempt) {
                        return Ok(Committed {
                            call,
                            attempt,
                            response,
                            send,
                        });
                    }
                }
                Action::Finish(Outcome::Attempt(attempt)) => {
                    return Err(statuses.remove(&attempt).unwrap_or_else(|| {
                        Status::new(Code::Internal, "the attempt ended without a status")
                    }));
                }
                Action::Finish(Outcome::Local(reason)) => {
                    return Err(Status::new(reason.code(), reason.message()))
                }
            }
        }
        let timer = call.poll_timeout().map(Instant::from_std);
        tokio::select! {
            event = rx.recv() => match event {
                Some(Event::Picked(id, addr)) => call.handle_picked(id, addr),
                Some(Event::Sent(id)) => call.handle_message_sent(id, 0),
                Some(Event::Headers(id, response, send)) => {
                    heads.insert(id, (response, send));
                    call.handle_headers(id, now());
                    // Committed earlier (the message overflowed the retry buffer): these are its headers.
                    if call.committed() == Some(id) {
                        if let Some((response, send)) = heads.remove(&id) {
                            return Ok(Committed { call, attempt: id, response, send });
                        }
                    }
                }
                Some(Event::Ended(id, end, status)) => {
                    statuses.insert(id, status);
                    call.handle_end(id, end, now());
                }
                None => return Err(Status::new(Code::Internal, "retry driver lost its attempts")),
            },
            () = async {
                match timer {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => call.handle_timeout(now()),
        }
    }
}

async fn attempt_task(
    channel: Channel,
    id: AttemptId,
    previous_attempts: u32,
    avoid: Vec<SocketAddr>,
    setup: Arc<AttemptSetup>,
    frame: Bytes,
    tx: mpsc::UnboundedSender<Event>,
) {
    let end = |place: FailurePlace, status: Status| {
        Event::Ended(id, AttemptEnd::failure(status.code(), place), status)
    };
    let (mut send, addr) = match channel
        .pick_for_retry(&setup.method, setup.wait_for_ready, &avoid)
        .await
    {
        Ok(picked) => picked,
        Err(status) => {
            let _ = tx.send(end(FailurePlace::PickFailed, status));
            return;
        }
    };
    let _ = tx.send(Event::Picked(id, addr));
    let mut request = http::Request::new(());
    *request.method_mut() = http::Method::POST;
    *request.uri_mut() = setup.uri.clone();
    *request.version_mut() = http::Version::HTTP_2;
    let mut headers = setup.headers.clone();
    if let Some(deadline) = setup.deadline {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if let Ok(v) = HeaderValue::try_from(timeout::encode(remaining)) {
            headers.insert("grpc-timeout", v);
        }
    }
    if previous_attempts > 0 {
        headers.insert(
            "grpc-previous-rpc-attempts",
            HeaderValue::from(previous_attempts),
        );
    }
    *request.headers_mut() = headers;
    let (response, mut stream) = match send.send_request(request, false) {
        Ok(pair) => pair,
        Err(e) => {
            let _ = tx.send(end(FailurePlace::NotSent, Status::from_h2(e)));
            return;
        }
    };
    if let Err(e) = stream.send_data(frame, true) {
        let place = classify(&e);
        let _ = tx.send(end(place, Status::from_h2(e)));
        return;
    }
    let _ = tx.send(Event::Sent(id));
    match response.await {
        Ok(response) => {
            let (parts, body) = response.into_parts();
            let head = classify_head(
                parts.status.as_u16(),
                parts.headers.clone(),
                body.is_end_stream(),
            );
            match head {
                Head::Messages { .. } => {
                    let response = http::Response::from_parts(parts, body);
                    let _ = tx.send(Event::Headers(id, response, stream));
                }
                Head::End(status, _) => {
                    let pushback = Pushback::from_values(
                        parts
                            .headers
                            .get_all("grpc-retry-pushback-ms")
                            .iter()
                            .map(HeaderValue::as_bytes),
                    );
                    let _ = tx.send(Event::Ended(
                        id,
                        AttemptEnd::status(status.code(), pushback),
                        status,
                    ));
                }
            }
        }
        Err(e) => {
            let place = classify(&e);
            let _ = tx.send(end(place, Status::from_h2(e)));
        }
    }
}
