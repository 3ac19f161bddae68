//! Calls every method of the generated `SinkClient` (all four RPC kinds, messages from two packages and
//! `google.protobuf.Empty`) against a small h2 server on 127.0.0.1, and checks that the `.proto` comments
//! became doc comments; and the same client generated without messages (`build_messages(false)`), over
//! messages generated apart.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_core::Stream;
use grpc_build_test::kitchen::sink::v1::sink_client::SinkClient;
use grpc_build_test::kitchen::sink::v1::{Tally, Word};
use grpc_build_test::kitchen::types::Text;
use grpc_channel::{Channel, Code, Encoding, Request, Status};
use interop::server_call::{h2_server_builder, ServerCall};
use prost::Message;
use tokio::net::TcpListener;

/// Every test ends within this.
const LIMIT: Duration = Duration::from_secs(20);

fn text(s: &str) -> Text {
    Text { text: s.to_owned() }
}

/// Starts the Sink server on 127.0.0.1:0 and returns a client for it.
async fn client() -> SinkClient {
    let addr = start_server().await;
    let channel = Channel::new(format!("ipv4:{addr}")).expect("channel");
    SinkClient::new(channel)
}

/// Starts the Sink server on 127.0.0.1:0.
async fn start_server() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(async move {
        while let Ok((tcp, peer)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut conn) = h2_server_builder().handshake::<_, Bytes>(tcp).await else {
                    return;
                };
                while let Some(Ok((request, respond))) = conn.accept().await {
                    tokio::spawn(handle(ServerCall::new(request, respond, peer)));
                }
            });
        }
    });
    addr
}

async fn handle(mut call: ServerCall) {
    if let Some(v) = call.request_headers.get("x-echo").cloned() {
        call.initial_metadata.insert("x-echo", v);
    }
    if call.request_headers.contains_key("grpc-timeout") {
        call.trailing_metadata
            .insert("x-timeout-seen", http::HeaderValue::from_static("yes"));
    }
    // What the client compressed with and advertised, for the client-defaults tests.
    for (header, seen) in [
        ("grpc-encoding", "x-seen-encoding"),
        ("grpc-accept-encoding", "x-seen-accept"),
    ] {
        let value = call
            .request_headers
            .get(header)
            .cloned()
            .unwrap_or_else(|| http::HeaderValue::from_static("-"));
        call.trailing_metadata.insert(seen, value);
    }
    let status = match dispatch(&mut call).await {
        Ok(()) => Status::new(Code::Ok, ""),
        Err(status) => status,
    };
    call.finish(&status);
}

async fn next<M: Message + Default>(call: &mut ServerCall) -> Result<Option<M>, Status> {
    match call.next_message().await? {
        None => Ok(None),
        Some(received) => M::decode(received.payload)
            .map(Some)
            .map_err(|e| Status::new(Code::Internal, e.to_string())),
    }
}

async fn dispatch(call: &mut ServerCall) -> Result<(), Status> {
    match call.path.as_str() {
        "/kitchen.sink.v1.Sink/Ping" => {
            next::<()>(call).await?;
            call.send_message(&[], false).await
        }
        "/kitchen.sink.v1.Sink/Echo" => {
            let request: Text = next(call).await?.unwrap_or_default();
            let echo = call
                .request_headers
                .get("x-echo")
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .unwrap_or_default();
            let reply = text(&format!("{}|{echo}", request.text));
            call.send_message(&reply.encode_to_vec(), false).await
        }
        "/kitchen.sink.v1.Sink/Split" => {
            let request: Text = next(call).await?.unwrap_or_default();
            for (index, word) in request.text.split_whitespace().enumerate() {
                let word = Word {
                    word: word.to_owned(),
                    index: index as u32,
                };
                call.send_message(&word.encode_to_vec(), false).await?;
            }
            Ok(())
        }
        "/kitchen.sink.v1.Sink/Count" => {
            let mut tally = Tally::default();
            while let Some(t) = next::<Text>(call).await? {
                tally.messages += 1;
                tally.words += t.text.split_whitespace().count() as u32;
            }
            call.send_message(&tally.encode_to_vec(), false).await
        }
        "/kitchen.sink.v1.Sink/Shout" => {
            while let Some(t) = next::<Text>(call).await? {
                if t.text == "fail" {
                    return Err(Status::new(Code::InvalidArgument, "told to fail"));
                }
                let reply = text(&t.text.to_uppercase());
                call.send_message(&reply.encode_to_vec(), false).await?;
            }
            Ok(())
        }
        other => Err(Status::new(Code::Unimplemented, other.to_owned())),
    }
}

