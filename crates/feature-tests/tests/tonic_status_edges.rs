//! The `tonic` feature's conversions at their edges, against real servers on loopback: a backend that sends
//! response headers before failing a unary call, and `-bin` trailers holding comma-joined values. Each test
//! compares what this channel gives with what tonic's own client gives for the same backend, since a tonic
//! user forwarding with `?` expects what tonic would have forwarded.

use grpc_test_support as support;

use std::net::SocketAddr;
use std::pin::Pin;

use bytes::Bytes;
use grpc_channel::{Channel, Code};
use grpc_feature_tests::routeguide::route_guide_client::RouteGuideClient;
use grpc_feature_tests::routeguide::route_guide_server::{RouteGuide, RouteGuideServer};
use grpc_feature_tests::routeguide::{Feature, Point, Rectangle, RouteNote, RouteSummary};
use http::HeaderValue;
use support::guards::no_hang;
use support::h2_server::{handler, response_head, trailers, H2Server, Stream};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

const GET_FEATURE: &str = "/routeguide.RouteGuide/GetFeature";

fn point(latitude: i32, longitude: i32) -> Point {
    Point {
        latitude,
        longitude,
    }
}

type ServerStream<T> =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<T, tonic::Status>> + Send + 'static>>;

/// How the front reaches the backend.
#[derive(Clone)]
enum Backend {
    /// This channel's grpc-build client, forwarding with `?` exactly as the README's row writes it.
    ThisChannel(RouteGuideClient),
    /// tonic's own client, forwarding with `?`: what a tonic user had before.
    Tonic(tonic::transport::Channel),
}

/// A tonic server whose GetFeature asks the backend and forwards its failure with `?`.
struct Front {
    backend: Backend,
}

#[tonic::async_trait]
impl RouteGuide for Front {
    async fn get_feature(
        &self,
        req: tonic::Request<Point>,
    ) -> Result<tonic::Response<Feature>, tonic::Status> {
        match &self.backend {
            Backend::ThisChannel(backend) => {
                // The README's "`?` in a tonic handler" row, word for word.
                let feature = backend.clone().get_feature(req.into_inner()).await?;
                Ok(tonic::Response::new(feature.into_inner()))
            }
            Backend::Tonic(channel) => {
                let feature = tonic_get_feature(channel.clone(), req.into_inner()).await?;
                Ok(tonic::Response::new(feature.into_inner()))
            }
        }
    }

    type ListFeaturesStream = ServerStream<Feature>;

    async fn list_features(
        &self,
        request: tonic::Request<Rectangle>,
    ) -> Result<tonic::Response<Self::ListFeaturesStream>, tonic::Status> {
        // As tests/tonic_status.rs's front: forward each feature, and a failure after the headers with
        // `tonic::Status::from`.
        let Backend::ThisChannel(backend) = &self.backend else {
            return Err(tonic::Status::unimplemented("not in this test"));
        };
        let mut features = backend
            .clone()
            .list_features(request.into_inner())
            .await?
            .into_inner();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            loop {
                let item = match features.message().await {
                    Ok(Some(feature)) => Ok(feature),
                    Ok(None) => return,
                    Err(status) => Err(tonic::Status::from(status)),
                };
                let failed = item.is_err();
                if tx.send(item).await.is_err() || failed {
                    return;
                }
            }
        });
        Ok(tonic::Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn record_route(
        &self,
        _request: tonic::Request<tonic::Streaming<Point>>,
    ) -> Result<tonic::Response<RouteSummary>, tonic::Status> {
        Err(tonic::Status::unimplemented("not in this test"))
    }

    type RouteChatStream = ServerStream<RouteNote>;

    async fn route_chat(
        &self,
        _request: tonic::Request<tonic::Streaming<RouteNote>>,
    ) -> Result<tonic::Response<Self::RouteChatStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("not in this test"))
    }
}

/// GetFeature with tonic's own client (tonic-build's client is off in this crate; this is what it runs).
async fn tonic_get_feature(
    channel: tonic::transport::Channel,
    point: Point,
) -> Result<tonic::Response<Feature>, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    grpc.unary::<Point, Feature, _>(
        tonic::Request::new(point),
        http::uri::PathAndQuery::from_static(GET_FEATURE),
        tonic_prost::ProstCodec::default(),
    )
    .await
}

