//! One subchannel connection's task, which the event loop spawns for the policy's `Connect` action and
//! aborts to let go of it: the connection attempt (`conn/connect.rs`: the socket, the proxy tunnel, TLS, the
//! HTTP/2 handshake and the PING that proves the server's SETTINGS arrived), then, once READY, the
//! connection's life: it reports READY with the connection, then whichever comes first of the connection
//! closing, a GOAWAY (draining: its streams finish on it) or keepalive finding the peer silent (the task
//! closes it). A failed attempt reports the failure. Every report goes to the loop as an [`Event`] with
//! the subchannel's id and the loop's generation for it.
//!
//! Not here: when connections are made or let go of (`event_loop.rs`), connection backoff (grpc-lb).

use std::sync::Arc;

use grpc_lb::{Address, SubchannelId};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::shared::{ActiveCalls, Conn, Event};
use crate::conn::connect::{connect, AbortOnDrop, Established, Http2Settings};
use crate::conn::keepalive::{self, Keepalive, OpenStreams};
use crate::conn::proxy::Route;
use crate::conn::tls::TlsConnector;
use crate::wire::status::Status;

/// What a connection task needs of its channel.
pub(super) struct ChannelParts {
    pub(super) settings: Http2Settings,
    /// TLS (`None`: plaintext), or why this connection cannot have the transport it was asked for.
    pub(super) tls: Result<Option<TlsConnector>, Status>,
    pub(super) route: Route,
    pub(super) keepalive: Arc<Keepalive>,
    pub(super) active: Arc<ActiveCalls>,
    pub(super) events: mpsc::UnboundedSender<Event>,
}

/// One connection attempt and, once READY, the connection's life.
pub(super) async fn connect_subchannel(
    id: SubchannelId,
    generation: u64,
    addr: Address,
    deadline: Instant,
    channel: ChannelParts,
) {
    let ChannelParts {
        settings,
        tls,
        route,
        keepalive,
        active,
        events,
    } = channel;
    let tls = match tls {
        Ok(tls) => tls,
        Err(error) => {
            let _ = events.send(Event::Failed(id, generation, error));
            return;
        }
    };
    let ended = connect(&addr, deadline, &settings, tls.as_ref(), &route).await;
    match ended {
        Ok(Established {
            send,
            driver,
            mut closed,
            seen,
            ping_pong,
        }) => {
            // The streams of the channel's own on this connection (the health Watch): with its calls,
            // they keep keepalive pinging.
            let streams = OpenStreams::default();
            let conn = Conn {
                send,
                streams: streams.clone(),
            };
            let _ = events.send(Event::Ready(id, generation, addr.clone(), conn));
            // Aborting this task (Disconnect) must close the connection too.
            let _abort = AbortOnDrop(driver);
            // Biased, the GOAWAY first: a server that sends GOAWAY and closes the connection makes both
            // branches ready at once, and an unbiased pick would then lose the GOAWAY half the time (its
            // `too_many_pings` would not back keepalive off). Each branch runs once, so no branch starves.
            tokio::select! {
                biased;
                goaway = seen.goaway_received() => {
                    keepalive.on_goaway(&addr, &goaway);
                    let _ = events.send(Event::Draining(id, generation, goaway));
                    let _ = closed.await;
                }
                _ = &mut closed => {
                    let _ = events.send(Event::Closed(id, generation));
                }
                status = keepalive::run(keepalive.clone(), ping_pong, seen.clone(), || active.in_use() || streams.any()) => {
                    // The peer stopped answering: close the connection (its calls fail UNAVAILABLE).
                    tracing::info!(%addr, %status, "closing the connection");
                    let _ = events.send(Event::Closed(id, generation));
                }
            }
        }
        Err(error) => {
            let _ = events.send(Event::Failed(id, generation, error));
        }
    }
}