async fn bounded<F: Future>(test: F) -> F::Output {
    tokio::time::timeout(LIMIT, test)
        .await
        .expect("the test took too long")
}

#[tokio::test]
async fn unary_with_google_protobuf_empty() {
    bounded(async {
        let mut client = client().await;
        let response = client.ping(()).await.expect("Ping");
        let () = response.into_inner();
    })
    .await;
}

#[tokio::test]
async fn unary_with_a_message_and_with_a_request_carrying_metadata_and_a_timeout() {
    bounded(async {
        let mut client = client().await;
        let response = client.echo(text("plain")).await.expect("Echo");
        assert_eq!(response.get_ref().text, "plain|");

        let mut request = Request::new(text("hello")).with_timeout(Duration::from_secs(10));
        request
            .metadata_mut()
            .append("x-echo", "meta")
            .expect("metadata");
        let response = client.echo(request).await.expect("Echo");
        assert_eq!(response.metadata().get("x-echo"), Some("meta"));
        assert_eq!(response.trailers().get("x-timeout-seen"), Some("yes"));
        assert_eq!(response.into_inner(), text("hello|meta"));
    })
    .await;
}

#[tokio::test]
async fn server_streaming() {
    bounded(async {
        let mut client = client().await;
        let mut words = client
            .split(text("the quick brown fox"))
            .await
            .expect("Split")
            .into_inner();
        let mut got = Vec::new();
        while let Some(word) = words.message().await.expect("word") {
            got.push((word.index, word.word));
        }
        let want: Vec<_> = ["the", "quick", "brown", "fox"]
            .iter()
            .enumerate()
            .map(|(i, w)| (i as u32, (*w).to_owned()))
            .collect();
        assert_eq!(got, want);
    })
    .await;
}

#[tokio::test]
async fn client_streaming_from_a_stream_and_from_a_request() {
    bounded(async {
        let mut client = client().await;
        let texts = vec![text("one"), text("two words"), text("and three words")];
        let tally = client
            .count(tokio_stream::iter(texts.clone()))
            .await
            .expect("Count")
            .into_inner();
        assert_eq!(
            tally,
            Tally {
                messages: 3,
                words: 6
            }
        );

        let mut request = Request::new(tokio_stream::iter(texts)).with_timeout(LIMIT);
        request
            .metadata_mut()
            .append("x-echo", "counted")
            .expect("metadata");
        let response = client.count(request).await.expect("Count");
        assert_eq!(response.metadata().get("x-echo"), Some("counted"));
        assert_eq!(response.trailers().get("x-timeout-seen"), Some("yes"));
        assert_eq!(response.get_ref().messages, 3);

        let empty = client
            .count(tokio_stream::iter(Vec::<Text>::new()))
            .await
            .expect("Count of nothing");
        assert_eq!(empty.into_inner(), Tally::default());
    })
    .await;
}

#[tokio::test]
async fn bidi_from_an_iterator() {
    bounded(async {
        let mut client = client().await;
        let response = client
            .shout(tokio_stream::iter(vec![text("hey"), text("you")]))
            .await
            .expect("Shout");
        let mut replies = response.into_inner();
        let mut got = Vec::new();
        while let Some(reply) = replies.message().await.expect("reply") {
            got.push(reply.text);
        }
        assert_eq!(got, ["HEY", "YOU"]);
    })
    .await;
}

