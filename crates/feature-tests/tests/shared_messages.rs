//! One crate, one set of message types: a tonic server (tonic-prost-build's messages and
//! `route_guide_server`) and grpc-channel's generated `RouteGuideClient` (grpc-build with
//! `build_messages(false)`, included beside tonic's code with `grpc_channel::include_clients!`) exchange the
//! same `routeguide::Point`, `Feature`... over a loopback socket, in all four call shapes. The helpers below
//! take the messages by reference and are called by the server's trait impl and by the client side alike, so
//! the compiler checks the two sides use one type. Also the generated `RouteGuideClient::connect`: to the
//! live server, and to a closed port (an error naming the cause).

use grpc_test_support as support;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use grpc_channel::ConnectError;
use grpc_feature_tests::routeguide::route_guide_client::RouteGuideClient;
use grpc_feature_tests::routeguide::route_guide_server::{RouteGuide, RouteGuideServer};
use grpc_feature_tests::routeguide::{Feature, Point, Rectangle, RouteNote, RouteSummary};
use support::guards::NO_HANG;
use tokio::net::TcpListener;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_stream::Stream;

fn point(latitude: i32, longitude: i32) -> Point {
    Point {
        latitude,
        longitude,
    }
}

fn feature(name: &str, location: Point) -> Feature {
    Feature {
        name: name.to_owned(),
        location: Some(location),
    }
}

fn note(location: Point, message: &str) -> RouteNote {
    RouteNote {
        location: Some(location),
        message: message.to_owned(),
    }
}

/// The features the server knows.
fn features() -> Vec<Feature> {
    vec![
        feature("well", point(1, 1)),
        feature("mill", point(2, 5)),
        feature("barn", point(4, 2)),
        feature("tower", point(9, 9)),
    ]
}

/// Whether `point` lies in `rect` (corners included). The server filters with it and the client checks
/// with it.
fn contains(rect: &Rectangle, point: &Point) -> bool {
    let (Some(lo), Some(hi)) = (&rect.lo, &rect.hi) else {
        return false;
    };
    (lo.latitude..=hi.latitude).contains(&point.latitude)
        && (lo.longitude..=hi.longitude).contains(&point.longitude)
}

/// The feature at `point`, or a nameless one there. The server answers with it and the client checks
/// with it.
fn feature_at(point: &Point) -> Feature {
    features()
        .into_iter()
        .find(|f| f.location.as_ref() == Some(point))
        .unwrap_or_else(|| feature("", *point))
}

/// The route guide, served by tonic. It records the points `GetFeature` received.
#[derive(Default)]
struct Guide {
    asked: Mutex<Vec<Point>>,
}

type ServerStream<T> = Pin<Box<dyn Stream<Item = Result<T, tonic::Status>> + Send + 'static>>;

#[tonic::async_trait]
impl RouteGuide for Guide {
    async fn get_feature(
        &self,
        request: tonic::Request<Point>,
    ) -> Result<tonic::Response<Feature>, tonic::Status> {
        let point = request.into_inner();
        self.asked.lock().expect("lock").push(point);
        Ok(tonic::Response::new(feature_at(&point)))
    }

    type ListFeaturesStream = ServerStream<Feature>;

    async fn list_features(
        &self,
        request: tonic::Request<Rectangle>,
    ) -> Result<tonic::Response<Self::ListFeaturesStream>, tonic::Status> {
        let rect = request.into_inner();
        let inside: Vec<Result<Feature, tonic::Status>> = features()
            .into_iter()
            .filter(|f| f.location.as_ref().is_some_and(|p| contains(&rect, p)))
            .map(Ok)
            .collect();
        Ok(tonic::Response::new(Box::pin(tokio_stream::iter(inside))))
    }

    async fn record_route(
        &self,
        request: tonic::Request<tonic::Streaming<Point>>,
    ) -> Result<tonic::Response<RouteSummary>, tonic::Status> {
        let mut points = request.into_inner();
        let mut summary = RouteSummary::default();
        while let Some(point) = points.message().await? {
            summary.point_count += 1;
            if !feature_at(&point).name.is_empty() {
                summary.feature_count += 1;
            }
        }
        Ok(tonic::Response::new(summary))
    }

    type RouteChatStream = ServerStream<RouteNote>;

