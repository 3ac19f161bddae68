//! A raw-frame HTTP/2 test server, for what h2's server API cannot produce: a GOAWAY whose last-stream-id
//! leaves out a stream the client already sent, or a SETTINGS_MAX_CONCURRENT_STREAMS of 1 with the only
//! stream held open until a GOAWAY. It writes frames itself (the 9-byte header and a payload) and reads the
//! client's frames without decoding header blocks (HPACK), which none of its behaviours need.
//!
//! A [`RawServer`] listens on a loopback port and plays a script: connection 1 gets the first
//! [`Behaviour`] of the list, connection 2 the second, and so on; every connection after the list gets
//! the `then` behaviour, typically [`Behaviour::Faulty`] (the h2 fault-injecting server), so a call retried
//! on a new connection reaches a real server. Every raw behaviour answers the client's SETTINGS with an
//! ACK and its PINGs with a PING ACK (the channel calls a connection READY only once a PING is answered),
//! and records every frame it receives ([`RawServer::received`]).
//!
//! Timers (the grace before closing, a delayed GOAWAY) run on tokio's clock, so tests on a paused clock
//! control them.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use crate::faulty::FaultyServer;

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame type codes (RFC 9113 §6).
pub mod kind {
    /// DATA.
    pub const DATA: u8 = 0x0;
    /// HEADERS.
    pub const HEADERS: u8 = 0x1;
    /// PRIORITY.
    pub const PRIORITY: u8 = 0x2;
    /// RST_STREAM.
    pub const RST_STREAM: u8 = 0x3;
    /// SETTINGS.
    pub const SETTINGS: u8 = 0x4;
    /// PUSH_PROMISE.
    pub const PUSH_PROMISE: u8 = 0x5;
    /// PING.
    pub const PING: u8 = 0x6;
    /// GOAWAY.
    pub const GOAWAY: u8 = 0x7;
    /// WINDOW_UPDATE.
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// CONTINUATION.
    pub const CONTINUATION: u8 = 0x9;
}

/// The ACK flag of SETTINGS and PING.
pub const FLAG_ACK: u8 = 0x1;
/// The END_STREAM flag of DATA and HEADERS.
pub const FLAG_END_STREAM: u8 = 0x1;
/// SETTINGS_MAX_CONCURRENT_STREAMS.
pub const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
/// The NO_ERROR error code.
pub const NO_ERROR: u32 = 0x0;

/// One HTTP/2 frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The frame type ([`kind`]).
    pub kind: u8,
    /// The flags.
    pub flags: u8,
    /// The stream id (the reserved bit cleared).
    pub stream_id: u32,
    /// The payload, as sent (header blocks are not decoded).
    pub payload: Bytes,
}

impl Frame {
    /// A frame.
    pub fn new(kind: u8, flags: u8, stream_id: u32, payload: impl Into<Bytes>) -> Frame {
        Frame {
            kind,
            flags,
            stream_id,
            payload: payload.into(),
        }
    }

    /// A SETTINGS frame (not an ACK) with these (identifier, value) pairs.
    pub fn settings(pairs: &[(u16, u32)]) -> Frame {
        let mut p = BytesMut::new();
        for (id, value) in pairs {
            p.put_u16(*id);
            p.put_u32(*value);
        }
        Frame::new(kind::SETTINGS, 0, 0, p.freeze())
    }

    /// A GOAWAY frame.
    pub fn goaway(last_stream_id: u32, error_code: u32, debug: &[u8]) -> Frame {
        let mut p = BytesMut::new();
        p.put_u32(last_stream_id & 0x7fff_ffff);
        p.put_u32(error_code);
        p.extend_from_slice(debug);
        Frame::new(kind::GOAWAY, 0, 0, p.freeze())
    }

