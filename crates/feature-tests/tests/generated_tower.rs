//! grpc-build's generated clients over tower stacks (`XClient<T>` with `T` a tower service over the channel,
//! `grpc_channel::service`): the concurrency limit holds at the server, the timeout layer ends a held call
//! DEADLINE_EXCEEDED, load shedding answers UNAVAILABLE, every call shape goes through the layers,
//! `BoxCloneService` and `Buffer` fit, and a layer of one's own reads and sets the call's path and
//! metadata. The held calls are a tonic TestService's (`holding_peer`), which counts the unary calls in
//! it and keeps each until the test lets it go; the call shapes run against the interop server.

use grpc_test_support as support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use grpc_channel::service::{BoxError, GrpcCall, GrpcReply};
use grpc_channel::{Channel, Code, Request, Status};
use holding_peer::Holding;
use interop_proto::test_service_client::TestServiceClient;
use interop_proto::{
    Payload, ResponseParameters, SimpleRequest, StreamingInputCallRequest,
    StreamingOutputCallRequest,
};
use support::guards::NO_HANG;
use tower::ServiceBuilder;

fn channel(addr: std::net::SocketAddr) -> Channel {
    Channel::builder(format!("ipv4:{addr}"))
        .build()
        .expect("channel")
}

fn simple() -> SimpleRequest {
    SimpleRequest {
        response_size: 8,
        ..Default::default()
    }
}

/// Whether `service` is ready now, polled once.
async fn ready_now<S: tower::Service<GrpcCall>>(service: &mut S) -> bool {
    std::future::poll_fn(|cx| std::task::Poll::Ready(service.poll_ready(cx).is_ready())).await
}

/// Five calls through `concurrency_limit(2)`: never more than two at the server, a third caller is not
/// ready while two are held, and all five succeed once the server lets them go one by one.
#[tokio::test]
async fn the_concurrency_limit_holds_at_the_server() {
    let peer = Holding::start().await;
    let service = ServiceBuilder::new()
        .concurrency_limit(2)
        .timeout(NO_HANG)
        .service(channel(peer.addr));
    let client = TestServiceClient::new(service);
    // Warm-up, let through at once: the connection is up.
    peer.release(1);
    client.clone().unary_call(simple()).await.expect("warm-up");

    let calls: Vec<_> = (0..5)
        .map(|_| {
            let mut client = client.clone();
            tokio::spawn(async move { client.unary_call(simple()).await })
        })
        .collect();
    peer.wait_for_in_flight(2).await;
    let mut probe = client.clone().into_inner();
    assert!(
        !ready_now(&mut probe).await,
        "two calls hold both permits: a third caller waits"
    );
    for released in 1..=5 {
        peer.release(1);
        // The next one starts (or, after the last, none is left).
        peer.wait_for_started(3 + released.min(3)).await;
    }
    for call in calls {
        let response = tokio::time::timeout(NO_HANG, call)
            .await
            .expect("no hang")
            .expect("task");
        response.expect("the call succeeds once let through");
    }
    assert_eq!(peer.max_in_flight(), 2, "never more than two at the server");
    assert_eq!(peer.started(), 6, "the warm-up and the five calls");
}

/// A call the server holds past the timeout layer's duration ends DEADLINE_EXCEEDED (the layer's
/// `Elapsed`, kept as the source); the channel's own deadline is not involved. On the paused clock: the
/// held call leaves the runtime idle, and the clock jumps to the layer's timer.
#[tokio::test(start_paused = true)]
async fn the_timeout_layer_ends_a_held_call_deadline_exceeded() {
    let peer = Holding::start().await;
    let service = ServiceBuilder::new()
        .timeout(Duration::from_secs(30))
        .service(channel(peer.addr));
    let mut client = TestServiceClient::new(service);
    let status = tokio::time::timeout(support::guards::GUARD, client.unary_call(simple()))
        .await
        .expect("no hang")
        .expect_err("held past the timeout");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    let source = std::error::Error::source(&status).expect("the layer's error");
    assert!(source.is::<tower::timeout::error::Elapsed>(), "{source:?}");
    assert_eq!(peer.started(), 1, "the call reached the server");
}

