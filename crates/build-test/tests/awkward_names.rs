//! The generated clients for protos with awkward names compile and have the methods one expects: keywords
//! (`r#type`, `r#loop`, `r#fn`), a message named `Self`, `HTTPService`, nested packages, and an RPC named
//! `Connect`, which keeps its name (the client then has no `connect(dst)` constructor).

use grpc_build_test::adv::adv::{connect, names};
use grpc_build_test::adv_split::adv as split;

#[tokio::test]
async fn awkward_names_compile_and_are_callable() {
    let channel = grpc_channel::Channel::new("127.0.0.1:1").expect("channel");
    let mut http = names::http_service_client::HttpServiceClient::new(channel.clone());
    drop(http.r#type(names::Self_ { x: String::new() }));
    let mut second = names::second_client::SecondClient::new(channel.clone());
    drop(second.r#loop(names::Request::default()));
    let mut inner = names::inner::inner_client::InnerClient::new(channel.clone());
    drop(inner.r#fn(names::inner::Deep::default()));
    let mut c = connect::connect_api_client::ConnectApiClient::new(channel.clone());
    drop(c.connect(connect::ConnectRequest::default()));
    drop(c.new_rpc(connect::ConnectRequest::default()));
    // The other helpers are still there.
    let _c = connect::connect_api_client::ConnectApiClient::with_interceptor(
        channel.clone(),
        |_: &mut grpc_channel::CallInfo<'_>| Ok(()),
    )
    .send_compressed(grpc_channel::Encoding::Gzip);
    let mut s = split::connect::connect_api_client::ConnectApiClient::new(channel);
    drop(s.connect(split::connect::ConnectRequest::default()));
}

/// RPCs named like tower's `call`, `poll_ready`, `ready` and the client's own `into_inner`, `clone`: the
/// generated client compiles, each RPC is a method of its own, and the client over a channel still clones
/// (`Clone::clone` stays reachable) and calls.
#[tokio::test]
async fn rpcs_named_like_tower_and_client_items_compile_and_call() {
    use grpc_build_test::adv::adv::tower::service::awkward_client::AwkwardClient;
    use grpc_build_test::adv::adv::tower::service::T;
    use grpc_build_test::adv_split::adv::tower::service::awkward_client::AwkwardClient as SplitClient;

    let channel = grpc_channel::Channel::new("ipv4:127.0.0.1:1").expect("channel");
    let mut client = AwkwardClient::new(channel.clone());
    let mut copy = Clone::clone(&client);
    let status = client
        .call(T::default())
        .await
        .expect_err("nothing listens");
    assert_eq!(status.code(), grpc_channel::Code::Unavailable);
    let status = copy
        .poll_ready(T::default())
        .await
        .expect_err("nothing listens");
    assert_eq!(status.code(), grpc_channel::Code::Unavailable);
    let status = client
        .ready_call(T::default())
        .await
        .expect_err("nothing listens");
    assert_eq!(status.code(), grpc_channel::Code::Unavailable);
    let mut split = SplitClient::new(channel);
    let status = split
        .into_inner(grpc_build_test::adv_split::adv::tower::service::T::default())
        .await
        .expect_err("nothing listens");
    assert_eq!(status.code(), grpc_channel::Code::Unavailable);
}
