//! Streaming calls whose request messages come from an application [`Stream`]: the shape generated clients
//! use for bidi calls ([`Channel::bidi_streaming`]). A spawned task pumps the stream into the call's
//! [`RequestSender`] and half-closes when the stream ends.
//!
//! The pump stops, dropping the stream, as soon as the call ends (the response is complete, the call was
//! cancelled or passed its deadline), even while the stream has no next message. A message that cannot be
//! sent (too large, say) ends the call with that status, which the receiving half reports: nothing the pump
//! sees is lost. A send (or the half-close) that fails because the server already ended or reset the stream
//! changes nothing: the receiving half reports the server's status (`RequestSender::abort`).

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::task::Poll;

use futures_core::Stream;

use crate::call::{RequestSender, Streaming};
use crate::channel::Channel;
use crate::request::{Request, Response};
use crate::wire::codec::Codec;
use crate::wire::metadata::MetadataMap;
use crate::wire::status::Status;

impl Channel {
    /// A bidi-streaming call whose request messages come from a stream: a task sends them as the stream
    /// yields them and half-closes at its end, while the response messages arrive on the returned
    /// [`Streaming`]. Returns once the response headers arrive (or the call fails first), like
    /// [`Channel::server_streaming`].
    ///
    /// The task stops when the call ends, dropping the stream. A message that cannot be sent (larger than
    /// the send limit, say) ends the call with that status, which the [`Streaming`] reports.
    pub async fn bidi_streaming<Req, Resp, S>(
        &self,
        path: &str,
        request: Request<S>,
    ) -> Result<Response<Streaming<Resp>>, Status>
    where
        Req: prost::Message + Send + 'static,
        Resp: prost::Message + Default,
        S: Stream<Item = Req> + Send + 'static,
    {
        self.bidi_streaming_with(Codec::prost(), path, request)
            .await
    }

    /// [`Channel::bidi_streaming`] with `codec`.
    pub(crate) async fn bidi_streaming_with<Req, Resp, S>(
        &self,
        codec: Codec<Req, Resp>,
        path: &str,
        request: Request<S>,
    ) -> Result<Response<Streaming<Resp>>, Status>
    where
        Req: Send + 'static,
        S: Stream<Item = Req> + Send + 'static,
    {
        let (messages, metadata, options) = request.into_parts();
        let (sender, mut receiver) = self
            .streaming_with(
                codec,
                path,
                Request::new(()).with_options(metadata, options),
            )
            .await?;
        // The pump finishes the sender at the stream's end; dropped unfinished (the runtime dropping the
        // task), it cancels the call rather than half-close an incomplete request.
        tokio::spawn(pump(messages, sender.cancel_on_drop()));
        let metadata = receiver.headers().await?.clone();
        Ok(Response::new(receiver, metadata, MetadataMap::new(), false))
    }
}

/// What the pump does next.
enum Next<T> {
    Message(T),
    StreamEnded,
    CallEnded,
}

/// Sends every message of `messages`, then half-closes; stops when the call ends.
async fn pump<S, Req>(messages: S, mut sender: RequestSender<Req>)
where
    S: Stream<Item = Req>,
{
    let end = sender.end_watch();
    let mut messages = pin!(messages);
    loop {
        let next = poll_fn(|cx| {
            if end.poll_ended(cx).is_ready() {
                return Poll::Ready(Next::CallEnded);
            }
            messages.as_mut().poll_next(cx).map(|m| match m {
                Some(m) => Next::Message(m),
                None => Next::StreamEnded,
            })
        })
        .await;
        match next {
            Next::Message(message) => {
                // A send waiting for flow control or for the retry driver stops when the call ends.
                let sent = {
                    let mut send = pin!(sender.send(message));
                    poll_fn(|cx| match send.as_mut().poll(cx) {
                        Poll::Ready(result) => Poll::Ready(Some(result)),
                        Poll::Pending => end.poll_ended(cx).map(|()| None),
                    })
                    .await
                };
                match sent {
                    Some(Ok(())) => {}
                    Some(Err(status)) => {
                        sender.abort(status);
                        return;
                    }
                    None => return,
                }
            }
            Next::StreamEnded => {
                // An error here means the call already ended; the receiving half has its status.
                let _ = sender.finish().await;
                return;
            }
            Next::CallEnded => return,
        }
    }
}