    /// The wire form: the 9-byte header and the payload.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(9 + self.payload.len());
        let len = self.payload.len() as u32;
        b.put_u8((len >> 16) as u8);
        b.put_u16(len as u16);
        b.put_u8(self.kind);
        b.put_u8(self.flags);
        b.put_u32(self.stream_id & 0x7fff_ffff);
        b.extend_from_slice(&self.payload);
        b.freeze()
    }

    /// The error code of a RST_STREAM or GOAWAY frame.
    pub fn error_code(&self) -> Option<u32> {
        let at = match self.kind {
            kind::RST_STREAM => 0,
            kind::GOAWAY => 4,
            _ => return None,
        };
        let b = self.payload.get(at..at + 4)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// Reads one frame (header, then payload of the announced length).
pub async fn read_frame<R: tokio::io::AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Frame> {
    let mut header = [0u8; 9];
    r.read_exact(&mut header).await?;
    let len =
        (usize::from(header[0]) << 16) | (usize::from(header[1]) << 8) | usize::from(header[2]);
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await?;
    Ok(Frame {
        kind: header[3],
        flags: header[4],
        stream_id: u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff,
        payload: payload.into(),
    })
}

/// Writes one frame.
pub async fn write_frame<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut W,
    frame: &Frame,
) -> std::io::Result<()> {
    w.write_all(&frame.encode()).await?;
    w.flush().await
}

/// When a raw connection closes its socket after its GOAWAY.
#[derive(Clone, Debug)]
pub enum Close {
    /// This long after the GOAWAY (the client may still read it; streams it left running then fail).
    After(Duration),
    /// Only when the client closes the connection (the server keeps answering PINGs and SETTINGS).
    WhenClientCloses,
}

/// When [`Behaviour::MaxConcurrentOne`] sends its GOAWAY.
#[derive(Clone, Debug)]
pub enum Trigger {
    /// This long after the held stream's HEADERS arrived.
    After(Duration),
    /// When the test calls `notify_one()` on this (a permit stored before the stream arrives counts too).
    Notified(Arc<Notify>),
}

/// What the server does with one connection.
#[derive(Clone)]
pub enum Behaviour {
    /// Empty SETTINGS; when the first HEADERS frame arrives (stream S), GOAWAY(last_stream_id = S - 2, or 0
    /// for S = 1, NO_ERROR): the stream was not processed, and h2's client fails it with a GoAway error.
    /// Then closes as `close` says.
    GoawayBelowFirstStream {
        /// When to close the socket after the GOAWAY.
        close: Close,
    },
    /// SETTINGS with MAX_CONCURRENT_STREAMS = 1; holds the first stream (never answers it); when `goaway`
    /// fires, GOAWAY(last_stream_id = that stream, NO_ERROR): the held stream is covered, and a second stream
    /// the client queued locally behind the limit (never sent) is cut off. Then closes as `close` says, which
    /// also ends the held stream.
    MaxConcurrentOne {
        /// When to send the GOAWAY.
        goaway: Trigger,
        /// When to close the socket after the GOAWAY.
        close: Close,
    },
    /// The h2 fault-injecting server, recording into this [`FaultyServer`]'s events (use
    /// [`FaultyServer::detached`] or a started one).
    Faulty(FaultyServer),
}

/// A frame a raw connection received from the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// Which connection of the listener (1 = the first accepted).
    pub connection: usize,
    /// The frame.
    pub frame: Frame,
}

#[derive(Default)]
struct Shared {
    connections: Mutex<usize>,
    received: Mutex<Vec<Received>>,
}

/// A running raw-frame server.
#[derive(Clone)]
pub struct RawServer {
    /// Where it listens.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl RawServer {
    /// Starts a server on a free loopback port: connection n (1-based) is served by `first[n - 1]`, every
    /// later one by `then`.
    pub async fn start(first: Vec<Behaviour>, then: Behaviour) -> std::io::Result<RawServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let server = RawServer {
            addr: listener.local_addr()?,
            shared: Arc::default(),
        };
        let shared = server.shared.clone();
        tokio::spawn(async move {
            while let Ok((tcp, peer)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                let index = match shared.connections.lock() {
                    Ok(mut n) => {
                        *n += 1;
                        *n
                    }
                    Err(_) => continue,
                };
                let behaviour = first.get(index - 1).unwrap_or(&then).clone();
                match behaviour {
                    Behaviour::Faulty(faulty) => {
                        tokio::spawn(faulty.serve_connection(tcp, peer));
                    }
                    raw => {
                        tokio::spawn(raw_connection(tcp, index, raw, shared.clone()));
                    }
                }
            }
        });
        Ok(server)
    }

    /// The channel target that reaches this server.
    pub fn target(&self) -> String {
        format!("ipv4:{}", self.addr)
    }

    /// How many connections the listener accepted (raw and served alike).
    pub fn connections(&self) -> usize {
        self.shared
            .connections
            .lock()
            .map(|n| *n)
            .unwrap_or_default()
    }

    /// Every frame the raw connections received, in order (connections served by h2 are not recorded).
    pub fn received(&self) -> Vec<Received> {
        self.shared
            .received
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// The stream ids of the HEADERS frames the raw connections received, as (connection, stream id).
    pub fn headers_received(&self) -> Vec<(usize, u32)> {
        self.received()
            .into_iter()
            .filter(|r| r.frame.kind == kind::HEADERS)
            .map(|r| (r.connection, r.frame.stream_id))
            .collect()
    }
}

