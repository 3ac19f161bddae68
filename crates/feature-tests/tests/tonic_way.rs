//! A program written the tonic way runs against a tonic server: an eagerly connected channel with a
//! per-channel timeout, a generated client with an interceptor that inserts metadata (and fails with a
//! `Status` shorthand), client-wide compression and limits, and `Request::set_timeout`. The client code is
//! the README's first example, word for word (checked below), so the README cannot drift from what runs.
//!
//! The tonic server (gzip both ways) records what it saw: the `authorization` values, the request's
//! `grpc-encoding`, and answers one point with a feature larger than the channel's 4 MiB default, which only
//! the client's `max_decoding_message_size` lets through.

use grpc_test_support as support;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use grpc_feature_tests::routeguide;
use grpc_feature_tests::routeguide::route_guide_server::{RouteGuide, RouteGuideServer};
use grpc_feature_tests::routeguide::{Feature, Rectangle, RouteNote, RouteSummary};
use support::guards::NO_HANG;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_stream::Stream;

// README:begin
use std::time::Duration;

use grpc_channel::{CallInfo, Channel, Code, Encoding, Request, Status};
use routeguide::route_guide_client::RouteGuideClient;
use routeguide::Point;

async fn run(addr: &str, token: &str) -> Result<String, Box<dyn std::error::Error>> {
    // Connects now: an unreachable server is an error here, not on the first call.
    let channel = Channel::builder(addr)
        .timeout(Duration::from_secs(10)) // every call that sets no timeout of its own
        .connect()
        .await?;
    let token = format!("Bearer {token}");
    let auth = move |call: &mut CallInfo<'_>| -> Result<(), Status> {
        call.metadata_mut()
            .insert("authorization", &token) // replaces any earlier value
            .map_err(|e| Status::invalid_argument(e.to_string()))
    };
    let mut client = RouteGuideClient::with_interceptor(channel, auth)
        .send_compressed(Encoding::Gzip)
        .accept_compressed(Encoding::Gzip)
        .max_decoding_message_size(16 * 1024 * 1024)
        .max_encoding_message_size(1024 * 1024);

    // The server has a 6 MiB feature at (0, 0): over the channel's 4 MiB default, under this client's.
    let mut request = Request::new(Point::default());
    request.set_timeout(Duration::from_secs(2));
    let big = client.get_feature(request).await?.into_inner();

    let nowhere = Point {
        latitude: -1,
        longitude: -1,
    };
    match client.get_feature(nowhere).await {
        Err(status) if status.code() == Code::NotFound => {}
        other => return Err(format!("expected NOT_FOUND, got {other:?}").into()),
    }
    Ok(big.name)
}
// README:end

/// The size of the feature name at (0, 0): over the channel's 4 MiB default limit.
const BIG: usize = 6 << 20;

/// The route guide, served by tonic with gzip both ways; it records what each call carried.
#[derive(Default)]
struct Guide {
    authorization: Mutex<Vec<Vec<String>>>,
    encodings: Mutex<Vec<Option<String>>>,
}

type ServerStream<T> = Pin<Box<dyn Stream<Item = Result<T, tonic::Status>> + Send + 'static>>;

#[tonic::async_trait]
impl RouteGuide for Guide {
    async fn get_feature(
        &self,
        request: tonic::Request<Point>,
    ) -> Result<tonic::Response<Feature>, tonic::Status> {
        let md = request.metadata();
        let values = md
            .get_all("authorization")
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect();
        self.authorization.lock().expect("lock").push(values);
        let encoding = md
            .get("grpc-encoding")
            .and_then(|v| v.to_str().ok().map(str::to_owned));
        self.encodings.lock().expect("lock").push(encoding);
        let point = request.into_inner();
        if point.latitude < 0 {
            return Err(tonic::Status::not_found("no feature there"));
        }
        Ok(tonic::Response::new(Feature {
            // Compressible: gzip sends a few KiB of it.
            name: "x".repeat(BIG),
            location: Some(point),
        }))
    }