    async fn route_chat(
        &self,
        request: tonic::Request<tonic::Streaming<RouteNote>>,
    ) -> Result<tonic::Response<Self::RouteChatStream>, tonic::Status> {
        let mut notes = request.into_inner();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            let mut earlier: Vec<RouteNote> = Vec::new();
            loop {
                let note = match notes.message().await {
                    Ok(Some(note)) => note,
                    Ok(None) => return,
                    Err(status) => {
                        let _ = tx.send(Err(status)).await;
                        return;
                    }
                };
                for old in earlier.iter().filter(|old| old.location == note.location) {
                    if tx.send(Ok(old.clone())).await.is_err() {
                        return;
                    }
                }
                earlier.push(note);
            }
        });
        Ok(tonic::Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Serves `guide` with tonic on a free loopback port.
async fn serve(guide: Arc<Guide>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(tonic::transport::Server::builder().serve_with_incoming(
        RouteGuideServer::from_arc(guide),
        TcpListenerStream::new(listener),
    ));
    addr
}

#[tokio::test]
async fn a_tonic_server_and_the_generated_client_exchange_the_same_message_types() {
    let guide = Arc::new(Guide::default());
    let addr = serve(Arc::clone(&guide)).await;
    let channel = grpc_channel::Channel::new(format!("ipv4:{addr}")).expect("channel");
    let mut client = RouteGuideClient::new(channel);
    tokio::time::timeout(NO_HANG, async {
        // Unary: one `Point` value, sent by the client and recorded by the server's impl.
        let mill = point(2, 5);
        let answer: Feature = client
            .get_feature(mill)
            .await
            .expect("GetFeature")
            .into_inner();
        assert_eq!(answer, feature_at(&mill));
        assert_eq!(answer.name, "mill");
        assert_eq!(*guide.asked.lock().expect("lock"), vec![mill]);

        // Server streaming: the client checks with the server's own filter.
        let rect = Rectangle {
            lo: Some(point(1, 1)),
            hi: Some(point(4, 5)),
        };
        let mut listed = client
            .list_features(rect)
            .await
            .expect("ListFeatures")
            .into_inner();
        let mut got = Vec::new();
        while let Some(f) = listed.message().await.expect("feature") {
            got.push(f);
        }
        let want: Vec<Feature> = features()
            .into_iter()
            .filter(|f| f.location.as_ref().is_some_and(|p| contains(&rect, p)))
            .collect();
        assert_eq!(got, want);
        assert_eq!(got.len(), 3);

        // Client streaming.
        let route = vec![point(1, 1), point(3, 3), point(9, 9), point(0, 0)];
        let summary: RouteSummary = client
            .record_route(tokio_stream::iter(route))
            .await
            .expect("RecordRoute")
            .into_inner();
        assert_eq!(
            summary,
            RouteSummary {
                point_count: 4,
                feature_count: 2
            }
        );

        // Bidi: each note is answered with the earlier notes at its point.
        let notes = vec![
            note(point(1, 1), "first"),
            note(point(2, 2), "second"),
            note(point(1, 1), "third"),
            note(point(1, 1), "fourth"),
        ];
        let mut replies = client
            .route_chat(tokio_stream::iter(notes.clone()))
            .await
            .expect("RouteChat")
            .into_inner();
        let mut got = Vec::new();
        while let Some(reply) = replies.message().await.expect("note") {
            got.push(reply);
        }
        assert_eq!(got, [notes[0].clone(), notes[0].clone(), notes[2].clone()]);
    })
    .await
    .expect("no hang");
}

#[tokio::test]
async fn generated_connect_reaches_the_live_server() {
    let addr = serve(Arc::new(Guide::default())).await;
    let mut client =
        tokio::time::timeout(NO_HANG, RouteGuideClient::connect(format!("http://{addr}")))
            .await
            .expect("no hang")
            .expect("connect");
    let answer = tokio::time::timeout(NO_HANG, client.get_feature(point(9, 9)))
        .await
        .expect("no hang")
        .expect("GetFeature")
        .into_inner();
    assert_eq!(answer.name, "tower");
}

#[tokio::test]
async fn generated_connect_to_a_closed_port_names_the_cause() {
    // A port that was just free: nothing listens there, so the connection is refused at once.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local address");
    drop(listener);
    let error = tokio::time::timeout(NO_HANG, RouteGuideClient::connect(format!("http://{addr}")))
        .await
        .expect("connect gives up on its own, long before the guard")
        .expect_err("nothing listens there");
    let ConnectError::Unreachable { target: t, status } = &error else {
        panic!("not Unreachable: {error:?}");
    };
    // The channel's own form of the target (`http://` becomes `dns:///`).
    assert!(t.ends_with(&addr.to_string()), "{t}");
    assert_eq!(status.code(), grpc_channel::Code::Unavailable);
    assert!(
        std::error::Error::source(status).is_some(),
        "the connection error is the status's source"
    );
    // The message itself names the address and the cause.
    let text = error.to_string();
    assert!(
        text.contains(&addr.to_string()),
        "the error names the address: {text}"
    );
    assert!(
        text.to_lowercase().contains("refused"),
        "the error names the cause: {text}"
    );
}
