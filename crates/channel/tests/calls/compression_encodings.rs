//! Message compression on the wire (`doc/compression.md`), against a scriptable h2 server that compresses
//! with independent code (flate2, zstd) and reports what it received: each of gzip, deflate and zstd both
//! ways, what the channel and a call advertise in `grpc-accept-encoding` (including nothing), a reply in an
//! encoding the call did not advertise (INTERNAL, saying how to accept it), the channel's default encoding
//! against the call's own, and the message size limits, whose errors name the limit hit.

use grpc_test_support as support;

use std::io::{Read as _, Write as _};

use bytes::Bytes;
use grpc_channel::{Channel, ChannelBuilder, Code, Encoding, Request, Response, Status};
use support::frames::deframe;
use support::guards::no_hang;
use support::h2_server::{handler, response_head, trailers, H2Server, Stream};

const METHOD: &str = "/t.S/M";

/// `data` compressed with `encoding` by flate2 or zstd directly (not the channel's encoder).
fn compress(encoding: &str, data: &[u8]) -> Vec<u8> {
    match encoding {
        "gzip" => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(data).expect("gzip");
            e.finish().expect("gzip")
        }
        "deflate" => {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(data).expect("zlib");
            e.finish().expect("zlib")
        }
        "zstd" => zstd::encode_all(data, 3).expect("zstd"),
        // Not a real encoding: the bytes are never decoded.
        _ => data.to_vec(),
    }
}

fn decompress(encoding: &str, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match encoding {
        "gzip" => flate2::read::GzDecoder::new(data)
            .read_to_end(&mut out)
            .map(drop),
        "deflate" => flate2::read::ZlibDecoder::new(data)
            .read_to_end(&mut out)
            .map(drop),
        "zstd" => zstd::stream::copy_decode(data, &mut out),
        other => panic!("no decoder for {other}"),
    }
    .expect("the request message decodes");
    out
}

/// A server that reads the whole request, then answers one message of `x-respond-size` bytes (`a`s),
/// compressed with `x-respond-encoding` if the request has it (with that `grpc-encoding`; `x-respond-flag:
/// 0` sends it uncompressed under that header), and trailers saying what it received: `x-seen-accept`
/// (`grpc-accept-encoding`, `-` when absent), `x-seen-encoding` (`grpc-encoding`, `-`), `x-seen-flags`
/// (each request message's compressed flag) and `x-seen-message` (the first request message,
/// decompressed).
async fn server() -> H2Server {
    H2Server::tcp(
        support::h2_server::defaults,
        handler(|mut s: Stream| async move {
            let mut body = Vec::new();
            while let Some(chunk) = s.recv.data().await {
                let Ok(chunk) = chunk else { return };
                let _ = s.recv.flow_control().release_capacity(chunk.len());
                body.extend_from_slice(&chunk);
            }
            let header = |name: &str| {
                s.headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            let request_encoding = header("grpc-encoding");
            let messages = deframe(&body);
            let flags: Vec<String> = messages.iter().map(|(f, _)| f.to_string()).collect();
            let first = match messages.first() {
                Some((1, m)) => decompress(request_encoding.as_deref().unwrap_or("-"), m),
                Some((_, m)) => m.clone(),
                None => Vec::new(),
            };
            let size: usize = header("x-respond-size")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let reply = vec![b'a'; size];
            let mut head = response_head();
            let (flag, payload) = match header("x-respond-encoding") {
                Some(enc) => {
                    head.headers_mut()
                        .insert("grpc-encoding", enc.parse().expect("encoding"));
                    if header("x-respond-flag").as_deref() == Some("0") {
                        (0, reply)
                    } else {
                        (1, compress(&enc, &reply))
                    }
                }
                None => (0, reply),
            };
            let Ok(mut send) = s.respond.send_response(head, false) else {
                return;
            };
            let mut frame = vec![flag];
            frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
            frame.extend_from_slice(&payload);
            let _ = send.send_data(Bytes::from(frame), false);
            let seen_accept = header("grpc-accept-encoding").unwrap_or_else(|| "-".into());
            let seen_encoding = request_encoding.unwrap_or_else(|| "-".into());
            let _ = send.send_trailers(trailers(
                "0",
                &[
                    ("x-seen-accept", &seen_accept),
                    ("x-seen-encoding", &seen_encoding),
                    ("x-seen-flags", &flags.join(",")),
                    ("x-seen-message", &String::from_utf8_lossy(&first)),
                ],
            ));
        }),
    )
    .await
}

fn builder(server: &H2Server) -> ChannelBuilder {
    Channel::builder(server.target())
}

/// A request with `message` asking for a reply of `size` bytes, compressed with `encoding` if given.
fn request(message: &str, size: usize, encoding: Option<&str>) -> Request<Bytes> {
    let mut req = Request::new(Bytes::from(message.to_owned()));
    let md = req.metadata_mut();
    md.append("x-respond-size", &size.to_string()).expect("md");
    if let Some(enc) = encoding {
        md.append("x-respond-encoding", enc).expect("md");
    }
    req
}

async fn call(channel: &Channel, req: Request<Bytes>) -> Result<Response<Bytes>, Status> {
    no_hang("the call", channel.unary_raw(METHOD, req)).await
}

fn seen<'a>(response: &'a Response<Bytes>, what: &str) -> &'a str {
    response
        .trailers()
        .get(&format!("x-seen-{what}"))
        .expect("the server reports it")
}

