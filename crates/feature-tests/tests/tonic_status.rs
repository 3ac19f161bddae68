//! A tonic handler forwards this channel's failures with `?` (feature `tonic`): a backend tonic server fails
//! with a code, a message, custom metadata (an ASCII key and a `-bin` key) and `grpc-status-details-bin`; a
//! front tonic server calls it through grpc-build's `RouteGuideClient` on a `grpc_channel::Channel` and
//! forwards the failure with `?` (unary) or `tonic::Status::from` (a stream that fails after a message).
//! Callers of the front, this channel's client and tonic's, see what the backend sent, and
//! `grpc_channel::Status::from(tonic_status)` on tonic's view gives this channel's. Real sockets on loopback.

use grpc_test_support as support;

use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Code, ErrorDetails, MetadataMap};
use grpc_feature_tests::routeguide::route_guide_client::RouteGuideClient;
use grpc_feature_tests::routeguide::route_guide_server::{RouteGuide, RouteGuideServer};
use grpc_feature_tests::routeguide::{Feature, Point, Rectangle, RouteNote, RouteSummary};
use support::guards::no_hang;
use tokio::net::TcpListener;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_stream::Stream;

const MESSAGE: &str = "no feature at (3, 4): 100% sure";
const BLOB: &[u8] = &[0, 159, 255, 10];

fn point(latitude: i32, longitude: i32) -> Point {
    Point {
        latitude,
        longitude,
    }
}

/// The `google.rpc.Status` the backend sends in `grpc-status-details-bin`: a RetryInfo of 3 s.
fn details() -> Bytes {
    grpc_channel::Status::with_details(
        Code::FailedPrecondition,
        MESSAGE,
        ErrorDetails::new().with_retry_delay(Duration::from_secs(3)),
    )
    .details_bin()
    .expect("details")
    .clone()
}

/// The backend's failure, as its tonic handler returns it.
fn backend_failure() -> tonic::Status {
    let mut metadata = tonic::metadata::MetadataMap::new();
    metadata.insert("x-shard", "7".parse().expect("ascii"));
    metadata.append("x-shard", "8".parse().expect("ascii"));
    metadata.insert_bin(
        "x-trace-bin",
        tonic::metadata::MetadataValue::from_bytes(BLOB),
    );
    tonic::Status::with_details_and_metadata(
        tonic::Code::FailedPrecondition,
        MESSAGE,
        details(),
        metadata,
    )
}

type ServerStream<T> = Pin<Box<dyn Stream<Item = Result<T, tonic::Status>> + Send + 'static>>;

/// The backend: GetFeature fails; ListFeatures sends one feature, then fails (the status in trailers).
struct Backend;

#[tonic::async_trait]
impl RouteGuide for Backend {
    async fn get_feature(
        &self,
        _request: tonic::Request<Point>,
    ) -> Result<tonic::Response<Feature>, tonic::Status> {
        Err(backend_failure())
    }

    type ListFeaturesStream = ServerStream<Feature>;

