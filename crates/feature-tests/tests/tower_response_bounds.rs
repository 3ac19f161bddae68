//! What the tower adapter buffers of a response for a tonic client, on a channel with no receive limit of
//! its own: the tonic client's `max_decoding_message_size` governs, but the adapter hands it whole messages,
//! so a message is buffered before tonic can check its prefix. The adapter's own bound (64 MiB) refuses a
//! message whose prefix announces more, before buffering any of it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::tower::ChannelService;
use grpc_channel::Channel;
use grpc_feature_tests::testing::test_service_client::TestServiceClient as TonicClient;
use grpc_feature_tests::testing::SimpleRequest;

/// An h2 server that answers every call with response headers and a message prefix announcing
/// `announced` bytes, then pushes as much of that message as the client's flow control lets it (counting
/// the bytes in `pushed`), and never finishes the message.
async fn huge_message_server(announced: u32, pushed: Arc<AtomicUsize>) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let conn_pushed = pushed.clone();
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(tcp).await else {
                    return;
                };
                while let Some(Ok((_req, mut respond))) = conn.accept().await {
                    let pushed = conn_pushed.clone();
                    tokio::spawn(async move {
                        let head = http::Response::builder()
                            .header("content-type", "application/grpc")
                            .body(())
                            .expect("head");
                        let Ok(mut send) = respond.send_response(head, false) else {
                            return;
                        };
                        let mut prefix = vec![0u8];
                        prefix.extend_from_slice(&announced.to_be_bytes());
                        if send.send_data(Bytes::from(prefix), false).is_err() {
                            return;
                        }
                        let chunk = Bytes::from(vec![b'a'; 64 << 10]);
                        loop {
                            send.reserve_capacity(chunk.len());
                            let cap = match std::future::poll_fn(|cx| send.poll_capacity(cx)).await
                            {
                                Some(Ok(cap)) => cap,
                                _ => return,
                            };
                            if cap == 0 {
                                continue;
                            }
                            if send.send_data(chunk.slice(..cap), false).is_err() {
                                return;
                            }
                            pushed.fetch_add(cap, Ordering::Relaxed);
                        }
                    });
                }
            });
        }
    });
    addr
}

/// A tonic client with tonic's default `max_decoding_message_size` (4 MiB) over `ChannelService` on a
/// channel with no receive limit of its own; the server announces a 1 GiB message and pushes its bytes as
/// fast as flow control lets it. The call fails at the prefix, naming the adapter's bound, with little
/// taken from the server.
#[tokio::test]
async fn a_huge_announced_message_is_refused_at_its_prefix() {
    let pushed = Arc::new(AtomicUsize::new(0));
    let addr = huge_message_server(1 << 30, pushed.clone()).await;
    let channel = Channel::new(format!("ipv4:{addr}")).expect("channel");
    let mut client = TonicClient::new(ChannelService::new(channel));
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        client.unary_call(SimpleRequest::default()),
    )
    .await;
    let buffered = pushed.load(Ordering::Relaxed);
    match result {
        Ok(Err(status)) => {
            assert!(
                buffered < 32 << 20,
                "refused ({status:?}), but only after the adapter took {buffered} bytes"
            );
            assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
            assert!(
                status.message().contains("tower adapter")
                    && status.message().contains("max_receive_message_size"),
                "the error names the bound and how to raise it: {status:?}"
            );
        }
        Ok(Ok(_)) => panic!("a 1 GiB message cannot have been decoded"),
        Err(_) => panic!(
            "the tonic client (limit 4 MiB) never saw the 1 GiB prefix within 10 s: the adapter \
             buffered {buffered} bytes of the announced message waiting for all of it"
        ),
    }
}