/// `load_shed` over `concurrency_limit(1)`: while one call is held, the next is refused UNAVAILABLE without
/// reaching the server.
#[tokio::test]
async fn load_shedding_answers_unavailable() {
    let peer = Holding::start().await;
    let service = ServiceBuilder::new()
        .load_shed()
        .concurrency_limit(1)
        .service(channel(peer.addr));
    let client = TestServiceClient::new(service);
    let held = tokio::spawn({
        let mut client = client.clone();
        async move { client.unary_call(simple()).await }
    });
    peer.wait_for_in_flight(1).await;
    let status = client.clone().unary_call(simple()).await.expect_err("shed");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(std::error::Error::source(&status)
        .is_some_and(|s| s.is::<tower::load_shed::error::Overloaded>()));
    peer.release(1);
    tokio::time::timeout(NO_HANG, held)
        .await
        .expect("no hang")
        .expect("task")
        .expect("the held call succeeds");
    assert_eq!(peer.started(), 1, "the shed call never reached the server");
}

/// Every call shape through a timeout, a concurrency limit, a rate limit and load shedding, against the
/// interop server.
#[tokio::test]
async fn every_call_shape_goes_through_the_layers() {
    let addr = support::interop_server().await;
    let service = ServiceBuilder::new()
        .load_shed()
        .rate_limit(100, Duration::from_secs(1))
        .concurrency_limit(2)
        .timeout(NO_HANG)
        .service(channel(addr));
    let mut client = TestServiceClient::new(service);
    call_every_shape(&mut client).await;
}

