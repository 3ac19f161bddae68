//! `Channel::unary` is no longer an `async fn` (it returns
//! `impl Future + use<'a, Req, Resp>`); the generated clients' futures must still be `Send` (spawnable) and
//! `'static` once the client is moved in.

use grpc_build_test::kitchen::sink::v1::sink_client::SinkClient;
use grpc_build_test::kitchen::types::Text;
use grpc_channel::{Channel, Request};

fn assert_send_static<T: Send + 'static>(t: T) -> T {
    t
}

#[tokio::test]
async fn generated_client_calls_can_be_spawned() {
    let channel = Channel::new("ipv4:127.0.0.1:1").expect("channel");
    let client = SinkClient::new(channel.clone());
    // Built, never polled: nothing is sent.
    let mut c = client.clone();
    let unary = assert_send_static(async move { c.echo(Text::default()).await });
    let mut c = client.clone();
    let empty = assert_send_static(async move { c.ping(()).await });
    let mut c = client.clone();
    let split = assert_send_static(async move { c.split(Request::new(Text::default())).await });
    drop((unary, empty, split));
    // Spawned: the channel's target refuses connections, so each fails UNAVAILABLE.
    let mut c = client.clone();
    let status = tokio::spawn(async move { c.echo(Text::default()).await })
        .await
        .expect("joined")
        .expect_err("nothing listens");
    assert_eq!(status.code(), grpc_channel::Code::Unavailable);
}