#[tokio::test]
async fn the_channel_advertises_gzip_unless_told_otherwise_and_calls_add_to_it() {
    let server = server().await;
    let cases: [(ChannelBuilder, Request<Bytes>, &str); 6] = [
        (builder(&server), request("", 0, None), "gzip"),
        (
            builder(&server).accept_compressed(Encoding::Zstd),
            request("", 0, None),
            "gzip,zstd",
        ),
        (
            builder(&server).accept_compressed(Encoding::Identity),
            request("", 0, None),
            "gzip",
        ),
        // None at all: no header.
        (
            builder(&server).accept_encodings([]),
            request("", 0, None),
            "-",
        ),
        (
            builder(&server).accept_encodings([Encoding::Deflate]),
            request("", 0, None).with_accept_compressed(Encoding::Zstd),
            "deflate,zstd",
        ),
        (
            builder(&server).accept_encodings([]),
            request("", 0, None).with_accept_compressed(Encoding::Gzip),
            "gzip",
        ),
    ];
    for (builder, req, want) in cases {
        let channel = builder.build().expect("channel");
        let response = call(&channel, req).await.expect("call");
        assert_eq!(seen(&response, "accept"), want);
    }
}

/// Each encoding both ways: the request compressed (flag 1, `grpc-encoding`, decodable by flate2 or zstd)
/// and the response compressed by flate2 or zstd, decoded by the channel.
#[tokio::test]
async fn every_encoding_round_trips() {
    let server = server().await;
    for (encoding, name) in [
        (Encoding::Gzip, "gzip"),
        (Encoding::Deflate, "deflate"),
        (Encoding::Zstd, "zstd"),
    ] {
        let channel = builder(&server)
            .accept_encodings([encoding])
            .build()
            .expect("channel");
        let message = "compress me ".repeat(100);
        let response = call(
            &channel,
            request(&message, 10_000, Some(name)).with_compression(encoding),
        )
        .await
        .unwrap_or_else(|s| panic!("{name}: {s:?}"));
        assert_eq!(seen(&response, "encoding"), name);
        assert_eq!(seen(&response, "accept"), name);
        assert_eq!(seen(&response, "flags"), "1", "{name}");
        assert_eq!(seen(&response, "message"), message, "{name}");
        assert!(response.was_compressed(), "{name}");
        assert_eq!(response.message().as_ref(), &[b'a'; 10_000][..], "{name}");
    }
}

