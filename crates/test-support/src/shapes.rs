//! One call of each shape (unary, server streaming, client streaming, bidi), for tests that check a
//! behaviour on every shape against servers that answer any path; and bidi calls started for the tests
//! to drive (raw halves, or the bidi pump fed by the test).

use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Code, Request, RequestSender, Response, Status, Streaming};
use interop::faulty::{FlakyItem, FlakyMessage, FlakyTotals};

use crate::{Fed, IterStream};

/// A call shape.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    /// `unary_raw`.
    Unary,
    /// `server_streaming`, read to the end.
    ServerStream,
    /// `client_streaming` with two messages.
    ClientStream,
    /// `streaming_raw`: one message, half-close, read to the end.
    Bidi,
}

/// Every shape.
pub const SHAPES: [Shape; 4] = [
    Shape::Unary,
    Shape::ServerStream,
    Shape::ClientStream,
    Shape::Bidi,
];

/// A request message with `n` payload bytes.
pub fn msg(n: usize) -> FlakyMessage {
    FlakyMessage {
        payload: Bytes::from(vec![7; n]),
    }
}

/// One call of `shape` with `timeout`: its final status (OK or not).
pub async fn call_shape(ch: &Channel, shape: Shape, path: &str, timeout: Duration) -> Status {
    let ok = || Status::new(Code::Ok, "");
    match shape {
        Shape::Unary => match ch
            .unary_raw(
                path,
                Request::new(Bytes::from_static(b"u")).with_timeout(timeout),
            )
            .await
        {
            Ok(_) => ok(),
            Err(s) => s,
        },
        Shape::ServerStream => {
            match ch
                .server_streaming::<FlakyMessage, FlakyItem>(
                    path,
                    Request::new(msg(3)).with_timeout(timeout),
                )
                .await
            {
                Err(s) => s,
                Ok(r) => {
                    let (_, mut rx) = r.into_parts();
                    loop {
                        match rx.message().await {
                            Ok(Some(_)) => {}
                            Ok(None) => break ok(),
                            Err(s) => break s,
                        }
                    }
                }
            }
        }
        Shape::ClientStream => match ch
            .client_streaming::<FlakyMessage, FlakyTotals, _>(
                path,
                Request::new(IterStream(vec![msg(3), msg(4)].into_iter())).with_timeout(timeout),
            )
            .await
        {
            Ok(_) => ok(),
            Err(s) => s,
        },
        Shape::Bidi => {
            let (mut tx, mut rx) = match ch
                .streaming_raw(path, Request::new(()).with_timeout(timeout))
                .await
            {
                Ok(halves) => halves,
                Err(s) => return s,
            };
            let _ = tx.send(Bytes::from_static(b"b")).await;
            let _ = tx.finish().await;
            loop {
                match rx.message().await {
                    Ok(Some(_)) => {}
                    Ok(None) => break ok(),
                    Err(s) => break s,
                }
            }
        }
    }
}

/// A raw bidi call (`/t.S/Bidi`) started: its sending and receiving halves.
pub async fn start_bidi(ch: &Channel) -> (RequestSender<Bytes>, Streaming<Bytes>) {
    crate::guards::guarded("start", ch.streaming_raw("/t.S/Bidi", Request::new(())))
        .await
        .expect("start")
}

/// A bidi call (`/t.S/Bidi`) of `Vec<u8>` messages through the bidi pump, its request stream fed by the
/// test (it ends when the feed is dropped): the feed, and the response once its headers committed the call.
pub async fn start_fed_bidi(
    ch: &Channel,
) -> (
    tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
    Response<Streaming<Vec<u8>>>,
) {
    let (feed, fed) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let response = crate::guards::guarded(
        "bidi",
        ch.bidi_streaming::<Vec<u8>, Vec<u8>, _>("/t.S/Bidi", Request::new(Fed(fed))),
    )
    .await
    .expect("committed");
    (feed, response)
}