/// Plays one raw behaviour on a connection.
async fn raw_connection(tcp: TcpStream, index: usize, behaviour: Behaviour, shared: Arc<Shared>) {
    let (mut rd, mut wr) = tcp.into_split();
    let settings = match &behaviour {
        Behaviour::MaxConcurrentOne { .. } => {
            Frame::settings(&[(SETTINGS_MAX_CONCURRENT_STREAMS, 1)])
        }
        _ => Frame::settings(&[]),
    };
    if write_frame(&mut wr, &settings).await.is_err() {
        return;
    }
    // A reader task, so the loop below can wait on frames, timers and triggers at once (reads are not
    // cancel-safe).
    let (tx, mut frames) = mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        let mut preface = [0u8; 24];
        if rd.read_exact(&mut preface).await.is_err() || &preface != PREFACE {
            return;
        }
        while let Ok(frame) = read_frame(&mut rd).await {
            if tx.send(frame).is_err() {
                return;
            }
        }
    });
    let _abort_reader = AbortOnDrop(reader);
    let mut held: Option<u32> = None;
    let mut goaway_at: Option<Instant> = None;
    let mut goaway_sent = false;
    let mut close_at: Option<Instant> = None;
    let (close, trigger) = match &behaviour {
        Behaviour::GoawayBelowFirstStream { close } => (close.clone(), None),
        Behaviour::MaxConcurrentOne { goaway, close } => (close.clone(), Some(goaway.clone())),
        Behaviour::Faulty(_) => return,
    };
    let notify = match &trigger {
        Some(Trigger::Notified(n)) => Some(n.clone()),
        _ => None,
    };
    loop {
        let waiting_for_notify = held.is_some() && !goaway_sent && notify.is_some();
        let goaway = tokio::select! {
            frame = frames.recv() => {
                let Some(frame) = frame else { return };
                if let Ok(mut r) = shared.received.lock() {
                    r.push(Received { connection: index, frame: frame.clone() });
                }
                let reply = match frame.kind {
                    kind::SETTINGS if frame.flags & FLAG_ACK == 0 => {
                        Some(Frame::new(kind::SETTINGS, FLAG_ACK, 0, Bytes::new()))
                    }
                    kind::PING if frame.flags & FLAG_ACK == 0 => {
                        Some(Frame::new(kind::PING, FLAG_ACK, 0, frame.payload.clone()))
                    }
                    kind::DATA if !frame.payload.is_empty() => {
                        // Keep the connection window open; streams get no WINDOW_UPDATE (none is answered).
                        let mut p = BytesMut::new();
                        p.put_u32(frame.payload.len() as u32);
                        Some(Frame::new(kind::WINDOW_UPDATE, 0, 0, p.freeze()))
                    }
                    kind::GOAWAY => return,
                    _ => None,
                };
                if let Some(reply) = reply {
                    if write_frame(&mut wr, &reply).await.is_err() {
                        return;
                    }
                }
                if frame.kind != kind::HEADERS || goaway_sent || held.is_some() {
                    None
                } else {
                    match &trigger {
                        // GoawayBelowFirstStream: at once, below this stream.
                        None => Some(frame.stream_id.saturating_sub(2)),
                        // MaxConcurrentOne: hold this stream; the GOAWAY comes later.
                        Some(t) => {
                            held = Some(frame.stream_id);
                            if let Trigger::After(d) = t {
                                goaway_at = Some(Instant::now() + *d);
                            }
                            None
                        }
                    }
                }
            }
            () = sleep_until(goaway_at), if goaway_at.is_some() && !goaway_sent => held,
            () = wait_notified(notify.as_deref()), if waiting_for_notify => held,
            () = sleep_until(close_at), if close_at.is_some() => return,
        };
        if let Some(last) = goaway {
            goaway_sent = true;
            if write_frame(&mut wr, &Frame::goaway(last, NO_ERROR, b"raw test server"))
                .await
                .is_err()
            {
                return;
            }
            if let Close::After(d) = close {
                close_at = Some(Instant::now() + d);
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn wait_notified(notify: Option<&Notify>) {
    match notify {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::faulty::{methods, Event};
    use crate::test_h2;

    #[test]
    fn frames_round_trip_through_the_wire_form() {
        let f = Frame::goaway(5, NO_ERROR, b"bye");
        let wire = f.encode();
        assert_eq!(&wire[..9], &[0, 0, 11, kind::GOAWAY, 0, 0, 0, 0, 0]);
        assert_eq!(f.error_code(), Some(NO_ERROR));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let back = rt.block_on(read_frame(&mut &wire[..])).unwrap();
        assert_eq!(back, f);
    }

    #[tokio::test]
    async fn a_goaway_below_the_first_stream_fails_it_and_the_next_connection_is_served() {
        let faulty = FaultyServer::detached();
        let raw = RawServer::start(
            vec![Behaviour::GoawayBelowFirstStream {
                close: Close::After(Duration::from_millis(50)),
            }],
            Behaviour::Faulty(faulty.clone()),
        )
        .await
        .unwrap();
        let mut first = test_h2::connect(raw.addr).await;
        let err = test_h2::call(&mut first, methods::FLAKY, &[("x-test-key", "k")], &[b""])
            .await
            .expect_err("not processed");
        assert!(err.is_go_away() && err.is_remote(), "{err:?}");
        assert_eq!(err.reason(), Some(h2::Reason::NO_ERROR));
        assert_eq!(raw.headers_received(), vec![(1, 1)]);
        let goaway_sent_to = raw.connections();
        assert_eq!(goaway_sent_to, 1);

        let mut second = test_h2::connect(raw.addr).await;
        let answer = test_h2::call(&mut second, methods::FLAKY, &[("x-test-key", "k")], &[b""])
            .await
            .unwrap();
        assert_eq!(answer.status(), Some("0"));
        assert_eq!(raw.connections(), 2);
        assert!(faulty.events().contains(&Event::Attempt {
            key: "k".into(),
            number: 1,
            previous_attempts: None,
        }));
    }

    #[tokio::test]
    async fn max_concurrent_one_holds_the_first_stream_and_a_goaway_cuts_off_the_queued_one() {
        let trigger = Arc::new(Notify::new());
        let raw = RawServer::start(
            vec![Behaviour::MaxConcurrentOne {
                goaway: Trigger::Notified(trigger.clone()),
                close: Close::After(Duration::from_millis(50)),
            }],
            Behaviour::Faulty(FaultyServer::detached()),
        )
        .await
        .unwrap();
        let mut send = test_h2::connect(raw.addr).await;
        let (held, _held_stream) = send
            .send_request(test_h2::request(methods::FLAKY, &[]), false)
            .unwrap();
        for _ in 0..200 {
            if !raw.headers_received().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(raw.headers_received(), vec![(1, 1)]);
        // h2 queues the second stream locally: the server allows one at a time.
        let mut other = send.clone();
        let (queued, _queued_stream) = other
            .send_request(test_h2::request(methods::FLAKY, &[]), false)
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            raw.headers_received(),
            vec![(1, 1)],
            "the second never left"
        );
        trigger.notify_one();
        let err = test_h2::read_answer(queued).await.expect_err("cut off");
        assert!(err.is_go_away() && err.is_remote(), "{err:?}");
        // The held stream is covered by the GOAWAY; it ends when the server closes the connection.
        let held = test_h2::read_answer(held).await.expect_err("closed");
        assert!(!held.is_go_away() && !held.is_reset(), "{held:?}");
        assert_eq!(raw.headers_received(), vec![(1, 1)]);
    }
}