/// A compressed reply in an encoding the call did not advertise fails with INTERNAL, saying what arrived,
/// what was advertised and how to accept it; advertised on the call, the same reply decodes.
#[tokio::test]
async fn a_reply_in_an_encoding_the_call_did_not_advertise_is_internal() {
    let server = server().await;
    let channel = builder(&server).build().expect("channel");
    let status = call(&channel, request("", 100, Some("deflate")))
        .await
        .expect_err("deflate was not advertised");
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert_eq!(
        status.message(),
        "the server compressed a response message with deflate, which the call did not advertise \
         (grpc-accept-encoding: gzip); to accept it, add it with ChannelBuilder::accept_compressed, \
         Request::with_accept_compressed or a generated client's accept_compressed"
    );
    let response = call(
        &channel,
        request("", 100, Some("deflate")).with_accept_compressed(Encoding::Deflate),
    )
    .await
    .expect("deflate advertised on the call");
    assert_eq!(response.message().len(), 100);

    // Advertising nothing: even gzip fails.
    let none = builder(&server)
        .accept_encodings([])
        .build()
        .expect("channel");
    let status = call(&none, request("", 100, Some("gzip")))
        .await
        .expect_err("nothing advertised");
    assert_eq!(status.code(), Code::Internal);
    assert!(
        status
            .message()
            .contains("gzip, which the call did not advertise (no grpc-accept-encoding: only uncompressed messages)"),
        "{status:?}"
    );
    // An encoding no one knows.
    let status = call(&channel, request("", 100, Some("snappy")))
        .await
        .expect_err("snappy");
    assert_eq!(status.code(), Code::Internal);
    assert!(
        status.message().contains(
            "\"snappy\", an encoding this client does not support (the call advertised \
             grpc-accept-encoding: gzip)"
        ),
        "{status:?}"
    );
}

/// Only compressed messages are checked: an uncompressed message under a `grpc-encoding` the call did not
/// advertise is fine (a server may send any message uncompressed).
#[tokio::test]
async fn an_uncompressed_message_under_any_grpc_encoding_is_accepted() {
    let server = server().await;
    let channel = builder(&server)
        .accept_encodings([])
        .build()
        .expect("channel");
    for enc in ["zstd", "snappy"] {
        let mut req = request("", 10, Some(enc));
        req.metadata_mut()
            .append("x-respond-flag", "0")
            .expect("md");
        let response = call(&channel, req).await.expect("uncompressed");
        assert!(!response.was_compressed());
        assert_eq!(response.message().as_ref(), b"aaaaaaaaaa");
    }
}

/// The channel's default encoding applies to calls that choose none; a call's own choice wins, identity
/// (uncompressed) included.
#[tokio::test]
async fn the_channel_s_default_encoding_and_the_call_s_own() {
    let server = server().await;
    let channel = builder(&server)
        .send_compressed(Encoding::Zstd)
        .build()
        .expect("channel");
    let response = call(&channel, request("x", 0, None)).await.expect("call");
    assert_eq!(
        (seen(&response, "encoding"), seen(&response, "flags")),
        ("zstd", "1")
    );
    let response = call(
        &channel,
        request("x", 0, None).with_compression(Encoding::Identity),
    )
    .await
    .expect("call");
    assert_eq!(
        (seen(&response, "encoding"), seen(&response, "flags")),
        ("-", "0")
    );
    let response = call(
        &channel,
        request("x", 0, None).with_compression(Encoding::Deflate),
    )
    .await
    .expect("call");
    assert_eq!(
        (seen(&response, "encoding"), seen(&response, "flags")),
        ("deflate", "1")
    );
    assert_eq!(seen(&response, "message"), "x");
    // `send_compressed(Identity)` is the default: no compression.
    let plain = builder(&server)
        .send_compressed(Encoding::Identity)
        .build()
        .expect("channel");
    let response = call(&plain, request("x", 0, None)).await.expect("call");
    assert_eq!(seen(&response, "encoding"), "-");
}

fn exhausted(result: Result<Response<Bytes>, Status>) -> String {
    let status = result.expect_err("over the limit");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    status.message().to_owned()
}