async fn tonic_channel(addr: SocketAddr) -> tonic::transport::Channel {
    no_hang(
        "tonic connect",
        tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .expect("uri")
            .connect(),
    )
    .await
    .expect("tonic connects")
}

/// Serves `front` with tonic on a free loopback port.
async fn serve(front: Front) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(tonic::transport::Server::builder().serve_with_incoming(
        RouteGuideServer::new(front),
        TcpListenerStream::new(listener),
    ));
    addr
}

/// A backend that reads the request, sends response headers carrying `x-request-id: req-42` (as a
/// grpc-go server does for `grpc.SetHeader` before returning an error), then fails the call in the
/// trailers with FAILED_PRECONDITION and `x-shard: 7`.
async fn headers_then_failure() -> H2Server {
    H2Server::tcp(
        support::h2_server::defaults,
        handler(|mut s: Stream| async move {
            if s.read_to_end().await.is_err() {
                return;
            }
            let mut head = response_head();
            head.headers_mut()
                .insert("x-request-id", HeaderValue::from_static("req-42"));
            let Ok(mut send) = s.respond.send_response(head, false) else {
                return;
            };
            let _ = send.send_trailers(trailers(
                "9",
                &[("grpc-message", "stale"), ("x-shard", "7")],
            ));
        }),
    )
    .await
}

fn ascii(status: &tonic::Status, key: &str) -> Vec<String> {
    status
        .metadata()
        .get_all(key)
        .iter()
        .map(|v| v.to_str().expect("ascii").to_owned())
        .collect()
}

/// The issue asks that `?` in a tonic handler keep the backend's "metadata (trailers included)", and the
/// README presents `?` as "the same" as in tonic. A tonic handler that calls the backend with tonic's client
/// and forwards with `?` hands its caller the failed call's response headers and trailers (tonic's
/// `Grpc::client_streaming` merges the headers into the status: `status.metadata_mut().merge(parts)`).
/// Swapping in this channel's client, the same handler silently drops the response headers: `Status`
/// holds the trailers only (crates/channel/src/wire/tonic_status.rs, the module notes and
/// `From<Status> for tonic::Status`), and a failed unary call's response headers are reachable nowhere else
/// in this crate, so the handler cannot even forward them by hand. A request id, a rate-limit or an
/// authentication challenge the backend sent in its headers never reaches the caller.
#[tokio::test]
async fn a_unary_failure_forwarded_with_the_question_mark_keeps_the_backends_response_headers_as_tonic_does(
) {
    let backend = headers_then_failure().await;

    // Reference: tonic's client calling the backend directly.
    let direct = no_hang(
        "tonic, directly",
        tonic_get_feature(tonic_channel(backend.addr()).await, point(1, 2)),
    )
    .await
    .expect_err("the backend fails");
    assert_eq!(direct.code(), tonic::Code::FailedPrecondition);
    assert_eq!(ascii(&direct, "x-request-id"), ["req-42"], "tonic's view");
    assert_eq!(ascii(&direct, "x-shard"), ["7"], "tonic's view");

    // A front built on tonic's client, forwarding with `?`: the caller sees both.
    let tonic_front = serve(Front {
        backend: Backend::Tonic(tonic_channel(backend.addr()).await),
    })
    .await;
    let via_tonic = no_hang(
        "through the tonic-client front",
        tonic_get_feature(tonic_channel(tonic_front).await, point(1, 2)),
    )
    .await
    .expect_err("forwarded");
    assert_eq!(ascii(&via_tonic, "x-request-id"), ["req-42"]);
    assert_eq!(ascii(&via_tonic, "x-shard"), ["7"]);

    // The same front on this channel's client.
    let ours_front = serve(Front {
        backend: Backend::ThisChannel(RouteGuideClient::new(
            Channel::new(backend.target()).expect("channel"),
        )),
    })
    .await;
    let via_ours = no_hang(
        "through this channel's front",
        tonic_get_feature(tonic_channel(ours_front).await, point(1, 2)),
    )
    .await
    .expect_err("forwarded");
    assert_eq!(via_ours.code(), tonic::Code::FailedPrecondition);
    assert_eq!(via_ours.message(), "stale");
    assert_eq!(ascii(&via_ours, "x-shard"), ["7"], "the trailers cross");
    assert_eq!(
        ascii(&via_ours, "x-request-id"),
        ["req-42"],
        "the backend's response headers are lost on the way: {:?}",
        via_ours.metadata()
    );
}