    async fn list_features(
        &self,
        _request: tonic::Request<Rectangle>,
    ) -> Result<tonic::Response<Self::ListFeaturesStream>, tonic::Status> {
        let items = vec![
            Ok(Feature {
                name: "well".to_owned(),
                location: Some(point(1, 1)),
            }),
            Err(backend_failure()),
        ];
        Ok(tonic::Response::new(Box::pin(tokio_stream::iter(items))))
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

/// The front: each handler calls the backend through this channel and forwards what it gets.
struct Front {
    backend: RouteGuideClient,
}

#[tonic::async_trait]
impl RouteGuide for Front {
    async fn get_feature(
        &self,
        request: tonic::Request<Point>,
    ) -> Result<tonic::Response<Feature>, tonic::Status> {
        let mut backend = self.backend.clone();
        let feature = backend.get_feature(request.into_inner()).await?; // grpc_channel::Status → tonic::Status
        Ok(tonic::Response::new(feature.into_inner()))
    }

    type ListFeaturesStream = ServerStream<Feature>;

    async fn list_features(
        &self,
        request: tonic::Request<Rectangle>,
    ) -> Result<tonic::Response<Self::ListFeaturesStream>, tonic::Status> {
        let mut backend = self.backend.clone();
        let mut features = backend
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
        Ok(tonic::Response::new(Box::pin(ReceiverStream::new(rx))))
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

/// Serves `guide` with tonic on a free loopback port.
async fn serve(guide: impl RouteGuide) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(tonic::transport::Server::builder().serve_with_incoming(
        RouteGuideServer::new(guide),
        TcpListenerStream::new(listener),
    ));
    addr
}

/// A backend and a front that calls it through this channel; the front's address.
async fn front_and_backend() -> (SocketAddr, SocketAddr) {
    let backend = serve(Backend).await;
    let channel = Channel::new(format!("ipv4:{backend}")).expect("channel");
    let front = serve(Front {
        backend: RouteGuideClient::new(channel),
    })
    .await;
    (front, backend)
}

/// The metadata entries that belong to the failure (the HTTP server's own `date` left out).
fn entries(metadata: &MetadataMap) -> Vec<(String, Vec<u8>)> {
    let mut entries: Vec<(String, Vec<u8>)> = metadata
        .iter()
        .filter(|(key, _)| *key != "date")
        .map(|(key, value)| (key.to_owned(), value.to_vec()))
        .collect();
    entries.sort();
    entries
}

/// What every caller must see: the backend's code, message, metadata and details.
fn assert_backend_failure(status: &grpc_channel::Status, who: &str) {
    assert_eq!(status.code(), Code::FailedPrecondition, "{who}: {status:?}");
    assert_eq!(status.message(), MESSAGE, "{who}");
    assert_eq!(status.metadata().get_all("x-shard"), ["7", "8"], "{who}");
    let blob = status
        .metadata()
        .get_bin("x-trace-bin")
        .unwrap_or_else(|| panic!("{who}: x-trace-bin missing: {status:?}"))
        .expect("base64");
    assert_eq!(&blob[..], BLOB, "{who}");
    assert_eq!(status.details_bin(), Some(&details()), "{who}");
    let delay = status
        .details()
        .expect("details decode")
        .and_then(|d| d.retry_info)
        .and_then(|r| r.retry_delay)
        .and_then(|d| d.to_duration());
    assert_eq!(delay, Some(Duration::from_secs(3)), "{who}");
}

#[tokio::test]
async fn a_tonic_handler_forwards_a_unary_failure_with_the_question_mark() {
    let (front, backend) = front_and_backend().await;

    // The backend seen directly by this channel: the reference.
    let mut direct =
        RouteGuideClient::new(Channel::new(format!("ipv4:{backend}")).expect("channel"));
    let direct = no_hang("direct call", direct.get_feature(point(3, 4)))
        .await
        .expect_err("the backend fails");
    assert_backend_failure(&direct, "the backend, directly");

    // Through the front, with this channel's client.
    let mut client = RouteGuideClient::new(Channel::new(format!("ipv4:{front}")).expect("channel"));
    let forwarded = no_hang("call through the front", client.get_feature(point(3, 4)))
        .await
        .expect_err("the front forwards the failure");
    assert_backend_failure(&forwarded, "through the front");
    assert_eq!(entries(forwarded.metadata()), entries(direct.metadata()));

    // Through the front, with tonic's client: tonic's view, and ours made from it.
    let channel = no_hang(
        "tonic connect",
        tonic::transport::Channel::from_shared(format!("http://{front}"))
            .expect("uri")
            .connect(),
    )
    .await
    .expect("tonic connects");
    let mut grpc = tonic::client::Grpc::new(channel);
    no_hang("tonic ready", grpc.ready()).await.expect("ready");
    let theirs = no_hang(
        "tonic call through the front",
        grpc.unary::<Point, Feature, _>(
            tonic::Request::new(point(3, 4)),
            http::uri::PathAndQuery::from_static("/routeguide.RouteGuide/GetFeature"),
            tonic_prost::ProstCodec::default(),
        ),
    )
    .await
    .expect_err("the front forwards the failure");
    assert_eq!(theirs.code(), tonic::Code::FailedPrecondition);
    assert_eq!(tonic::Code::from(forwarded.code()), theirs.code());
    assert_eq!(theirs.message(), MESSAGE);
    assert_eq!(theirs.details(), &details()[..]);
    let shards: Vec<&str> = theirs
        .metadata()
        .get_all("x-shard")
        .iter()
        .map(|v| v.to_str().expect("ascii"))
        .collect();
    assert_eq!(shards, ["7", "8"]);
    let blob = theirs
        .metadata()
        .get_bin("x-trace-bin")
        .expect("x-trace-bin")
        .to_bytes()
        .expect("base64");
    assert_eq!(&blob[..], BLOB);

    let ours = grpc_channel::Status::from(theirs);
    assert_backend_failure(&ours, "tonic's view, converted");
    assert_eq!(entries(ours.metadata()), entries(direct.metadata()));
}

#[tokio::test]
async fn a_failure_after_a_message_is_forwarded_from_the_trailers() {
    let (front, _backend) = front_and_backend().await;
    let mut client = RouteGuideClient::new(Channel::new(format!("ipv4:{front}")).expect("channel"));
    let rect = Rectangle {
        lo: Some(point(0, 0)),
        hi: Some(point(9, 9)),
    };
    let mut features = no_hang("ListFeatures through the front", client.list_features(rect))
        .await
        .expect("the stream starts")
        .into_inner();
    let first = no_hang("first feature", features.message())
        .await
        .expect("a feature")
        .expect("one feature");
    assert_eq!(first.name, "well");
    let status = no_hang("the failure", features.message())
        .await
        .expect_err("the backend's failure, forwarded");
    assert_backend_failure(&status, "streamed through the front");
    assert_eq!(
        features.trailers().map(entries),
        Some(entries(status.metadata())),
        "the status's metadata is the trailers"
    );
}
