//! Calls whose retry driver runs in the caller's task until the call commits or finishes (unary and
//! server-streaming calls, whose one request message is known before the first attempt): how they start
//! ([`Start`]), what makes their receiving half once the driver is done ([`Receiving`]), and a unary
//! call's one response ([`single_response`]). The channel (`channel.rs`) makes them; only what it awaits
//! across the call's waits is here, so its futures stay small.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::time::Instant;

use crate::call::{Committed, ReceiveRules, SharedRef, Streaming};
use crate::request::Response;
use crate::retry_driver::Driver;
use crate::status::{Code, Status};

/// How a call whose one request message is known up front starts (`Channel::start_with_request`): a
/// future, ready at once unless the call waits for name resolution.
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
