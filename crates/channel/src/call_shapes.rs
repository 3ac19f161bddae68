//! [`Channel`]'s call methods, one per call shape, with prost messages or raw bytes: unary and
//! server-streaming calls run their retry driver in the caller's task until they commit (the request is
//! known up front), client-streaming and bidi calls spawn it and send through a [`RequestSender`].
//!
//! Not here: setting a call up before its first attempt (`channel.rs`), bidi calls fed from a `Stream`
//! (`pump.rs`).

use std::future::{poll_fn, Future};
use std::pin::Pin;

use bytes::Bytes;
use futures_core::Stream;
use tokio::time::Instant;

use crate::call::driver::{single_response, Driver, Receiving, Start, Started};
use crate::call::telemetry::CallTelemetry;
use crate::call::{CancelOnDrop, RequestSender, Streaming};
use crate::channel::{Channel, Prepared, Settled};
use crate::request::{Request, Response};
use crate::wire::codec::Codec;
use crate::wire::metadata::MetadataMap;
use crate::wire::status::Status;

impl Channel {
    /// A unary call with prost messages. Like an `async fn`, it does nothing until the returned future is
    /// polled.
    // Not an `async fn`, like `unary_raw`: the returned future is `unary_with`'s itself, where a wrapper
    // future would keep a second copy of the request for the whole call.
    pub fn unary<'a, Req, Resp>(
        &'a self,
        path: &'a str,
        request: Request<Req>,
    ) -> impl Future<Output = Result<Response<Resp>, Status>> + use<'a, Req, Resp>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        self.unary_with(Codec::prost(), path, request)
    }

    /// A unary call whose messages are already serialized. Like an `async fn`, it does nothing until the
    /// returned future is polled.
    pub fn unary_raw<'a>(
        &'a self,
        path: &'a str,
        request: Request<Bytes>,
    ) -> impl Future<Output = Result<Response<Bytes>, Status>> + use<'a> {
        self.unary_with(Codec::raw(), path, request)
    }

    /// A server-streaming call: one request, then a stream of responses. Returns once the response headers
    /// arrive (or the call fails first).
    pub async fn server_streaming<Req, Resp>(
        &self,
        path: &str,
        request: Request<Req>,
    ) -> Result<Response<Streaming<Resp>>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        self.server_streaming_with(Codec::prost(), path, request)
            .await
    }

    /// [`Channel::server_streaming`] with `codec`.
    pub(crate) async fn server_streaming_with<Req, Resp>(
        &self,
        codec: Codec<Req, Resp>,
        path: &str,
        request: Request<Req>,
    ) -> Result<Response<Streaming<Resp>>, Status> {
        let (driver, receiving) = self.start_with_request(codec, path, request).await?;
        let (shared, result) = driver.run().await;
        let mut stream = receiving.handed(shared, result, self.header_limit());
        let metadata = stream.headers().await?.clone();
        Ok(Response::new(stream, metadata, MetadataMap::new(), false))
    }

    /// A client-streaming call: a stream of requests, then one response. The call half-closes when the
    /// request stream ends; dropping the returned future before it completes cancels the call
    /// (RST_STREAM(CANCEL)), and the server sees END_STREAM only if the request stream had ended.
    pub async fn client_streaming<Req, Resp, S>(
        &self,
        path: &str,
        request: Request<S>,
    ) -> Result<Response<Resp>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
        S: Stream<Item = Req>,
    {
        self.client_streaming_with(Codec::prost(), path, request)
            .await
    }

    /// [`Channel::client_streaming`] with `codec`.
    pub(crate) async fn client_streaming_with<Req, Resp, S>(
        &self,
        codec: Codec<Req, Resp>,
        path: &str,
        request: Request<S>,
    ) -> Result<Response<Resp>, Status>
    where
        S: Stream<Item = Req>,
    {
        let (messages, metadata, options) = request.into_parts();
        let (sender, mut receiver) = self
            .streaming_with(
                codec,
                path,
                Request::new(()).with_options(metadata, options),
            )
            .await?;
        // This future owns the sender: dropped before the request stream ended (the application gave up on
        // the call), it cancels the call, never half-closes it, whatever the order the two halves drop in.
        let mut sender = sender.cancel_on_drop();
        let mut messages = std::pin::pin!(messages);
        let send_all = async move {
            while let Some(msg) = poll_fn(|cx| Pin::as_mut(&mut messages).poll_next(cx)).await {
                if let Err(status) = sender.send(msg).await {
                    // The call ended (its status comes from the response side), or this message could not
                    // be sent (too large, say): that ends the call with this status, without a half-close.
                    sender.abort(status);
                    return;
                }
            }
            // The request is whole: half-close (an error means the call ended; the response side has its
            // status).
            let _ = sender.finish().await;
        };
        // The response is watched while the request streams: an early status from the server, or the
        // deadline, ends the call even while the application's stream has no next message.
        let mut send_all = std::pin::pin!(send_all);
        let mut response = std::pin::pin!(single_response(&mut receiver));
        tokio::select! {
            biased;
            result = &mut response => result,
            () = &mut send_all => response.await,
        }
    }

    /// A streaming call (client-streaming, server-streaming or bidi): returns the sending half, which
    /// half-closes when finished or dropped, and the receiving half, which cancels the call when dropped
    /// before its end. To give up on the call, drop the receiving half first (see [`RequestSender`]).
    /// Messages are prost messages.
    pub async fn streaming<Req, Resp>(
        &self,
        path: &str,
        request: Request<()>,
    ) -> Result<(RequestSender<Req>, Streaming<Resp>), Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        self.streaming_with(Codec::prost(), path, request).await
    }

    /// A streaming call whose messages are already serialized.
    pub async fn streaming_raw(
        &self,
        path: &str,
        request: Request<()>,
    ) -> Result<(RequestSender<Bytes>, Streaming<Bytes>), Status> {
        self.streaming_with(Codec::raw(), path, request).await
    }

    /// A unary call. Its future is most of an in-flight call's memory: all it keeps across its waits, besides
    /// its arguments, is the retry driver (a call waiting for its response is most often here, the call not
    /// committed before the response headers), then a box with the receiving half. Starting the call
    /// waits for nothing unless name resolution has no result yet (that wait is boxed).
    pub(crate) async fn unary_with<Req, Resp>(
        &self,
        codec: Codec<Req, Resp>,
        path: &str,
        request: Request<Req>,
    ) -> Result<Response<Resp>, Status> {
        let (driver, receiving) = self.start_with_request(codec, path, request).await?;
        let (shared, result) = driver.run().await;
        let mut receiver = receiving.handed(shared, result, self.header_limit());
        // Half a KiB with the wait for the message and the status: inline, it would make the future as
        // large for the whole call, while the driver runs too.
        Box::pin(async move { single_response(&mut receiver).await }).await
    }

    /// Starts a call whose one request message is known before the first attempt (unary,
    /// server-streaming): its retry driver, which the caller polls in its own task until the call commits or
    /// finishes, and what makes the receiving half then. An oversize request is never sent.
    fn start_with_request<'a, Req, Resp>(
        &'a self,
        codec: Codec<Req, Resp>,
        path: &'a str,
        request: Request<Req>,
    ) -> Start<Resp, impl Future<Output = Result<Started<Resp>, Status>> + use<'a, Req, Resp>> {
        let (message, metadata, options) = request.into_parts();
        match self.begin(path, metadata, options) {
            Ok((Settled::Ready(prepared), telemetry)) => Start::Now(std::future::ready(
                self.call_with_request(prepared, telemetry, &codec, &message),
            )),
            Ok((Settled::Resolving(resolving), telemetry)) => {
                Start::Resolving(Box::pin(async move {
                    let (prepared, telemetry) = self.resolve(path, resolving, telemetry).await?;
                    self.call_with_request(prepared, telemetry, &codec, &message)
                }))
            }
            Err(status) => Start::Now(std::future::ready(Err(status))),
        }
    }

    /// [`Channel::start_with_request`] once the call is prepared: the request encoded, the retry state
    /// machine given it and the half-close, the driver made.
    fn call_with_request<Req, Resp>(
        &self,
        mut prepared: Prepared,
        mut telemetry: CallTelemetry,
        codec: &Codec<Req, Resp>,
        message: &Req,
    ) -> Result<Started<Resp>, Status> {
        telemetry.routed(prepared.cluster.as_ref());
        let frame = crate::wire::framing::encode_frame(
            codec,
            message,
            prepared.encoding,
            prepared.max_send,
        )
        .map_err(|status| telemetry.fail(status))?;
        let now = Instant::now().into_std();
        let (mut call, setup, shared) = self.new_call(&mut prepared, telemetry, true, now);
        call.send_message(frame, now);
        call.half_close();
        let driver = Driver::new(self.control().clone(), setup, call, shared, false);
        let receiving = Receiving {
            decode: codec.decode,
            rules: prepared.receive_rules(),
            deadline: prepared.deadline,
        };
        Ok((driver, receiving))
    }

    pub(crate) async fn streaming_with<Req, Resp>(
        &self,
        codec: Codec<Req, Resp>,
        path: &str,
        request: Request<()>,
    ) -> Result<(RequestSender<Req>, Streaming<Resp>), Status> {
        let ((), metadata, options) = request.into_parts();
        let (mut prepared, mut telemetry) = self.prepare(path, metadata, options).await?;
        telemetry.routed(prepared.cluster.as_ref());
        let (call, setup, shared) =
            self.new_call(&mut prepared, telemetry, false, Instant::now().into_std());
        // The application sends after the call starts: the driver runs in its own task until commit.
        let driver = Driver::new(self.control().clone(), setup, call, shared.clone(), true);
        tokio::spawn(driver.run_into());
        // Like a single-attempt call, return once the first attempt's request is on its way (or the call
        // failed before any was). A caller that gives up before then cancels the call.
        let cancel_on_drop = CancelOnDrop(Some(shared.clone()));
        poll_fn(|cx| shared.lock().poll_started(cx)).await?;
        cancel_on_drop.disarm();
        let sender = RequestSender::new(
            shared.clone(),
            codec.encoder(),
            prepared.encoding,
            prepared.max_send,
            prepared.deadline,
        );
        let receiver = Streaming::driven(
            shared,
            codec.decode,
            prepared.receive_rules(),
            self.header_limit(),
            prepared.deadline,
        );
        Ok((sender, receiver))
    }
}