/// Each limit error names the limit that was hit, its value and where to change it.
#[tokio::test]
async fn receive_limit_errors_name_the_limit() {
    let server = server().await;
    let five_mib = 5 << 20;
    let default = builder(&server).build().expect("channel");
    assert_eq!(
        exhausted(call(&default, request("", five_mib, None)).await),
        "response message larger than the limit (5242880 vs. 4194304 bytes: the channel's default \
         max_receive_message_size; raise it with ChannelBuilder::max_receive_message_size, \
         Request::with_max_receive_message_size or a generated client's max_decoding_message_size)"
    );
    // Compressed: small on the wire, over the limit once decompressed, and it says why it came compressed.
    let message = exhausted(call(&default, request("", five_mib, Some("gzip"))).await);
    assert!(
        message.starts_with(
            "response message larger than the limit once decompressed (more than 4194304 bytes from "
        ) && message.contains(
            " bytes of gzip: the channel's default max_receive_message_size; raise it with"
        ) && message
            .ends_with("; it came compressed because the call advertised gzip in grpc-accept-encoding"),
        "{message}"
    );

    let channel = builder(&server)
        .max_receive_message_size(1 << 20)
        .build()
        .expect("channel");
    let message = exhausted(call(&channel, request("", 2 << 20, None)).await);
    assert!(
        message.starts_with(
            "response message larger than the limit (2097152 vs. 1048576 bytes: the channel's \
             max_receive_message_size, set with ChannelBuilder::max_receive_message_size"
        ),
        "{message}"
    );
    let message = exhausted(
        call(
            &channel,
            request("", 2 << 20, None).with_max_receive_message_size(1000),
        )
        .await,
    );
    assert!(
        message.contains(
            "(2097152 vs. 1000 bytes: the call's max_receive_message_size, set with \
             Request::with_max_receive_message_size or a generated client's max_decoding_message_size)"
        ),
        "{message}"
    );
}

/// grpc-go's model: a call's own limit replaces the channel's, raising it too; the service config caps it.
#[tokio::test]
async fn a_call_s_limit_replaces_the_channel_s_and_the_service_config_caps_it() {
    let server = server().await;
    let five_mib = 5 << 20;
    let channel = builder(&server)
        .max_receive_message_size(1 << 20)
        .max_send_message_size(100)
        .build()
        .expect("channel");
    // Raised above the channel's limit (and the 4 MiB default), compressed or not.
    for encoding in [None, Some("gzip"), Some("zstd")] {
        let mut req = request("", five_mib, encoding).with_max_receive_message_size(8 << 20);
        if let Some(enc) = encoding {
            req = req.with_accept_compressed(Encoding::from_name(enc.as_bytes()).expect("known"));
        }
        let response = call(&channel, req).await.expect("within the call's limit");
        assert_eq!(response.message().len(), five_mib);
    }
    let big = "m".repeat(1000);
    let message = exhausted(call(&channel, request(&big, 0, None)).await);
    assert!(
        message.starts_with(
            "request message larger than the limit (1000 vs. 100 bytes: the channel's \
             max_send_message_size, set with ChannelBuilder::max_send_message_size"
        ),
        "{message}"
    );
    call(
        &channel,
        request(&big, 0, None).with_max_send_message_size(2000),
    )
    .await
    .expect("the call's send limit replaces the channel's");

    let config = r#"{"methodConfig": [{"name": [{"service": "t.S"}],
        "maxResponseMessageBytes": 1000, "maxRequestMessageBytes": 500}]}"#;
    let capped = builder(&server)
        .default_service_config(config)
        .service_config_lookup(false)
        .build()
        .expect("channel");
    let message = exhausted(
        call(
            &capped,
            request("", 2000, None).with_max_receive_message_size(8 << 20),
        )
        .await,
    );
    assert_eq!(
        message,
        "response message larger than the limit (2000 vs. 1000 bytes: the service config's \
         maxResponseMessageBytes for this method, which the client's own limits cannot raise)"
    );
    let message = exhausted(
        call(
            &capped,
            request(&big, 0, None)
                .with_compression(Encoding::Identity)
                .with_max_send_message_size(8 << 20),
        )
        .await,
    );
    assert!(
        message.starts_with(
            "request message larger than the limit (1000 vs. 500 bytes: the service config's \
             maxRequestMessageBytes"
        ),
        "{message}"
    );
    // A compressed request counts as compressed, and says so.
    let tiny = builder(&server)
        .max_send_message_size(10)
        .build()
        .expect("channel");
    let message = exhausted(
        call(
            &tiny,
            request(&big, 0, None).with_compression(Encoding::Gzip),
        )
        .await,
    );
    assert!(
        message.starts_with("compressed request message larger than the limit ("),
        "{message}"
    );
    // Under the service config's limit and the call's, a config limit larger than the default applies.
    let roomy = builder(&server)
        .default_service_config(
            r#"{"methodConfig": [{"name": [{"service": "t.S"}], "maxResponseMessageBytes": 8388608}]}"#,
        )
        .service_config_lookup(false)
        .build()
        .expect("channel");
    let response = call(&roomy, request("", five_mib, None))
        .await
        .expect("the service config's limit replaces the default");
    assert_eq!(response.message().len(), five_mib);
}