/// gRPC lets several values of a `-bin` key arrive comma-joined in one field (doc/PROTOCOL-HTTP2.md;
/// grpc-go splits them before decoding), and this crate reads them so: `MetadataMap::get_bin_all` splits
/// first. The conversion's notes say what is left out of a converted tonic status is what "this crate's
/// MetadataMap could not hold". But `From<tonic::Status> for Status` decodes each tonic value whole
/// (`BinaryMetadataValue::to_bytes`, which does not split) and drops the entry when that fails
/// (crates/channel/src/wire/tonic_status.rs, the `KeyAndValueRef::Binary` arm's `Err(_) => continue`): the
/// same trailers that this channel reads as two values vanish from a tonic client's status converted here,
/// though `MetadataMap` holds them fine (it holds them when they come off the wire).
#[tokio::test]
async fn a_tonic_status_converted_keeps_comma_joined_bin_values_as_this_channel_reads_them() {
    let backend = H2Server::tcp(
        support::h2_server::defaults,
        handler(|mut s: Stream| async move {
            if s.read_to_end().await.is_err() {
                return;
            }
            s.trailers_only("5", &[("x-trace-bin", "AQ,Ag")]);
        }),
    )
    .await;

    // This channel, directly: two values.
    let mut ours = RouteGuideClient::new(Channel::new(backend.target()).expect("channel"));
    let direct = no_hang("this channel, directly", ours.get_feature(point(1, 2)))
        .await
        .expect_err("NOT_FOUND");
    assert_eq!(direct.code(), Code::NotFound);
    let expected = vec![Bytes::from_static(&[1]), Bytes::from_static(&[2])];
    assert_eq!(
        direct
            .metadata()
            .get_bin_all("x-trace-bin")
            .expect("base64"),
        expected
    );

    // tonic's client, then converted: the same trailers should give the same values.
    let theirs = no_hang(
        "tonic, directly",
        tonic_get_feature(tonic_channel(backend.addr()).await, point(1, 2)),
    )
    .await
    .expect_err("NOT_FOUND");
    assert!(
        theirs.metadata().contains_key("x-trace-bin"),
        "tonic holds it"
    );
    let converted = grpc_channel::Status::from(theirs);
    assert_eq!(
        converted
            .metadata()
            .get_bin_all("x-trace-bin")
            .expect("base64"),
        expected,
        "converted from tonic: {:?}",
        converted.metadata()
    );
}

/// A JSON-shaped status message of about `len` bytes, as backends that put a structured error in
/// `grpc-message` send it: spaces, quotes and braces, all printable ASCII that gRPC sends unencoded.
fn json_message(len: usize) -> String {
    let unit = r#"{"field": "name", "reason": "too long"} "#;
    unit.repeat(len / unit.len() + 1)[..len].to_owned()
}

/// doc/PROTOCOL-HTTP2.md percent-encodes only bytes outside 0x20..=0x7E and `%`, so a backend (grpc-go,
/// grpc-java, this crate's `Status::as_headers`) sends a JSON-shaped message of 10,000 bytes as 10,000 bytes,
/// well inside this channel's 16 KiB header list limit: called directly, the failure arrives whole. The guide
/// says the backend's code and message "reach the caller as the backend sent them" through a front that
/// forwards with `?`. But the message crosses as is (crates/channel/src/wire/tonic_status.rs,
/// `From<Status> for tonic::Status`), and tonic's server percent-encodes it with a wider set (space, `"`,
/// `#`, `<`, `>`, `` ` ``, `?`, `{`, `}` too), here nearly doubling it: the front's Trailers-Only block goes
/// over the caller's limit and the caller gets RESOURCE_EXHAUSTED about header sizes instead of the
/// backend's FAILED_PRECONDITION. The conversion is where this crate hands the message to tonic; bounding
/// it there (or saying so) is what keeps the code intact.
#[tokio::test]
async fn a_long_message_forwarded_with_the_question_mark_keeps_the_backends_code() {
    let message = json_message(10_000);
    let backend = {
        let message = message.clone();
        H2Server::tcp(
            support::h2_server::defaults,
            handler(move |mut s: Stream| {
                let message = message.clone();
                async move {
                    if s.read_to_end().await.is_err() {
                        return;
                    }
                    s.trailers_only("9", &[("grpc-message", &message)]);
                }
            }),
        )
        .await
    };

    // Directly: the whole failure.
    let mut direct = RouteGuideClient::new(Channel::new(backend.target()).expect("channel"));
    let direct = no_hang("this channel, directly", direct.get_feature(point(1, 2)))
        .await
        .expect_err("the backend fails");
    assert_eq!(direct.code(), Code::FailedPrecondition, "{direct:?}");
    assert_eq!(direct.message(), message);

    // Through a front that forwards with `?`.
    let front = serve(Front {
        backend: Backend::ThisChannel(RouteGuideClient::new(
            Channel::new(backend.target()).expect("channel"),
        )),
    })
    .await;
    let mut client = RouteGuideClient::new(Channel::new(format!("ipv4:{front}")).expect("channel"));
    let forwarded = no_hang("through the front", client.get_feature(point(1, 2)))
        .await
        .expect_err("the front forwards the failure");
    assert_eq!(
        forwarded.code(),
        Code::FailedPrecondition,
        "{}",
        forwarded.message()
    );
}

