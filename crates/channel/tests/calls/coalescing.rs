//! Request messages that are ready together leave together: against the scriptable h2 server (which sees
//! each DATA frame as one chunk) on tokio's paused clock, a burst of messages goes out in a few DATA frames
//! on every send path (before commit through the retry driver, after commit through the writer task, and
//! from an application stream through the bidi pump), every message whole and in order; a lone message is
//! never held back waiting for company; a message larger than a batch goes whole.

use grpc_test_support as support;

use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Request, RequestSender, Streaming};
use support::config::retry;
use support::frames::{grpc_message, payloads};
use support::guards::guarded;
use support::h2_server::{
    defaults, handler, reads_then_answers, trailers, H2Server, HeadersAt, Stream, SVC,
};
use support::shapes::start_bidi;
use support::{channel_with_config, IterStream};

/// Messages in a burst: 20 of 1 KiB, 20,580 bytes framed, so two DATA frames of at most 16 KiB.
const BURST: usize = 20;

fn burst() -> Vec<Vec<u8>> {
    (0..BURST).map(|i| vec![b'a' + i as u8; 1024]).collect()
}

/// A server that answers the response headers first (committing the call) or only after reading the
/// whole request (`early_headers` false), then `done` and OK.
async fn server(early_headers: bool) -> H2Server {
    let headers = if early_headers {
        HeadersAt::Start
    } else {
        HeadersAt::AfterReading
    };
    H2Server::tcp(defaults, reads_then_answers(headers, Duration::ZERO)).await
}

/// Sends the burst without yielding in between, half-closes, and reads the answer.
async fn send_burst(mut tx: RequestSender<Bytes>, mut rx: Streaming<Bytes>) {
    for m in burst() {
        guarded("send", tx.send(Bytes::from(m)))
            .await
            .expect("send");
    }
    guarded("finish", tx.finish()).await.expect("finish");
    let reply = guarded("reply", rx.message()).await.expect("reply");
    assert_eq!(reply.as_deref(), Some(&b"done"[..]));
    assert!(guarded("end", rx.message()).await.expect("OK").is_none());
}

/// Every message arrived whole, in order, with one END_STREAM, in at most `frames` DATA frames.
fn assert_arrived(server: &H2Server, expected: &[Vec<u8>], frames: usize) {
    let (body, ends) = server.body_of_id(1);
    assert_eq!(ends, 1, "one END_STREAM");
    assert_eq!(payloads(&body), expected);
    let sent = server.data_frames_of_id(1);
    assert!(
        sent <= frames,
        "{} messages took {sent} DATA frames (at most {frames} expected)",
        expected.len()
    );
}

#[tokio::test(start_paused = true)]
async fn after_commit_a_burst_leaves_in_two_data_frames() {
    let server = server(true).await;
    let ch = channel_with_config(&server.target(), "{}");
    let (tx, mut rx) = start_bidi(&ch).await;
    guarded("headers", rx.headers()).await.expect("committed");
    send_burst(tx, rx).await;
    assert_arrived(&server, &burst(), 2);
}

#[tokio::test(start_paused = true)]
async fn before_commit_a_burst_leaves_in_two_data_frames() {
    let server = server(false).await;
    let ch = channel_with_config(&server.target(), retry(3, &["UNAVAILABLE"]).service(SVC));
    let (tx, rx) = start_bidi(&ch).await;
    send_burst(tx, rx).await;
    assert_arrived(&server, &burst(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_bidi_pump_takes_every_ready_message_of_the_stream() {
    let server = server(true).await;
    let ch = channel_with_config(&server.target(), "{}");
    let messages: Vec<Vec<u8>> = burst();
    let response = guarded(
        "bidi",
        ch.bidi_streaming::<Vec<u8>, Vec<u8>, _>(
            "/t.S/Bidi",
            Request::new(IterStream(messages.clone().into_iter())),
        ),
    )
    .await
    .expect("bidi");
    let mut rx = response.into_message();
    // The server answers once it has read the whole request ("done", not a prost message: the decode
    // error does not matter here).
    let _ = guarded("reply", rx.message()).await;
    // The pump's messages are prost `bytes` wrappers: field 1, length 1024.
    let expected: Vec<Vec<u8>> = messages.iter().map(prost::Message::encode_to_vec).collect();
    assert_arrived(&server, &expected, 2);
}

/// The server echoes each message as it arrives: a message sent alone goes out at once, so the echo comes
/// back while the client sends nothing more.
#[tokio::test(start_paused = true)]
async fn a_lone_message_is_never_held_back() {
    let h = |mut s: Stream| async move {
        let Some(mut send) = s.headers() else {
            return;
        };
        let mut buf = Vec::new();
        while let Some(Ok(chunk)) = s.recv.data().await {
            let _ = s.recv.flow_control().release_capacity(chunk.len());
            buf.extend_from_slice(&chunk);
            for p in payloads(&buf) {
                let _ = send.send_data(grpc_message(&p), false);
            }
            buf.clear();
        }
        let _ = send.send_trailers(trailers("0", &[]));
    };
    let server = H2Server::tcp(defaults, handler(h)).await;
    for config in [
        "{}".to_owned(),
        retry(3, &["UNAVAILABLE"]).service(SVC).into(),
    ] {
        let ch = channel_with_config(&server.target(), config);
        let (mut tx, mut rx) = start_bidi(&ch).await;
        for i in 0..3u8 {
            guarded("send", tx.send(Bytes::from(vec![i; 10])))
                .await
                .expect("send");
            let echo = guarded("echo", rx.message()).await.expect("echo");
            assert_eq!(echo.as_deref(), Some(&[i; 10][..]));
        }
        drop(tx);
        assert!(guarded("end", rx.message()).await.expect("OK").is_none());
    }
}

/// A message over the batch size goes whole between batches of small ones.
#[tokio::test(start_paused = true)]
async fn a_large_message_goes_whole_between_small_ones() {
    let server = server(true).await;
    let ch = channel_with_config(&server.target(), "{}");
    let (mut tx, mut rx) = start_bidi(&ch).await;
    guarded("headers", rx.headers()).await.expect("committed");
    let messages = vec![
        vec![1u8; 100],
        vec![2u8; 100],
        vec![3u8; 1 << 20],
        vec![4u8; 100],
        vec![5u8; 100],
    ];
    for m in &messages {
        guarded("send", tx.send(Bytes::from(m.clone())))
            .await
            .expect("send");
    }
    guarded("finish", tx.finish()).await.expect("finish");
    let reply = guarded("reply", rx.message()).await.expect("reply");
    assert_eq!(reply.as_deref(), Some(&b"done"[..]));
    // 1 MiB in 16 KiB frames is 65; the small ones add one frame on each side.
    assert_arrived(&server, &messages, 67);
}