#[tokio::test]
async fn bidi_ping_pong_through_a_channel_backed_stream() {
    bounded(async {
        let mut client = client().await;
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let mut request = Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
        request
            .metadata_mut()
            .append("x-echo", "bidi")
            .expect("metadata");
        // The server answers headers with its first reply, so the first message goes before the call returns.
        tx.send(text("ping")).await.expect("queue");
        let response = client.shout(request).await.expect("Shout");
        assert_eq!(response.metadata().get("x-echo"), Some("bidi"));
        let mut replies = response.into_inner();
        assert_eq!(replies.message().await.expect("reply"), Some(text("PING")));
        for word in ["pong", "again"] {
            tx.send(text(word)).await.expect("queue");
            let reply = replies.message().await.expect("reply");
            assert_eq!(reply, Some(text(&word.to_uppercase())));
        }
        drop(tx);
        assert_eq!(replies.message().await.expect("status"), None);
    })
    .await;
}

/// A stream of `first`, then nothing, ever, that reports when it is dropped.
struct Hanging {
    first: Option<Text>,
    _dropped: tokio::sync::oneshot::Sender<()>,
}

impl Hanging {
    fn new(first: Text) -> (Hanging, tokio::sync::oneshot::Receiver<()>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (
            Hanging {
                first: Some(first),
                _dropped: tx,
            },
            rx,
        )
    }
}

impl Stream for Hanging {
    type Item = Text;

    fn poll_next(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Text>> {
        match self.get_mut().first.take() {
            Some(t) => Poll::Ready(Some(t)),
            None => Poll::Pending,
        }
    }
}

#[tokio::test]
async fn bidi_status_from_the_server_stops_the_request_stream() {
    bounded(async {
        let mut client = client().await;
        let (stream, dropped) = Hanging::new(text("fail"));
        let status = client
            .shout(stream)
            .await
            .expect_err("the server fails the call");
        assert_eq!(status.code(), Code::InvalidArgument, "{status}");
        assert_eq!(status.message(), "told to fail");
        // The call is over: the pump drops the stream although it never ended.
        let _ = dropped.await;
    })
    .await;
}

#[tokio::test]
async fn bidi_deadline_stops_the_request_stream() {
    bounded(async {
        let mut client = client().await;
        let (stream, dropped) = Hanging::new(text("hello"));
        let request = Request::new(stream).with_timeout(Duration::from_millis(300));
        let mut replies = client.shout(request).await.expect("Shout").into_inner();
        assert_eq!(replies.message().await.expect("reply"), Some(text("HELLO")));
        let status = replies.message().await.expect_err("the deadline passes");
        assert_eq!(status.code(), Code::DeadlineExceeded, "{status}");
        let _ = dropped.await;
    })
    .await;
}

#[tokio::test]
async fn a_message_too_large_to_send_is_the_status_of_the_call() {
    bounded(async {
        let mut client = client().await;
        let big = text(&"x".repeat(1000));

        let request = Request::new(tokio_stream::iter(vec![text("small"), big.clone()]))
            .with_max_send_message_size(100);
        let status = client.count(request).await.expect_err("too large");
        assert_eq!(status.code(), Code::ResourceExhausted, "{status}");

        let (stream, dropped) = Hanging::new(big);
        let request = Request::new(stream).with_max_send_message_size(100);
        let status = client.shout(request).await.expect_err("too large");
        assert_eq!(status.code(), Code::ResourceExhausted, "{status}");
        let _ = dropped.await;
    })
    .await;
}

#[test]
fn proto_comments_became_doc_comments() {
    let generated = include_str!(concat!(env!("OUT_DIR"), "/kitchen.sink.v1.rs"));
    for doc in [
        "/// A service with every RPC kind.",
        "/// It pings, echoes, splits, counts and shouts.",
        "/// Answers nothing with nothing.",
        "/// Splits the text into words, one response per word.",
        "/// Counts the messages and words of a stream.",
        "/// One word of a split text.",
        "/// Its position, from 0.",
        "/// `/kitchen.sink.v1.Sink/Shout`, a bidi-streaming call.",
    ] {
        assert!(generated.contains(doc), "no {doc:?} in the generated code");
    }
}

#[tokio::test]
async fn a_client_interceptor_adds_metadata_or_fails_the_call_unsent() {
    bounded(async {
        let addr = start_server().await;
        let channel = Channel::new(format!("ipv4:{addr}")).expect("channel");
        let mut client = SinkClient::with_interceptor(
            channel.clone(),
            |call: &mut grpc_channel::CallInfo<'_>| {
                assert_eq!(call.method(), "/kitchen.sink.v1.Sink/Echo");
                call.metadata_mut()
                    .append("x-echo", "from the interceptor")
                    .map_err(|e| Status::new(Code::Internal, e.to_string()))
            },
        );
        let response = client.echo(text("hi")).await.expect("Echo");
        assert_eq!(response.into_inner(), text("hi|from the interceptor"));

        let mut refusing = SinkClient::with_interceptor(
            channel.clone(),
            |_: &mut grpc_channel::CallInfo<'_>| -> Result<(), Status> {
                Err(Status::new(Code::PermissionDenied, "not from this client"))
            },
        );
        let status = refusing
            .count(tokio_stream::iter(vec![text("a b")]))
            .await
            .expect_err("refused");
        assert_eq!(status.code(), Code::PermissionDenied);
        assert_eq!(status.message(), "not from this client");
    })
    .await;
}