/// A channel to `target` accepting header lists of up to 4 MiB (grpc-go's default is 16 MiB).
fn roomy_channel(target: String) -> Channel {
    let mut settings = grpc_channel::Http2Settings::default();
    settings.max_header_list_size = 4 << 20;
    Channel::builder(target)
        .http2_settings(settings)
        .build()
        .expect("channel")
}

/// A status this channel accepted must cross into tonic as something tonic can send. A backend's trailers
/// repeating one small key 25,000 times (about 25 KB on the wire with HPACK indexing, 875 KB as the header
/// list counts it) fit a channel whose header list limit is raised to 4 MiB. The front forwards the
/// stream's failure with `tonic::Status::from` (crates/channel/src/wire/tonic_status.rs copies every
/// entry, without bound), and tonic's encoder builds the trailers with
/// `HeaderMap::with_capacity(3 + metadata.len())`, which panics ("size overflows MAX_SIZE") past about
/// 24,576 entries: the panic takes down the front's connection task, and its caller gets a transport error
/// instead of the backend's FAILED_PRECONDITION. A peer decides that count; the conversion must keep it
/// within what tonic can hold (dropping the excess, or the metadata), so that the code and message cross.
#[tokio::test]
async fn a_stream_failure_with_a_huge_trailer_map_forwarded_to_tonic_keeps_the_backends_code() {
    let backend = H2Server::tcp(
        support::h2_server::defaults,
        handler(|mut s: Stream| async move {
            if s.read_to_end().await.is_err() {
                return;
            }
            let Some(mut send) = s.headers() else { return };
            let mut t = trailers("9", &[("grpc-message", "stale")]);
            for _ in 0..25_000 {
                t.append("x-a", HeaderValue::from_static("v"));
            }
            let _ = send.send_trailers(t);
        }),
    )
    .await;
    let rect = Rectangle {
        lo: Some(point(0, 0)),
        hi: Some(point(9, 9)),
    };

    // Directly: the backend's failure, with every entry.
    let mut direct = RouteGuideClient::new(roomy_channel(backend.target()));
    let mut stream = no_hang("directly", direct.list_features(rect))
        .await
        .expect("the stream starts")
        .into_inner();
    let status = no_hang("directly, the failure", stream.message())
        .await
        .expect_err("the backend fails");
    assert_eq!(
        status.code(),
        Code::FailedPrecondition,
        "{}",
        status.message()
    );
    assert_eq!(status.metadata().len(), 25_000);

    // Through the front.
    let front = serve(Front {
        backend: Backend::ThisChannel(RouteGuideClient::new(roomy_channel(backend.target()))),
    })
    .await;
    let mut client = RouteGuideClient::new(roomy_channel(format!("ipv4:{front}")));
    let forwarded = match no_hang("through the front", client.list_features(rect)).await {
        Err(status) => status,
        Ok(response) => {
            let mut stream = response.into_inner();
            no_hang("through the front, the failure", stream.message())
                .await
                .expect_err("the front forwards the failure")
        }
    };
    assert_eq!(
        forwarded.code(),
        Code::FailedPrecondition,
        "{}",
        forwarded.message()
    );
}
