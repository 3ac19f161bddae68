//! The Flaky methods, seen through a bare h2 client (exact frames) and through the channel.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::test_h2;
use grpc_channel::{Channel, Code, Request};
use std::time::Duration;

fn attempts_ended(server: &FaultyServer, key: &str) -> Vec<(u32, u32, u64, AttemptOutcome)> {
    server
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::AttemptEnded {
                key: k,
                number,
                messages,
                bytes,
                outcome,
                ..
            } if k == key => Some((number, messages, bytes, outcome)),
            _ => None,
        })
        .collect()
}

const ALL: [&str; 4] = [
    methods::FLAKY,
    methods::FLAKY_CLIENT_STREAM,
    methods::FLAKY_SERVER_STREAM,
    methods::FLAKY_BIDI,
];

#[tokio::test]
async fn every_flaky_shape_fails_trailers_only_then_answers() {
    let server = FaultyServer::start().await.unwrap();
    let mut send = test_h2::connect(server.addr).await;
    for path in ALL {
        let key = format!("fail-{path}");
        let headers = [
            ("x-test-key", key.as_str()),
            ("x-fail-times", "1"),
            ("x-pushback-ms", "7"),
        ];
        let failed = test_h2::call(&mut send, path, &headers, &[b"ab", b"cde"])
            .await
            .unwrap();
        assert!(failed.trailers_only, "{path}: {failed:?}");
        assert_eq!(failed.status(), Some("14"), "{path}");
        assert_eq!(
            failed.headers.get("grpc-retry-pushback-ms").unwrap(),
            "7",
            "{path}"
        );
        let answered = test_h2::call(&mut send, path, &headers, &[b"ab", b"cde"])
            .await
            .unwrap();
        assert!(!answered.trailers_only, "{path}");
        assert_eq!(answered.status(), Some("0"), "{path}");
        assert_eq!(
            answered
                .trailers
                .as_ref()
                .unwrap()
                .get("x-attempt")
                .unwrap(),
            "2"
        );
        let ended = attempts_ended(&server, &key);
        let failure = AttemptOutcome::Failed {
            code: "14".into(),
            after_response: false,
        };
        if path == methods::FLAKY_BIDI {
            // A failing bidi attempt reads one message; a good one echoes both.
            assert_eq!(
                ended,
                vec![(1, 1, 2, failure), (2, 2, 5, AttemptOutcome::Ok)]
            );
            assert_eq!(answered.messages, vec![&b"ab"[..], &b"cde"[..]]);
        } else {
            assert_eq!(
                ended,
                vec![(1, 2, 5, failure), (2, 2, 5, AttemptOutcome::Ok)],
                "{path}"
            );
        }
    }
}

#[tokio::test]
async fn every_flaky_shape_refuses_with_refused_stream() {
    let server = FaultyServer::start().await.unwrap();
    let mut send = test_h2::connect(server.addr).await;
    for path in ALL {
        let key = format!("refuse-{path}");
        let headers = [
            ("x-test-key", key.as_str()),
            ("x-fail-times", "1"),
            ("x-fail-mode", "refuse"),
        ];
        let err = test_h2::call(&mut send, path, &headers, &[b"x"])
            .await
            .expect_err("refused");
        assert_eq!(err.reason(), Some(Reason::REFUSED_STREAM), "{path}");
        assert!(err.is_reset() && err.is_remote(), "{path}");
        let answered = test_h2::call(&mut send, path, &headers, &[b"x"])
            .await
            .unwrap();
        assert_eq!(answered.status(), Some("0"), "{path}");
        assert_eq!(
            attempts_ended(&server, &key),
            vec![
                (1, 0, 0, AttemptOutcome::Refused),
                (2, 1, 1, AttemptOutcome::Ok)
            ],
            "{path}"
        );
        let seen: Vec<u32> = server
            .events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Attempt { key: k, number, .. } if k == key => Some(number),
                _ => None,
            })
            .collect();
        assert_eq!(seen, vec![1, 2], "a refused attempt is recorded");
    }
}

#[tokio::test]
async fn the_attempt_script_decides_each_attempt() {
    let server = FaultyServer::start().await.unwrap();
    let mut send = test_h2::connect(server.addr).await;
    let headers = [
        ("x-test-key", "s"),
        ("x-attempt-script", "14,refuse,3"),
        // Ignored under a script.
        ("x-fail-times", "9"),
    ];
    let first = test_h2::call(&mut send, methods::FLAKY, &headers, &[b""])
        .await
        .unwrap();
    assert_eq!(first.status(), Some("14"));
    let second = test_h2::call(&mut send, methods::FLAKY, &headers, &[b""])
        .await
        .expect_err("refused");
    assert_eq!(second.reason(), Some(Reason::REFUSED_STREAM));
    let third = test_h2::call(&mut send, methods::FLAKY, &headers, &[b""])
        .await
        .unwrap();
    assert_eq!(third.status(), Some("3"));
    let fourth = test_h2::call(&mut send, methods::FLAKY, &headers, &[b""])
        .await
        .unwrap();
    assert_eq!(fourth.status(), Some("0"));
}