    type ListFeaturesStream = ServerStream<Feature>;

    async fn list_features(
        &self,
        _: tonic::Request<Rectangle>,
    ) -> Result<tonic::Response<Self::ListFeaturesStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("not in this test"))
    }

    async fn record_route(
        &self,
        _: tonic::Request<tonic::Streaming<Point>>,
    ) -> Result<tonic::Response<RouteSummary>, tonic::Status> {
        Err(tonic::Status::unimplemented("not in this test"))
    }

    type RouteChatStream = ServerStream<RouteNote>;

    async fn route_chat(
        &self,
        _: tonic::Request<tonic::Streaming<RouteNote>>,
    ) -> Result<tonic::Response<Self::RouteChatStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("not in this test"))
    }
}

/// Serves `guide` with tonic (gzip accepted and sent, decoding up to 8 MiB) on a free loopback port.
async fn serve(guide: Arc<Guide>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local address");
    let service = RouteGuideServer::from_arc(guide)
        .accept_compressed(tonic::codec::CompressionEncoding::Gzip)
        .send_compressed(tonic::codec::CompressionEncoding::Gzip)
        .max_encoding_message_size(8 << 20);
    tokio::spawn(
        tonic::transport::Server::builder()
            .serve_with_incoming(service, TcpListenerStream::new(listener)),
    );
    addr
}

#[tokio::test]
async fn a_program_written_the_tonic_way_runs_against_a_tonic_server() {
    let guide = Arc::new(Guide::default());
    let addr = serve(Arc::clone(&guide)).await;
    let name = tokio::time::timeout(NO_HANG, run(&format!("http://{addr}"), "s3cret"))
        .await
        .expect("no hang")
        .expect("the program succeeds");
    assert_eq!(
        name.len(),
        BIG,
        "the 6 MiB feature came through the 16 MiB client limit"
    );
    assert_eq!(
        *guide.authorization.lock().expect("lock"),
        vec![vec!["Bearer s3cret".to_owned()]; 2],
        "one authorization value per call"
    );
    assert_eq!(
        *guide.encodings.lock().expect("lock"),
        vec![Some("gzip".to_owned()); 2],
        "requests went gzip-compressed"
    );
}

#[tokio::test]
async fn without_the_client_limit_the_channel_default_refuses_the_big_reply() {
    let addr = serve(Arc::new(Guide::default())).await;
    let channel = Channel::builder(format!("http://{addr}"))
        .connect()
        .await
        .expect("connect");
    let mut client = RouteGuideClient::new(channel).accept_compressed(Encoding::Gzip);
    let status = tokio::time::timeout(NO_HANG, client.get_feature(Point::default()))
        .await
        .expect("no hang")
        .expect_err("over the channel's 4 MiB default");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("max_decoding_message_size"),
        "the error says where to raise the limit: {status}"
    );
}

#[tokio::test]
async fn an_unreachable_server_fails_the_program_at_connect() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local address");
    drop(listener);
    let err = tokio::time::timeout(NO_HANG, run(&format!("http://{addr}"), "t"))
        .await
        .expect("no hang")
        .expect_err("nothing listens");
    assert!(
        err.downcast_ref::<grpc_channel::ConnectError>().is_some(),
        "the error is connect's: {err}"
    );
}

/// The README's first example is this file's client code, word for word.
#[test]
fn the_readme_first_example_is_this_program() {
    let this = include_str!("tonic_way.rs");
    let begin = this.find("// README:begin\n").expect("begin marker") + "// README:begin\n".len();
    let end = this.find("// README:end").expect("end marker");
    let program = &this[begin..end];
    let readme = include_str!("../../../README.md");
    let first = readme
        .split("```rust\n")
        .nth(1)
        .and_then(|block| block.split("```").next())
        .expect("the README has a rust code block");
    assert!(
        first.contains(program),
        "README.md's first rust block must contain, verbatim, the program between the README markers of \
         crates/feature-tests/tests/tonic_way.rs:\n{program}"
    );
}