/// The four call shapes on `client`.
async fn call_every_shape<T>(client: &mut TestServiceClient<T>)
where
    T: tower::Service<GrpcCall, Response = GrpcReply>,
    T::Error: Into<BoxError>,
{
    let unary = client.unary_call(simple()).await.expect("unary");
    assert_eq!(
        unary.message().payload.as_ref().map(|p| p.body.len()),
        Some(8)
    );

    let request = StreamingOutputCallRequest {
        response_parameters: (1..=3)
            .map(|size| ResponseParameters {
                size,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let mut stream = client
        .streaming_output_call(request.clone())
        .await
        .expect("server streaming")
        .into_inner();
    let mut sizes = Vec::new();
    while let Some(message) = stream.message().await.expect("message") {
        sizes.push(message.payload.map_or(0, |p| p.body.len()));
    }
    assert_eq!(sizes, [1, 2, 3]);

    let inputs = (1..=3).map(|n| StreamingInputCallRequest {
        payload: Some(Payload {
            r#type: 0,
            body: vec![0; n * 10].into(),
        }),
        ..Default::default()
    });
    let total = client
        .streaming_input_call(tokio_stream::iter(inputs.collect::<Vec<_>>()))
        .await
        .expect("client streaming");
    assert_eq!(total.message().aggregated_payload_size, 60);

    let mut bidi = client
        .full_duplex_call(tokio_stream::iter(vec![request.clone(), request]))
        .await
        .expect("bidi")
        .into_inner();
    let mut count = 0;
    while let Some(_message) = bidi.message().await.expect("message") {
        count += 1;
    }
    assert_eq!(count, 6, "three answers to each of two requests");
}

/// A `BoxCloneService` (type-erased, clonable) and a `Buffer` (shared by clones, driven by its own task)
/// carry every call shape too.
#[tokio::test]
async fn box_clone_service_and_buffer_fit() {
    let addr = support::interop_server().await;
    let boxed: tower::util::BoxCloneService<GrpcCall, GrpcReply, BoxError> =
        tower::util::BoxCloneService::new(
            ServiceBuilder::new()
                .timeout(NO_HANG)
                .service(channel(addr)),
        );
    let mut client = TestServiceClient::new(boxed);
    call_every_shape(&mut client.clone()).await;
    call_every_shape(&mut client).await;

    let buffered = tower::buffer::Buffer::new(
        ServiceBuilder::new()
            .concurrency_limit(2)
            .service(channel(addr)),
        8,
    );
    let mut client = TestServiceClient::new(buffered);
    call_every_shape(&mut client).await;
    // A status of the channel's keeps its code through the buffer (which wraps the service's errors).
    let status = client
        .unary_call(SimpleRequest {
            response_status: Some(interop_proto::EchoStatus {
                code: Code::NotFound as i32,
                message: "nope".into(),
            }),
            ..Default::default()
        })
        .await
        .expect_err("the server's status");
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    assert_eq!(status.message(), "nope");
}

/// A layer of one's own (`map_request`) sees each call's path, shape and metadata, and what it adds to the
/// metadata goes out with the call (the interop server echoes `x-grpc-test-echo-initial`); a reply taken
/// apart and rebuilt (`map_response`) still decodes.
#[tokio::test]
async fn a_custom_layer_reads_the_path_and_metadata() {
    let addr = support::interop_server().await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let service = ServiceBuilder::new()
        .map_request({
            let seen = Arc::clone(&seen);
            move |mut call: GrpcCall| {
                let tenant = call.metadata().get("x-tenant").map(str::to_owned);
                seen.lock()
                    .expect("lock")
                    .push((call.path().to_owned(), call.shape(), tenant));
                call.metadata_mut()
                    .insert("x-grpc-test-echo-initial", "from-the-layer")
                    .expect("valid metadata");
                call
            }
        })
        // And one that takes a unary reply apart and hands it on rebuilt (a generated client's unary and
        // client-streaming replies arrive decoded: the channel decodes inside the call).
        .map_response(|reply: GrpcReply| match reply.into_decoded() {
            Some(response) => GrpcReply::from_decoded(response),
            None => panic!("only decoded unary replies here"),
        })
        .service(channel(addr));
    let mut client = TestServiceClient::new(service);
    let mut request = Request::new(simple());
    request
        .metadata_mut()
        .insert("x-tenant", "blue")
        .expect("valid metadata");
    let response = client.unary_call(request).await.expect("unary");
    assert_eq!(
        response.metadata().get("x-grpc-test-echo-initial"),
        Some("from-the-layer")
    );
    assert_eq!(
        response.message().payload.as_ref().map(|p| p.body.len()),
        Some(8),
        "the rebuilt reply decodes"
    );
    let _ = client
        .streaming_input_call(tokio_stream::iter(Vec::<StreamingInputCallRequest>::new()))
        .await
        .expect("client streaming");
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(
        seen,
        [
            (
                "/grpc.testing.TestService/UnaryCall".to_owned(),
                grpc_channel::service::CallShape::Unary,
                Some("blue".to_owned())
            ),
            (
                "/grpc.testing.TestService/StreamingInputCall".to_owned(),
                grpc_channel::service::CallShape::ClientStreaming,
                None
            ),
        ]
    );
}

/// A layer's error that is neither a status nor one tower's timeout or load shedding defines is UNKNOWN
/// with its text, through a generated client.
#[tokio::test]
async fn another_layer_error_is_unknown() {
    let addr = support::interop_server().await;
    let service = ServiceBuilder::new()
        .map_err(|_: Status| -> BoxError { "the layer failed".into() })
        .service(channel(addr));
    let mut client = TestServiceClient::new(service);
    let status = client
        .unary_call(SimpleRequest {
            response_status: Some(interop_proto::EchoStatus {
                code: Code::NotFound as i32,
                message: "nope".into(),
            }),
            ..Default::default()
        })
        .await
        .expect_err("mapped");
    assert_eq!(status.code(), Code::Unknown);
    assert_eq!(status.message(), "the layer failed");
    // The default, a plain channel, is unchanged: the server's status as it is.
    let mut plain = TestServiceClient::new(channel(addr));
    let status = plain
        .unary_call(SimpleRequest {
            response_status: Some(interop_proto::EchoStatus {
                code: Code::NotFound as i32,
                message: "nope".into(),
            }),
            ..Default::default()
        })
        .await
        .expect_err("the server's status");
    assert_eq!(status.code(), Code::NotFound);
}

mod holding_peer {
    //! A tonic TestService whose `UnaryCall` counts the calls in it (now and at most) and holds each until
    //! the test releases it ([`Holding::release`]); the rest answer UNIMPLEMENTED.

    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use grpc_feature_tests::testing::test_service_server::{TestService, TestServiceServer};
    use grpc_feature_tests::testing::{SimpleRequest, SimpleResponse};
    use tokio::sync::{Notify, Semaphore};
    use tonic::{Request, Response, Status};

    use super::NO_HANG;

    #[derive(Default)]
    struct Counts {
        in_flight: AtomicUsize,
        max_in_flight: AtomicUsize,
        started: AtomicUsize,
        changed: Notify,
    }

    struct Peer {
        counts: Arc<Counts>,
        gate: Arc<Semaphore>,
    }

    #[tonic::async_trait]
    impl TestService for Peer {
        async fn unary_call(
            &self,
            _request: Request<SimpleRequest>,
        ) -> Result<Response<SimpleResponse>, Status> {
            let now = self.counts.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.counts.max_in_flight.fetch_max(now, Ordering::SeqCst);
            self.counts.started.fetch_add(1, Ordering::SeqCst);
            self.counts.changed.notify_waiters();
            // Decrements when the call ends, released or cancelled.
            struct Leave(Arc<Counts>);
            impl Drop for Leave {
                fn drop(&mut self) {
                    self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
                    self.0.changed.notify_waiters();
                }
            }
            let _leave = Leave(Arc::clone(&self.counts));
            let permit = self
                .gate
                .acquire()
                .await
                .map_err(|_| Status::unavailable("closed"))?;
            permit.forget();
            Ok(Response::new(SimpleResponse::default()))
        }
    }

    /// The running peer and its counts.
    pub(super) struct Holding {
        pub(super) addr: SocketAddr,
        counts: Arc<Counts>,
        gate: Arc<Semaphore>,
    }

    impl Holding {
        /// Starts the peer on a free loopback port; it serves until the test's runtime ends.
        pub(super) async fn start() -> Holding {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let addr = listener.local_addr().expect("addr");
            let counts = Arc::new(Counts::default());
            let gate = Arc::new(Semaphore::new(0));
            let service = TestServiceServer::new(Peer {
                counts: Arc::clone(&counts),
                gate: Arc::clone(&gate),
            });
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            tokio::spawn(
                tonic::transport::Server::builder().serve_with_incoming(service, incoming),
            );
            Holding { addr, counts, gate }
        }

        /// Lets `n` held (or future) calls answer.
        pub(super) fn release(&self, n: usize) {
            self.gate.add_permits(n);
        }

        pub(super) fn max_in_flight(&self) -> usize {
            self.counts.max_in_flight.load(Ordering::SeqCst)
        }

        pub(super) fn started(&self) -> usize {
            self.counts.started.load(Ordering::SeqCst)
        }

        /// Waits (at most [`NO_HANG`]) until `n` calls are in the server.
        pub(super) async fn wait_for_in_flight(&self, n: usize) {
            self.wait_until(|c| c.in_flight.load(Ordering::SeqCst) >= n)
                .await;
        }

        /// Waits (at most [`NO_HANG`]) until no call is in the server (ended, released or cancelled).
        pub(super) async fn wait_for_none_in_flight(&self) {
            self.wait_until(|c| c.in_flight.load(Ordering::SeqCst) == 0)
                .await;
        }

        /// Waits (at most [`NO_HANG`]) until `n` calls have started.
        pub(super) async fn wait_for_started(&self, n: usize) {
            self.wait_until(|c| c.started.load(Ordering::SeqCst) >= n)
                .await;
        }

        async fn wait_until(&self, done: impl Fn(&Counts) -> bool) {
            tokio::time::timeout(NO_HANG, async {
                loop {
                    let changed = self.counts.changed.notified();
                    if done(&self.counts) {
                        return;
                    }
                    changed.await;
                }
            })
            .await
            .expect("the peer's counts reached the figure in time");
        }
    }
}

/// A response message that does not decode as the client's type gives the status the channel's own prost
/// calls give (INTERNAL, naming prost's error), and ends a streaming call: later polls return the same
/// status. `SimpleResponse` and `StreamingOutputCallResponse` carry a message in field 1, where `Payload`
/// has a varint.
#[tokio::test]
async fn a_malformed_reply_fails_as_on_the_channels_own_path() {
    use grpc_channel::service::{ready_call, GrpcCall};
    use interop_proto::paths;

    let addr = support::interop_server().await;
    let mut channel = channel(addr);
    let unary_request = || Request::new(simple());
    let own = channel
        .unary::<_, Payload>(paths::UNARY_CALL, unary_request())
        .await
        .expect_err("malformed");
    let call = GrpcCall::unary(paths::UNARY_CALL, GrpcCall::encode(unary_request()));
    let through = ready_call(&mut channel, call)
        .await
        .expect("reply")
        .decode::<Payload>()
        .expect_err("malformed");
    assert_eq!(through.code(), Code::Internal);
    assert_eq!(through.code(), own.code());
    assert_eq!(through.message(), own.message());

    let streaming_request = || {
        Request::new(StreamingOutputCallRequest {
            response_parameters: (1..=3)
                .map(|size| ResponseParameters {
                    size,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
    };
    let mut own = channel
        .server_streaming::<_, Payload>(paths::STREAMING_OUTPUT_CALL, streaming_request())
        .await
        .expect("headers")
        .into_inner();
    let own = own.message().await.expect_err("malformed");
    let call = GrpcCall::server_streaming(
        paths::STREAMING_OUTPUT_CALL,
        GrpcCall::encode(streaming_request()),
    );
    let mut through = ready_call(&mut channel, call)
        .await
        .expect("reply")
        .decode_streaming::<Payload>()
        .expect("a stream")
        .into_inner();
    let first = through.message().await.expect_err("malformed");
    assert_eq!(first.code(), Code::Internal);
    assert_eq!(first.message(), own.message());
    let again = through.message().await.expect_err("the call ended");
    assert_eq!(again.message(), first.message(), "the call ended with it");
}

/// The channel's statistics after one call that ended with a malformed response message: the totals and
/// the per-address figures.
fn failure_counts(channel: &Channel) -> (u64, u64, u64, u64) {
    let stats = channel.stats();
    let (addr_ok, addr_failed) = stats.addresses.values().fold((0, 0), |(ok, failed), a| {
        (ok + a.calls_succeeded, failed + a.calls_failed)
    });
    (
        stats.calls_succeeded,
        stats.calls_failed,
        addr_ok,
        addr_failed,
    )
}

/// A unary reply that does not decode is a failed call on the channel's own prost path: the call ends
/// INTERNAL and the channel's telemetry (Channel::stats' calls_failed, the address's calls_failed, the
/// `grpc.call` span's status, outlier detection's counts) records the failure. Through the generic path
/// (what every generated method now does) the application gets the same INTERNAL, but the channel has
/// already recorded the call as OK: `GrpcCall::run` (crates/channel/src/service.rs) calls `unary_raw`, whose
/// identity decoder cannot fail, and `GrpcReply::decode` decodes after the call's end was reported. A user
/// sees a 100 % failure rate in the application and 0 % in the channel's figures; outlier detection
/// never ejects a backend that sends garbage.
#[tokio::test]
async fn a_malformed_unary_reply_counts_as_failed_as_on_the_channels_own_path() {
    use grpc_channel::service::{ready_call, GrpcCall};
    use interop_proto::paths;

    let addr = support::interop_server().await;
    let own_channel = channel(addr);
    let own = own_channel
        .unary::<_, Payload>(paths::UNARY_CALL, Request::new(simple()))
        .await
        .expect_err("malformed");
    assert_eq!(own.code(), Code::Internal);
    assert_eq!(
        failure_counts(&own_channel),
        (0, 1, 0, 1),
        "the channel's own path records the failure"
    );

    let mut through_channel = channel(addr);
    // The call carries its response's decoder, as a generated client's does: the channel decodes inside the
    // call (with no decoder it cannot know the response type, and the reply stays encoded).
    let call = GrpcCall::unary(paths::UNARY_CALL, GrpcCall::encode(Request::new(simple())))
        .decoding::<Payload>();
    let through = ready_call(&mut through_channel, call)
        .await
        .expect_err("malformed");
    assert_eq!(through.code(), Code::Internal);
    assert_eq!(
        failure_counts(&through_channel),
        failure_counts(&own_channel),
        "(succeeded, failed, address succeeded, address failed): the generic path records the same failure"
    );
}

/// The same for a client-streaming call: on the channel's own path a malformed response message fails
/// the call in the channel's figures; through the generic path (`client_streaming_with(Codec::raw(), ..)`
/// in `GrpcCall::run`, then `GrpcReply::decode`) the channel counts it OK. `StreamingInputCallResponse`
/// has a varint in field 1, where `SimpleResponse` has a message.
#[tokio::test]
async fn a_malformed_client_streaming_reply_counts_as_failed_as_on_the_channels_own_path() {
    use grpc_channel::service::{ready_call, GrpcCall};
    use interop_proto::paths;

    let requests = || {
        Request::new(tokio_stream::iter(vec![StreamingInputCallRequest {
            payload: Some(Payload {
                body: vec![0; 10].into(),
                ..Default::default()
            }),
            ..Default::default()
        }]))
    };
    let addr = support::interop_server().await;
    let own_channel = channel(addr);
    let own = own_channel
        .client_streaming::<_, interop_proto::SimpleResponse, _>(
            paths::STREAMING_INPUT_CALL,
            requests(),
        )
        .await
        .expect_err("malformed");
    assert_eq!(own.code(), Code::Internal);
    assert_eq!(failure_counts(&own_channel), (0, 1, 0, 1));

    let mut through_channel = channel(addr);
    // With its response's decoder, as a generated client's call.
    let call = GrpcCall::client_streaming(
        paths::STREAMING_INPUT_CALL,
        GrpcCall::encode_stream(requests()),
    )
    .decoding::<interop_proto::SimpleResponse>();
    let through = ready_call(&mut through_channel, call)
        .await
        .expect_err("malformed");
    assert_eq!(through.code(), Code::Internal);
    assert_eq!(
        failure_counts(&through_channel),
        failure_counts(&own_channel),
        "(succeeded, failed, address succeeded, address failed)"
    );
}

/// Dropping a generated call's future mid-flight (what a timeout layer, `select!` or an aborted task does)
/// through `Buffer` over `concurrency_limit(1)`: the server sees the call end (RST_STREAM(CANCEL)), the
/// channel counts it failed (CANCELLED), and the permit is returned: the next call goes through.
#[tokio::test]
async fn dropping_a_call_through_buffer_and_a_limit_cancels_it_and_returns_the_permit() {
    let peer = Holding::start().await;
    let channel = channel(peer.addr);
    let service = ServiceBuilder::new()
        .buffer(4)
        .concurrency_limit(1)
        .service(channel.clone());
    let client = TestServiceClient::new(service);
    let held = tokio::spawn({
        let mut client = client.clone();
        async move { client.unary_call(simple()).await }
    });
    peer.wait_for_in_flight(1).await;
    held.abort();
    let _ = held.await;
    peer.wait_for_none_in_flight().await;
    let stats = channel.stats();
    assert_eq!(
        (stats.calls_succeeded, stats.calls_failed),
        (0, 1),
        "the cancelled call counts failed"
    );
    peer.release(1);
    tokio::time::timeout(NO_HANG, client.clone().unary_call(simple()))
        .await
        .expect("the permit was returned: no hang")
        .expect("the next call succeeds");
}

fn assert_send_static<F: std::future::Future + Send + 'static>(f: F) -> F {
    f
}

/// A generated call over a tower stack can be spawned (its future is `Send + 'static` once the client is
/// moved in), for every call shape, with the layers a user stacks (buffer, timeout, limits, load shed,
/// map_request) and with `BoxCloneService`.
#[tokio::test]
async fn generated_calls_over_a_stack_are_send() {
    let service = ServiceBuilder::new()
        .buffer(8)
        .load_shed()
        .rate_limit(100, Duration::from_secs(1))
        .concurrency_limit(2)
        .timeout(Duration::from_secs(1))
        .map_request(|call: GrpcCall| call)
        .service(Channel::new("ipv4:127.0.0.1:1").expect("channel"));
    let client = TestServiceClient::new(service);
    let mut c = client.clone();
    let unary = assert_send_static(async move { c.unary_call(simple()).await });
    let mut c = client.clone();
    let server = assert_send_static(async move {
        c.streaming_output_call(StreamingOutputCallRequest::default())
            .await
    });
    let mut c = client.clone();
    let client_streaming = assert_send_static(async move {
        c.streaming_input_call(tokio_stream::iter(Vec::<StreamingInputCallRequest>::new()))
            .await
    });
    let mut c = client.clone();
    let bidi = assert_send_static(async move {
        c.full_duplex_call(tokio_stream::iter(Vec::<StreamingOutputCallRequest>::new()))
            .await
    });
    drop((unary, server, client_streaming, bidi));
    let boxed =
        tower::util::BoxCloneService::new(Channel::new("ipv4:127.0.0.1:1").expect("channel"));
    let mut c = TestServiceClient::new(boxed);
    let boxed_call = assert_send_static(async move { c.unary_call(simple()).await });
    drop(boxed_call);
}

/// With the `tonic` feature the channel converts `tonic::Status` into its own (`From<tonic::Status>`), so a
/// layer that fails with a `tonic::Status` (as code shared with a tonic server or a tonic client's stack
/// does) should keep its code through a generated client: PERMISSION_DENIED stays PERMISSION_DENIED.
/// `Status::from_error` (crates/channel/src/service.rs) only looks for the channel's own `Status`, so the
/// tonic status becomes UNKNOWN with its text.
#[tokio::test]
async fn a_layers_tonic_status_keeps_its_code_with_the_tonic_feature() {
    let addr = support::interop_server().await;
    let service = ServiceBuilder::new()
        .map_err(|_: Status| tonic::Status::permission_denied("no ticket"))
        .service(channel(addr));
    let mut client = TestServiceClient::new(service);
    let status = client
        .unary_call(SimpleRequest {
            response_status: Some(interop_proto::EchoStatus {
                code: Code::NotFound as i32,
                message: "nope".into(),
            }),
            ..Default::default()
        })
        .await
        .expect_err("mapped");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert_eq!(status.message(), "no ticket");
}

/// A call's own timeout (`Request::with_timeout`) is, per the guide's "Tower layers" section, "a deadline for
/// the whole call", and gRPC's deadline is fixed when the application makes the call (grpc-go's context,
/// grpc-java's `withDeadlineAfter`). Queued behind `concurrency_limit(1)` while another call is held, a
/// call with a 1 s timeout should end DEADLINE_EXCEEDED after 1 s. The channel computes the deadline when
/// the call reaches it (crates/channel/src/channel.rs, `api_deadline` in `begin`), after the layers, so the
/// call waits for the permit with no deadline at all, here until the guard. On the paused clock.
#[tokio::test(start_paused = true)]
async fn a_calls_own_timeout_counts_the_time_queued_in_the_layers() {
    let peer = Holding::start().await;
    let service = ServiceBuilder::new()
        .concurrency_limit(1)
        .service(channel(peer.addr));
    let client = TestServiceClient::new(service);
    let held = tokio::spawn({
        let mut client = client.clone();
        async move { client.unary_call(simple()).await }
    });
    peer.wait_for_in_flight(1).await;
    let started = tokio::time::Instant::now();
    let queued = tokio::time::timeout(
        Duration::from_secs(60),
        client
            .clone()
            .unary_call(Request::new(simple()).with_timeout(Duration::from_secs(1))),
    )
    .await;
    let waited = started.elapsed();
    peer.release(2);
    let _ = held.await;
    let status = queued
        .unwrap_or_else(|_| panic!("still queued after {waited:?}: its 1 s timeout never applied"))
        .expect_err("its deadline passed while it waited for the permit");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
}

/// A malformed message in a server-streaming reply through the generic path counts as a failed call, as on
/// the channel's own path (the decoder runs inside the channel's receiving half, `Streaming::decoded_with`).
#[tokio::test]
async fn a_malformed_server_streaming_reply_counts_as_failed_as_on_the_channels_own_path() {
    use grpc_channel::service::{ready_call, GrpcCall};
    use interop_proto::paths;

    let request = || {
        Request::new(StreamingOutputCallRequest {
            response_parameters: vec![ResponseParameters {
                size: 4,
                ..Default::default()
            }],
            ..Default::default()
        })
    };
    let addr = support::interop_server().await;
    let own_channel = channel(addr);
    let mut own = own_channel
        .server_streaming::<_, Payload>(paths::STREAMING_OUTPUT_CALL, request())
        .await
        .expect("headers")
        .into_inner();
    own.message().await.expect_err("malformed");
    drop(own);
    let mut through_channel = channel(addr);
    let call =
        GrpcCall::server_streaming(paths::STREAMING_OUTPUT_CALL, GrpcCall::encode(request()));
    let mut through = ready_call(&mut through_channel, call)
        .await
        .expect("reply")
        .decode_streaming::<Payload>()
        .expect("a stream")
        .into_inner();
    through.message().await.expect_err("malformed");
    drop(through);
    assert_eq!(failure_counts(&own_channel).1, 1);
    assert_eq!(
        failure_counts(&through_channel),
        failure_counts(&own_channel)
    );
}

/// A service of one's own behind a generated client, answering without the network (a fake in tests, a
/// cache): it builds its replies with the public constructors (`Response::from_parts`,
/// `GrpcReply::from_unary` with an encoded message, or `GrpcReply::from_decoded` with the call's own
/// decoder), the client decodes them as it decodes the channel's, and a malformed one is INTERNAL.
#[tokio::test]
async fn a_fake_service_answers_a_generated_client() {
    use bytes::Bytes;
    use grpc_channel::{MetadataMap, Response};
    use prost::Message;

    let answer = |body: Vec<u8>| {
        Bytes::from(
            interop_proto::SimpleResponse {
                payload: Some(Payload {
                    body: body.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }
            .encode_to_vec(),
        )
    };
    let seen = Arc::new(Mutex::new(Vec::new()));
    let fake = tower::service_fn({
        let seen = Arc::clone(&seen);
        move |call: GrpcCall| {
            seen.lock()
                .expect("lock")
                .push((call.path().to_owned(), call.shape()));
            let tenant = call.metadata().get("x-tenant").map(str::to_owned);
            let decoder = call.decoder();
            let encoded = match tenant.as_deref() {
                Some("garbage") => Bytes::from_static(b"\x0a\xff"),
                _ => answer(vec![7; 3]),
            };
            async move {
                let mut metadata = MetadataMap::new();
                metadata.insert("x-fake", "yes").expect("valid metadata");
                Ok::<_, Status>(match tenant.as_deref() {
                    // Decoded here with the call's own decoder, as the channel does.
                    Some("decoded") => {
                        let decoder = decoder.expect("a generated unary call has a decoder");
                        GrpcReply::from_decoded(Response::from_parts(metadata, decoder(encoded)?))
                    }
                    _ => GrpcReply::from_unary(Response::from_parts(metadata, encoded)),
                })
            }
        }
    });
    let mut client = TestServiceClient::new(fake);
    for tenant in ["encoded", "decoded"] {
        let mut request = Request::new(simple());
        request
            .metadata_mut()
            .insert("x-tenant", tenant)
            .expect("valid metadata");
        let response = client.unary_call(request).await.expect("the fake's reply");
        assert_eq!(response.metadata().get("x-fake"), Some("yes"), "{tenant}");
        assert_eq!(
            response.message().payload.as_ref().map(|p| p.body.len()),
            Some(3),
            "{tenant}"
        );
    }
    let mut request = Request::new(simple());
    request
        .metadata_mut()
        .insert("x-tenant", "garbage")
        .expect("valid metadata");
    let status = client.unary_call(request).await.expect_err("malformed");
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert_eq!(
        seen.lock().expect("lock").clone(),
        vec![
            (
                interop_proto::paths::UNARY_CALL.to_owned(),
                grpc_channel::service::CallShape::Unary
            );
            3
        ]
    );
}