/// tonic's per-client settings: the client's encoding and advertised encodings apply to each request
/// before its interceptor runs; a request's own settings win; the channel's apply to what neither set.
#[tokio::test]
async fn client_compression_settings_apply_to_requests_that_set_none() {
    bounded(async {
        let addr = start_server().await;
        let channel = Channel::new(format!("ipv4:{addr}")).expect("channel");
        fn seen<T>(response: &grpc_channel::Response<T>, what: &str) -> String {
            response
                .trailers()
                .get(what)
                .expect("the server reports it")
                .to_owned()
        }

        let mut plain = SinkClient::new(channel.clone());
        let response = plain.echo(text("hi")).await.expect("Echo");
        assert_eq!(seen(&response, "x-seen-encoding"), "-");
        assert_eq!(seen(&response, "x-seen-accept"), "gzip");

        let mut client = SinkClient::new(channel.clone())
            .send_compressed(Encoding::Gzip)
            .accept_compressed(Encoding::Zstd)
            .accept_compressed(Encoding::Deflate);
        let response = client.echo(text("hi")).await.expect("Echo");
        assert_eq!(response.get_ref(), &text("hi|"));
        assert_eq!(seen(&response, "x-seen-encoding"), "gzip");
        assert_eq!(seen(&response, "x-seen-accept"), "gzip,deflate,zstd");
        // The request's own choice wins: uncompressed.
        let response = client
            .echo(Request::new(text("hi")).with_compression(Encoding::Identity))
            .await
            .expect("Echo");
        assert_eq!(seen(&response, "x-seen-encoding"), "-");
        // Client-streaming and bidi calls too.
        let response = client
            .count(tokio_stream::iter(vec![text("a b"), text("c")]))
            .await
            .expect("Count");
        assert_eq!(seen(&response, "x-seen-encoding"), "gzip");
        assert_eq!(response.get_ref().words, 3);

        // The interceptor sees the client's settings applied.
        let mut intercepted = SinkClient::with_interceptor(
            channel.clone(),
            |call: &mut grpc_channel::CallInfo<'_>| {
                let options = call.options();
                assert_eq!(options.compression(), Some(Encoding::Gzip));
                assert!(options.accepted_encodings().contains(Encoding::Zstd));
                assert_eq!(options.max_receive_message_size(), Some(1 << 20));
                Ok(())
            },
        )
        .send_compressed(Encoding::Gzip)
        .accept_compressed(Encoding::Zstd)
        .max_decoding_message_size(1 << 20);
        intercepted.echo(text("hi")).await.expect("Echo");
    })
    .await;
}