#[tokio::test]
async fn client_stream_answers_its_totals_and_server_stream_its_items() {
    let server = FaultyServer::start().await.unwrap();
    let ch = Channel::new(server.target()).unwrap();
    let messages: Vec<FlakyMessage> = [3usize, 0, 600]
        .into_iter()
        .map(|n| FlakyMessage {
            payload: Bytes::from(vec![1; n]),
        })
        .collect();
    let want_bytes: u64 = messages.iter().map(|m| m.encoded_len() as u64).sum();
    let (mut tx, mut rx) = ch
        .streaming::<FlakyMessage, FlakyTotals>(
            methods::FLAKY_CLIENT_STREAM,
            with_key(Request::new(()), "cs", &[]),
        )
        .await
        .unwrap();
    for m in messages {
        tx.send(m).await.unwrap();
    }
    tx.finish().await.unwrap();
    let totals = rx.message().await.unwrap().unwrap();
    assert_eq!(
        totals,
        FlakyTotals {
            messages: 3,
            bytes: want_bytes,
            attempt: 1
        }
    );

    let resp = ch
        .server_streaming::<FlakyMessage, FlakyItem>(
            methods::FLAKY_SERVER_STREAM,
            with_key(
                Request::new(FlakyMessage::default()),
                "ss",
                &[("x-response-count", "3")],
            ),
        )
        .await
        .unwrap();
    let mut stream = resp.into_message();
    let mut items = Vec::new();
    while let Some(item) = stream.message().await.unwrap() {
        items.push(item);
    }
    let want: Vec<FlakyItem> = (0..3)
        .map(|index| FlakyItem {
            index,
            client_attempt: 1,
            attempt: 1,
        })
        .collect();
    assert_eq!(items, want);
}

#[tokio::test]
async fn bidi_can_fail_after_its_first_echo_and_a_hanging_attempt_records_the_cancel() {
    let server = FaultyServer::start().await.unwrap();
    let ch = Channel::new(server.target()).unwrap();
    let (mut tx, mut rx) = ch
        .streaming_raw(
            methods::FLAKY_BIDI,
            with_key(
                Request::new(()),
                "late",
                &[
                    ("x-fail-times", "1"),
                    ("x-fail-after-first-response", "true"),
                ],
            ),
        )
        .await
        .unwrap();
    tx.send(Bytes::from_static(b"one")).await.unwrap();
    assert_eq!(rx.message().await.unwrap().unwrap(), &b"one"[..]);
    let status = rx.message().await.expect_err("fails after the echo");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(
        attempts_ended(&server, "late"),
        vec![(
            1,
            1,
            3,
            AttemptOutcome::Failed {
                code: "14".into(),
                after_response: true
            }
        )]
    );

    let (mut tx, mut rx) = ch
        .streaming_raw(
            methods::FLAKY_BIDI,
            with_key(Request::new(()), "hang", &[("x-hang-attempts", "1")]),
        )
        .await
        .unwrap();
    tx.send(Bytes::from_static(b"ab")).await.unwrap();
    for _ in 0..200 {
        if server
            .events()
            .iter()
            .any(|e| matches!(e, Event::Attempt { key, .. } if key == "hang"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    rx.cancel();
    for _ in 0..200 {
        if !attempts_ended(&server, "hang").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        attempts_ended(&server, "hang"),
        vec![(1, 1, 2, AttemptOutcome::Reset(Reason::CANCEL))]
    );
}

#[tokio::test]
async fn a_faulty_server_on_a_unix_socket() {
    let path = std::env::temp_dir().join(format!("faulty-{}.sock", std::process::id()));
    let server = FaultyServer::start_unix(&path).await.unwrap();
    assert!(server.target().starts_with("unix:"));
    let ch = Channel::new(server.target()).unwrap();
    let r = ch
        .unary_raw(
            methods::FLAKY,
            with_key(Request::new(Bytes::new()), "u", &[]),
        )
        .await
        .unwrap();
    assert_eq!(r.trailers().get("x-attempt"), Some("1"));
    assert_eq!(server.connections(), 1);
    let _ = std::fs::remove_file(&path);
}

fn with_key<T>(mut req: Request<T>, key: &str, headers: &[(&str, &str)]) -> Request<T> {
    req.metadata_mut().append("x-test-key", key).unwrap();
    for (k, v) in headers {
        req.metadata_mut().append(k, v).unwrap();
    }
    req.with_timeout(Duration::from_secs(10))
}
