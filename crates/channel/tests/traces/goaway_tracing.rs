//! The connection events the public observability page lists, with the field it promises: "Outside the call
//! spans, the channel logs what changes its connections and choices, [...] with the address (`addr` or
//! `address`) as a field where there is one" (crates/channel/src/observability.rs, # Events): a GOAWAY
//! comes from one connection, to one address.

use grpc_test_support as support;

use std::time::Duration;

use grpc_channel::{Channel, Request};
use interop_proto::{paths, SimpleRequest, SimpleResponse};
use support::guards::guarded;
use support::h2_server::{handler, H2Server};
use support::tracing_capture;

async fn call(ch: &Channel) {
    guarded(
        "unary call",
        ch.unary::<_, SimpleResponse>(paths::UNARY_CALL, Request::new(SimpleRequest::default())),
    )
    .await
    .expect("the call succeeds");
}

/// A user who reads the observability page filters a backend's connection events by `addr`/`address`;
/// the DEBUG event for a GOAWAY (control/event_loop.rs, `Event::Draining`) carries only the last stream
/// id, the error code and the debug data, so a GOAWAY from one backend of a fleet cannot be told from
/// another's (the too_many_pings WARN of conn/keepalive.rs `on_goaway` has no address either).
#[tokio::test(start_paused = true)]
async fn the_goaway_event_names_the_address_that_sent_it() {
    let (capture, _installed) = tracing_capture::install().await;
    let server = H2Server::tcp(
        support::h2_server::defaults,
        handler(|mut stream| async move {
            // GOAWAY while the call is open, so the connection drains (rather than just closing).
            stream.goaway_connection();
            tokio::time::sleep(Duration::from_millis(50)).await;
            stream.ok(b"");
        }),
    )
    .await;
    let ch = Channel::new(server.target()).expect("channel");
    call(&ch).await;
    // Calls until one goes over a second connection: the channel has handled the GOAWAY by then.
    for _ in 0..200 {
        if server.connections() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        call(&ch).await;
    }
    assert_eq!(server.connections(), 2, "a new connection after GOAWAY");
    let logged = capture.lines_containing("the connection drains");
    assert!(!logged.is_empty(), "a GOAWAY event");
    let addr = server.addr().to_string();
    assert!(
        logged.iter().all(|line| line.contains(&format!("addr={addr}"))
            || line.contains(&format!("address={addr}"))),
        "observability.rs says connection events carry the address as `addr` or `address`: {logged:#?}"
    );
}