/// tonic's `max_decoding_message_size` and `max_encoding_message_size`: they replace the channel's limits
/// (raising them too), a request's own limit wins, and the errors name the setting.
#[tokio::test]
async fn client_message_size_limits() {
    bounded(async {
        let addr = start_server().await;
        let channel = Channel::builder(format!("ipv4:{addr}"))
            .max_send_message_size(10)
            .max_receive_message_size(10)
            .build()
            .expect("channel");
        let long = text(&"x".repeat(100));

        let mut strict = SinkClient::new(channel.clone());
        let status = strict.echo(long.clone()).await.expect_err("channel limit");
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert!(
            status.message().contains("the channel's max_send_message_size"),
            "{status}"
        );

        let mut roomy = SinkClient::new(channel.clone())
            .max_encoding_message_size(1000)
            .max_decoding_message_size(1000);
        let response = roomy.echo(long.clone()).await.expect("the client raises both");
        assert_eq!(response.get_ref().text.len(), 101);

        let mut tight = SinkClient::new(channel.clone())
            .max_encoding_message_size(1000)
            .max_decoding_message_size(50);
        let status = tight.echo(long.clone()).await.expect_err("decoding limit");
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert!(
            status.message().contains(
                "(103 vs. 50 bytes: the call's max_receive_message_size, set with \
                 Request::with_max_receive_message_size or a generated client's max_decoding_message_size)"
            ),
            "{status}"
        );
        // The request's own limit wins over the client's.
        let response = tight
            .echo(Request::new(long.clone()).with_max_receive_message_size(1000))
            .await
            .expect("the request's limit");
        assert_eq!(response.get_ref().text.len(), 101);
        let status = roomy
            .echo(Request::new(long).with_max_send_message_size(20))
            .await
            .expect_err("the request's send limit");
        assert!(
            status
                .message()
                .contains("vs. 20 bytes: the call's max_send_message_size"),
            "{status}"
        );
    })
    .await;
}

#[tokio::test]
async fn clients_generated_without_messages_call_with_messages_generated_apart() {
    use grpc_build_test::split::kitchen::sink::v1::sink_client::SinkClient as SplitClient;
    use grpc_build_test::split::kitchen::sink::v1::Word as SplitWord;
    use grpc_build_test::split::kitchen::types::Text as SplitText;

    let split_text = |s: &str| SplitText { text: s.to_owned() };
    bounded(async {
        let addr = start_server().await;
        let channel = Channel::new(format!("ipv4:{addr}")).expect("channel");
        let mut client = SplitClient::new(channel);
        let () = client.ping(()).await.expect("Ping").into_inner();
        let echoed: SplitText = client
            .echo(split_text("hi"))
            .await
            .expect("Echo")
            .into_inner();
        assert_eq!(echoed, split_text("hi|"));
        let mut words = client
            .split(split_text("two words"))
            .await
            .expect("Split")
            .into_inner();
        let first: Option<SplitWord> = words.message().await.expect("word");
        assert_eq!(first.map(|w| w.word).as_deref(), Some("two"));
        let tally = client
            .count(tokio_stream::iter(vec![split_text("a b"), split_text("c")]))
            .await
            .expect("Count")
            .into_inner();
        assert_eq!((tally.messages, tally.words), (2, 3));
        let mut shouts = client
            .shout(tokio_stream::iter(vec![split_text("loud")]))
            .await
            .expect("Shout")
            .into_inner();
        assert_eq!(
            shouts.message().await.expect("reply"),
            Some(split_text("LOUD"))
        );
    })
    .await;
}

#[test]
fn build_messages_false_writes_the_clients_alone_and_clashes_with_nothing() {
    let out_dir = std::path::Path::new(env!("OUT_DIR"));
    let clients = include_str!(concat!(env!("OUT_DIR"), "/kitchen.sink.v1.grpc-client.rs"));
    for expected in [
        "pub mod sink_client {",
        "pub struct SinkClient<T = ::grpc_channel::Channel> {",
        "pub async fn connect(",
        "/// A service with every RPC kind.",
        "IntoRequest<super::super::super::types::Text>",
        "IntoRequest<()>",
        "Streaming<super::Word>",
    ] {
        assert!(clients.contains(expected), "no {expected:?} in:\n{clients}");
    }
    for unexpected in ["::prost::Message", "pub struct Word", "pub struct Tally"] {
        assert!(
            !clients.contains(unexpected),
            "{unexpected:?} in:\n{clients}"
        );
    }
    let messages = include_str!(concat!(env!("OUT_DIR"), "/split/kitchen.sink.v1.rs"));
    assert!(messages.contains("pub struct Word"));
    assert!(!messages.contains("sink_client"), "build_client(false)");
    assert!(
        !out_dir.join("kitchen.types.grpc-client.rs").exists(),
        "a package without services gets no clients file"
    );
    assert!(
        out_dir.join("kitchen.sink.v1.rs").exists(),
        "the combined file is still there, beside the clients-only one"
    );
}
