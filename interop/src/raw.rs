//! A raw-frame HTTP/2 test server, for what h2's server API cannot produce: a GOAWAY whose last-stream-id
//! leaves out a stream the client already sent, or a SETTINGS_MAX_CONCURRENT_STREAMS of 1 with the only
//! stream held open until a GOAWAY, and the hostile servers of the reliability suite (floods of PING,
//! SETTINGS, CONTINUATION or WINDOW_UPDATE frames, DATA on closed streams, increasing GOAWAYs, silence, an
//! HTTP/1.1 answer, endless responses, oversized header lists). It writes frames itself (the 9-byte header and
//! a payload) and reads the client's frames without decoding header blocks; the header blocks it sends use a
//! minimal HPACK encoding ([`hpack`]: the static `:status: 200` and literal fields, no Huffman, no dynamic
//! table), which every decoder must accept.
//!
//! A [`RawServer`] listens on a loopback port and plays a script: connection 1 gets the first
//! [`Behaviour`] of the list, connection 2 the second, and so on; every connection after the list gets
//! the `then` behaviour, typically [`Behaviour::Faulty`] (the h2 fault-injecting server), so a call retried
//! on a new connection reaches a real server. Every raw behaviour answers the client's SETTINGS with an
//! ACK and its PINGs with a PING ACK (the channel calls a connection READY only once a PING is answered),
//! and records every frame it receives ([`RawServer::received`], the first [`RECORD_LIMIT`]) and counts every
//! frame it sends ([`RawServer::sent`]).
//!
//! The hostile behaviours wait for a stream's request to end (the client's END_STREAM), then misbehave on that
//! stream or the connection; most then answer every later stream of the connection properly (response
//! headers, one empty message, `grpc-status: 0`), so a test can see whether the connection survived. None of
//! them tracks the client's flow-control windows: what they send stays within the channel's initial windows
//! (1 MiB per stream, 16 MiB per connection) for test-sized runs.
//!
//! Timers (the grace before closing, a delayed GOAWAY) run on tokio's clock, so tests on a paused clock
//! control them.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
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
/// The END_HEADERS flag of HEADERS and CONTINUATION.
pub const FLAG_END_HEADERS: u8 = 0x4;
/// SETTINGS_MAX_CONCURRENT_STREAMS.
pub const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
/// The NO_ERROR error code.
pub const NO_ERROR: u32 = 0x0;
/// The PROTOCOL_ERROR error code.
pub const PROTOCOL_ERROR: u32 = 0x1;
/// The FLOW_CONTROL_ERROR error code.
pub const FLOW_CONTROL_ERROR: u32 = 0x3;
/// The STREAM_CLOSED error code.
pub const STREAM_CLOSED: u32 = 0x5;
/// The CANCEL error code.
pub const CANCEL: u32 = 0x8;
/// The largest frame payload every peer accepts (the SETTINGS_MAX_FRAME_SIZE default, which the channel
/// keeps).
pub const MAX_FRAME_SIZE: usize = 16 << 10;
/// The largest flow-control window (2^31 - 1); a WINDOW_UPDATE that takes a window past it is a
/// FLOW_CONTROL_ERROR.
pub const MAX_WINDOW: u32 = 0x7fff_ffff;
/// How many received frames [`RawServer::received`] keeps (the first ones; floods make the client answer
/// thousands).
pub const RECORD_LIMIT: usize = 100_000;

/// A minimal HPACK encoder (RFC 7541) for the header blocks the raw server sends: the static-table entry
/// `:status: 200` and literal header fields without indexing, new name, no Huffman coding. No dynamic table
/// is used, so every block decodes on its own.
pub mod hpack {
    use bytes::{BufMut, Bytes, BytesMut};

    /// The indexed field `:status: 200` (static table index 8).
    pub const STATUS_200: u8 = 0x88;

    /// Appends an HPACK integer (RFC 7541 §5.1) with a `prefix_bits`-bit prefix; `first` holds the bits of the
    /// first byte above the prefix.
    pub fn integer(out: &mut BytesMut, first: u8, prefix_bits: u32, value: usize) {
        let max = (1usize << prefix_bits) - 1;
        if value < max {
            out.put_u8(first | value as u8);
            return;
        }
        out.put_u8(first | max as u8);
        let mut rest = value - max;
        while rest >= 0x80 {
            out.put_u8((rest & 0x7f) as u8 | 0x80);
            rest >>= 7;
        }
        out.put_u8(rest as u8);
    }

    /// Appends a string literal (RFC 7541 §5.2) without Huffman coding: its length (7-bit prefix), then
    /// the bytes.
    pub fn string(out: &mut BytesMut, s: &[u8]) {
        integer(out, 0x00, 7, s.len());
        out.extend_from_slice(s);
    }

    /// Appends a literal header field without indexing, with a new name (RFC 7541 §6.2.2): `0x00`, the
    /// name, the value.
    pub fn literal(out: &mut BytesMut, name: &[u8], value: &[u8]) {
        out.put_u8(0x00);
        string(out, name);
        string(out, value);
    }

    /// A header block: `(":status", "200")` as [`STATUS_200`], every other field as a [`literal`].
    pub fn block(fields: &[(&str, &[u8])]) -> Bytes {
        let mut out = BytesMut::new();
        for (name, value) in fields {
            if *name == ":status" && *value == b"200" {
                out.put_u8(STATUS_200);
            } else {
                literal(&mut out, name.as_bytes(), value);
            }
        }
        out.freeze()
    }

    /// The response headers of a gRPC answer: `:status: 200`, `content-type: application/grpc`.
    pub fn response_headers() -> Bytes {
        block(&[(":status", b"200"), ("content-type", b"application/grpc")])
    }

    /// Trailers with this `grpc-status`.
    pub fn trailers(status: &str) -> Bytes {
        block(&[("grpc-status", status.as_bytes())])
    }
}

/// A gRPC Length-Prefixed-Message: flag 0, the 4-byte length, the payload.
pub fn grpc_message(payload: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + payload.len());
    b.put_u8(0);
    b.put_u32(payload.len() as u32);
    b.extend_from_slice(payload);
    b.freeze()
}

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

    /// A HEADERS frame carrying a whole header block (END_HEADERS set), ending the stream if `end_stream`.
    pub fn headers(stream_id: u32, block: impl Into<Bytes>, end_stream: bool) -> Frame {
        let end = if end_stream { FLAG_END_STREAM } else { 0 };
        Frame::new(kind::HEADERS, FLAG_END_HEADERS | end, stream_id, block)
    }

    /// A header block as a HEADERS frame and as many CONTINUATION frames as it takes at
    /// [`MAX_FRAME_SIZE`], the last one with END_HEADERS.
    pub fn header_frames(stream_id: u32, block: Bytes, end_stream: bool) -> Vec<Frame> {
        let mut frames = Vec::new();
        let mut rest = block;
        let mut first = true;
        loop {
            let chunk = rest.split_to(rest.len().min(MAX_FRAME_SIZE));
            let mut flags = if rest.is_empty() { FLAG_END_HEADERS } else { 0 };
            let kind = if first {
                if end_stream {
                    flags |= FLAG_END_STREAM;
                }
                kind::HEADERS
            } else {
                kind::CONTINUATION
            };
            frames.push(Frame::new(kind, flags, stream_id, chunk));
            first = false;
            if rest.is_empty() {
                return frames;
            }
        }
    }

    /// A DATA frame.
    pub fn data(stream_id: u32, payload: impl Into<Bytes>, end_stream: bool) -> Frame {
        let flags = if end_stream { FLAG_END_STREAM } else { 0 };
        Frame::new(kind::DATA, flags, stream_id, payload)
    }

    /// A PING frame (not an ACK).
    pub fn ping(payload: [u8; 8]) -> Frame {
        Frame::new(kind::PING, 0, 0, Bytes::copy_from_slice(&payload))
    }

    /// A WINDOW_UPDATE frame (stream 0: the connection window).
    pub fn window_update(stream_id: u32, increment: u32) -> Frame {
        let mut p = BytesMut::new();
        p.put_u32(increment & MAX_WINDOW);
        Frame::new(kind::WINDOW_UPDATE, 0, stream_id, p.freeze())
    }

    /// An RST_STREAM frame.
    pub fn rst_stream(stream_id: u32, error_code: u32) -> Frame {
        let mut p = BytesMut::new();
        p.put_u32(error_code);
        Frame::new(kind::RST_STREAM, 0, stream_id, p.freeze())
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
    /// Answers every stream properly, whatever its path: response headers, one empty message, trailers with
    /// `grpc-status: 0`.
    ServeOk,
    /// Accepts the TCP connection and never writes a byte (no SETTINGS); reads and discards what the client
    /// sends until it closes.
    Silent,
    /// An HTTP/1.1 server: answers the client's first bytes (the HTTP/2 preface) with `HTTP/1.1 400 Bad
    /// Request`, closes its sending side, and reads until the client closes.
    Http11,
    /// When the first request ends: `pings` PINGs (distinct payloads) in one burst, then the answer. The
    /// client must ACK each ([`RawServer::received`]).
    PingFlood {
        /// How many PINGs.
        pings: usize,
    },
    /// When the first request ends: `frames` SETTINGS frames (SETTINGS_MAX_CONCURRENT_STREAMS alternating 100
    /// and 101) in one burst, then the answer. The client must ACK each.
    SettingsFlood {
        /// How many SETTINGS frames.
        frames: usize,
    },
    /// When the first request ends: a HEADERS frame without END_HEADERS (`:status: 200`, then a literal field
    /// whose value announces 1 MiB), then CONTINUATION frames of [`MAX_FRAME_SIZE`] bytes without
    /// END_HEADERS, without end, until the client closes the connection.
    ContinuationFlood,
    /// When the first stream opens (stream S, its HEADERS: h2 ignores WINDOW_UPDATEs on a stream whose
    /// sending side the client has closed, so a stream test must keep it open): `updates` WINDOW_UPDATEs of 1,
    /// alternating the connection and S; then, if `overflow`, one WINDOW_UPDATE of 2^31 - 1 on that window
    /// (past the maximum: a FLOW_CONTROL_ERROR); then the answer.
    WindowUpdateFlood {
        /// How many WINDOW_UPDATEs of 1.
        updates: usize,
        /// Which window to overflow last, if any.
        overflow: Option<Window>,
    },
    /// Answers the first stream (headers, an empty message, OK trailers with END_STREAM) and, in the same
    /// write, a DATA frame with a message on that stream after its trailers.
    DataAfterTrailers,
    /// Answers the first stream; when the second request ends, first sends a DATA frame with a message on
    /// the first (closed) stream, then answers the second.
    DataOnClosedStream,
    /// Never answers the first stream; when the client resets it (RST_STREAM, e.g. at its deadline), sends a
    /// DATA frame with a message and OK trailers on it.
    DataOnResetStream,
    /// When the first request ends (stream S): the response headers, then GOAWAY(last-stream-id = S - 2, or
    /// 0), NO_ERROR): the stream was answered and yet is declared unprocessed. Keeps the connection open.
    GoawayBelowAnsweredStream,
    /// When the first request ends (stream S): GOAWAY(L) then GOAWAY(L + 2), where L = S if
    /// `first_covers_stream` else S - 2 (or 0): the second raises the last-stream-id, a protocol error.
    /// Keeps the connection open.
    IncreasingGoaways {
        /// Whether the first GOAWAY covers the stream (it may run on) or cuts it off (unprocessed).
        first_covers_stream: bool,
    },
    /// When the first request ends: the response headers, then `per_tick` empty DATA frames (no END_STREAM)
    /// every `every` (tokio's clock), without end.
    EmptyDataFrames {
        /// The pause between bursts.
        every: Duration,
        /// Empty frames per burst.
        per_tick: usize,
    },
    /// When the first request ends: the response headers, then a message of `size` bytes every `every`
    /// (tokio's clock), without end.
    EndlessMessages {
        /// The pause between messages.
        every: Duration,
        /// Each message's payload size.
        size: usize,
    },
    /// When the first request ends: the response headers and a message prefix announcing 1 MiB, then
    /// `chunk` bytes of it every `every` (tokio's clock): the message never completes.
    TrickleMessage {
        /// The pause between chunks.
        every: Duration,
        /// Bytes per chunk.
        chunk: usize,
    },
    /// When the first request ends: response headers with a field `x-big` of `value_len` bytes (split into
    /// HEADERS and CONTINUATION frames), then an empty message and OK trailers.
    OversizeHeaders {
        /// The length of the `x-big` value.
        value_len: usize,
    },
}

/// A flow-control window of the client's (its send windows, which the server's WINDOW_UPDATEs grow).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// The connection window (WINDOW_UPDATE on stream 0): an overflow is a connection error.
    Connection,
    /// The stream's window: an overflow is a stream error.
    Stream,
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
    /// Frames sent by the raw connections, by type (index = [`kind`] code; unknown types are not counted).
    sent: [AtomicU64; 10],
}

impl Shared {
    fn record(&self, connection: usize, frame: &Frame) {
        if let Ok(mut r) = self.received.lock() {
            if r.len() < RECORD_LIMIT {
                r.push(Received {
                    connection,
                    frame: frame.clone(),
                });
            }
        }
    }

    fn count_sent(&self, frame: &Frame) {
        if let Some(n) = self.sent.get(usize::from(frame.kind)) {
            n.fetch_add(1, Ordering::Relaxed);
        }
    }
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
                    raw @ (Behaviour::GoawayBelowFirstStream { .. }
                    | Behaviour::MaxConcurrentOne { .. }) => {
                        tokio::spawn(raw_connection(tcp, index, raw, shared.clone()));
                    }
                    Behaviour::Silent => {
                        tokio::spawn(silent_connection(tcp));
                    }
                    Behaviour::Http11 => {
                        tokio::spawn(http11_connection(tcp));
                    }
                    scripted => {
                        tokio::spawn(scripted_connection(tcp, index, scripted, shared.clone()));
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

    /// How many frames of this type ([`kind`]) the raw connections sent.
    pub fn sent(&self, kind: u8) -> u64 {
        self.shared
            .sent
            .get(usize::from(kind))
            .map(|n| n.load(Ordering::Relaxed))
            .unwrap_or_default()
    }

    /// The frames of this type the raw connections received, with these flags set (e.g. PING with
    /// [`FLAG_ACK`]), as (connection, frame).
    pub fn received_of(&self, kind: u8, flags: u8) -> Vec<(usize, Frame)> {
        self.received()
            .into_iter()
            .filter(|r| r.frame.kind == kind && r.frame.flags & flags == flags)
            .map(|r| (r.connection, r.frame))
            .collect()
    }

    /// The (connection, stream id, error code) of every RST_STREAM the raw connections received.
    pub fn resets_received(&self) -> Vec<(usize, u32, u32)> {
        self.received_of(kind::RST_STREAM, 0)
            .into_iter()
            .filter_map(|(c, f)| Some((c, f.stream_id, f.error_code()?)))
            .collect()
    }

    /// The (connection, error code) of every GOAWAY the raw connections received.
    pub fn goaways_received(&self) -> Vec<(usize, u32)> {
        self.received_of(kind::GOAWAY, 0)
            .into_iter()
            .filter_map(|(c, f)| Some((c, f.error_code()?)))
            .collect()
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
    shared.count_sent(&settings);
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
        _ => return,
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
                shared.record(index, &frame);
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
                    shared.count_sent(&reply);
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
            let frame = Frame::goaway(last, NO_ERROR, b"raw test server");
            shared.count_sent(&frame);
            if write_frame(&mut wr, &frame).await.is_err() {
                return;
            }
            if let Close::After(d) = close {
                close_at = Some(Instant::now() + d);
            }
        }
    }
}

/// [`Behaviour::Silent`]: reads and discards until the client closes; writes nothing.
async fn silent_connection(mut tcp: TcpStream) {
    let mut buf = vec![0u8; 16 << 10];
    while let Ok(n) = tcp.read(&mut buf).await {
        if n == 0 {
            return;
        }
    }
}

/// What [`Behaviour::Http11`] answers.
pub const HTTP11_BAD_REQUEST: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\
Content-Length: 11\r\nConnection: close\r\n\r\nBad Request";

/// [`Behaviour::Http11`].
async fn http11_connection(mut tcp: TcpStream) {
    let mut buf = vec![0u8; 16 << 10];
    // Like an HTTP/1.1 server, wait for the request's first bytes (here, the HTTP/2 preface).
    match tcp.read(&mut buf).await {
        Ok(0) | Err(_) => return,
        Ok(_) => {}
    }
    if tcp.write_all(HTTP11_BAD_REQUEST).await.is_err() || tcp.flush().await.is_err() {
        return;
    }
    let _ = tcp.shutdown().await;
    // A lingering close: closing with unread bytes would reset the connection before the client reads the
    // answer.
    while let Ok(n) = tcp.read(&mut buf).await {
        if n == 0 {
            return;
        }
    }
}

/// One connection of a scripted behaviour: the writer, the client's frames (read by a separate task, so the
/// client never blocks on writing while the script floods), automatic answers (SETTINGS ACK, PING ACK, a
/// connection WINDOW_UPDATE for request DATA), and the streams whose request ended or that the client reset.
struct Script {
    wr: OwnedWriteHalf,
    frames: mpsc::UnboundedReceiver<Frame>,
    shared: Arc<Shared>,
    /// Streams the client opened (HEADERS), not yet taken.
    opened: VecDeque<u32>,
    /// Streams whose request ended (END_STREAM from the client), not yet taken.
    requests: VecDeque<u32>,
    /// Streams already answered properly (not answered again by [`Script::serve_rest`]).
    answered: Vec<u32>,
    /// Streams the client reset, not yet taken.
    resets: VecDeque<u32>,
    /// The client closed the connection (EOF, an error, or its GOAWAY).
    closed: bool,
}

impl Script {
    /// Sends the server's SETTINGS and starts reading (and recording) the client's preface and frames.
    async fn start(tcp: TcpStream, index: usize, shared: Arc<Shared>) -> Option<Script> {
        let (mut rd, wr) = tcp.into_split();
        let (tx, frames) = mpsc::unbounded_channel();
        let recorder = shared.clone();
        let reader = tokio::spawn(async move {
            let mut preface = [0u8; 24];
            if rd.read_exact(&mut preface).await.is_err() || &preface != PREFACE {
                return;
            }
            // Recorded as they arrive, until the client closes: even after the script has stopped handling
            // them (a flood that ended because the client closed, whose last frames are still in flight).
            while let Ok(frame) = read_frame(&mut rd).await {
                recorder.record(index, &frame);
                let _ = tx.send(frame);
            }
        });
        let mut script = Script {
            wr,
            frames,
            shared,
            opened: VecDeque::new(),
            requests: VecDeque::new(),
            answered: Vec::new(),
            resets: VecDeque::new(),
            closed: false,
        };
        drop(reader);
        script.send(&[Frame::settings(&[])]).await.then_some(script)
    }

    /// Writes these frames in one write. False once the connection is unusable.
    async fn send(&mut self, frames: &[Frame]) -> bool {
        if self.closed {
            return false;
        }
        let mut buf = BytesMut::new();
        for f in frames {
            self.shared.count_sent(f);
            buf.extend_from_slice(&f.encode());
        }
        let ok = self.wr.write_all(&buf).await.is_ok() && self.wr.flush().await.is_ok();
        self.closed |= !ok;
        ok
    }

    /// Handles a frame from the client: returns the automatic answer, if any.
    fn take(&mut self, frame: Frame) -> Option<Frame> {
        let end_stream = frame.flags & FLAG_END_STREAM != 0;
        match frame.kind {
            kind::SETTINGS if frame.flags & FLAG_ACK == 0 => {
                Some(Frame::new(kind::SETTINGS, FLAG_ACK, 0, Bytes::new()))
            }
            kind::PING if frame.flags & FLAG_ACK == 0 => {
                Some(Frame::new(kind::PING, FLAG_ACK, 0, frame.payload))
            }
            kind::HEADERS => {
                self.opened.push_back(frame.stream_id);
                if end_stream {
                    self.requests.push_back(frame.stream_id);
                }
                None
            }
            kind::DATA => {
                if end_stream {
                    self.requests.push_back(frame.stream_id);
                }
                // Keep the connection window open; streams get no WINDOW_UPDATE.
                (!frame.payload.is_empty())
                    .then(|| Frame::window_update(0, frame.payload.len() as u32))
            }
            kind::RST_STREAM => {
                self.resets.push_back(frame.stream_id);
                None
            }
            kind::GOAWAY => {
                self.closed = true;
                None
            }
            _ => None,
        }
    }

    /// Waits for one frame from the client and handles it. False once the connection is closed.
    async fn pump(&mut self) -> bool {
        if self.closed {
            return false;
        }
        let Some(frame) = self.frames.recv().await else {
            self.closed = true;
            return false;
        };
        match self.take(frame) {
            Some(reply) => self.send(&[reply]).await,
            None => !self.closed,
        }
    }

    /// Handles every frame that has already arrived, without waiting. False once the connection is closed.
    async fn drain(&mut self) -> bool {
        let mut replies = Vec::new();
        loop {
            match self.frames.try_recv() {
                Ok(frame) => replies.extend(self.take(frame)),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    self.closed = true;
                    break;
                }
            }
        }
        if !replies.is_empty() && !self.send(&replies).await {
            return false;
        }
        !self.closed
    }

    /// Handles the client's frames for this long (tokio's clock). False once the connection is closed.
    async fn pump_for(&mut self, d: Duration) -> bool {
        let until = Instant::now() + d;
        loop {
            if self.closed {
                return false;
            }
            tokio::select! {
                frame = self.frames.recv() => {
                    let Some(frame) = frame else {
                        self.closed = true;
                        return false;
                    };
                    if let Some(reply) = self.take(frame) {
                        if !self.send(&[reply]).await {
                            return false;
                        }
                    }
                }
                () = tokio::time::sleep_until(until) => return !self.closed,
            }
        }
    }

    /// The next stream the client opened, or None when the client closed first.
    async fn next_opened(&mut self) -> Option<u32> {
        loop {
            if let Some(id) = self.opened.pop_front() {
                return Some(id);
            }
            if !self.pump().await {
                return None;
            }
        }
    }

    /// The next stream whose request ended, or None when the client closed first.
    async fn next_request(&mut self) -> Option<u32> {
        loop {
            if let Some(id) = self.requests.pop_front() {
                return Some(id);
            }
            if !self.pump().await {
                return None;
            }
        }
    }

    /// Waits until the client resets this stream. False when the client closed first.
    async fn reset_of(&mut self, id: u32) -> bool {
        loop {
            if let Some(at) = self.resets.iter().position(|s| *s == id) {
                self.resets.remove(at);
                return true;
            }
            if !self.pump().await {
                return false;
            }
        }
    }

    /// Handles the client's frames until it closes the connection.
    async fn until_closed(&mut self) {
        while self.pump().await {}
    }

    /// The frames of a proper answer: response headers, one empty message, OK trailers.
    fn ok_answer(id: u32) -> [Frame; 3] {
        [
            Frame::headers(id, hpack::response_headers(), false),
            Frame::data(id, grpc_message(b""), false),
            Frame::headers(id, hpack::trailers("0"), true),
        ]
    }

    /// Answers this stream properly. False once the connection is unusable.
    async fn answer(&mut self, id: u32) -> bool {
        self.answered.push(id);
        self.send(&Script::ok_answer(id)).await
    }

    /// Answers every later request properly (streams not answered yet), until the client closes.
    async fn serve_rest(&mut self) {
        while let Some(id) = self.next_request().await {
            if !self.answered.contains(&id) && !self.answer(id).await {
                return;
            }
        }
    }
}

/// The stream id of a GOAWAY that leaves out stream `id` (the one before it, or 0).
fn below(id: u32) -> u32 {
    id.saturating_sub(2)
}

/// Plays a scripted behaviour ([`Behaviour::ServeOk`] and the hostile ones) on a connection.
async fn scripted_connection(
    tcp: TcpStream,
    index: usize,
    behaviour: Behaviour,
    shared: Arc<Shared>,
) {
    let Some(mut s) = Script::start(tcp, index, shared).await else {
        return;
    };
    if let Behaviour::ServeOk = behaviour {
        s.serve_rest().await;
        return;
    }
    // WINDOW_UPDATE floods act as soon as the stream opens (h2 ignores WINDOW_UPDATEs on a stream whose
    // sending side the client has closed); the others once the request ended.
    let first = match behaviour {
        Behaviour::WindowUpdateFlood { .. } => s.next_opened().await,
        _ => s.next_request().await,
    };
    let Some(id) = first else {
        return;
    };
    match behaviour {
        Behaviour::PingFlood { pings } => {
            let flood: Vec<Frame> = (0..pings as u64)
                .map(|i| Frame::ping(i.to_be_bytes()))
                .collect();
            if !s.send(&flood).await || !s.answer(id).await {
                return;
            }
        }
        Behaviour::SettingsFlood { frames } => {
            let flood: Vec<Frame> = (0..frames as u32)
                .map(|i| Frame::settings(&[(SETTINGS_MAX_CONCURRENT_STREAMS, 100 + i % 2)]))
                .collect();
            if !s.send(&flood).await || !s.answer(id).await {
                return;
            }
        }
        Behaviour::ContinuationFlood => {
            let mut block = BytesMut::new();
            block.put_u8(hpack::STATUS_200);
            block.put_u8(0x00);
            hpack::string(&mut block, b"x-flood");
            // The value's length only: its bytes follow in the CONTINUATION frames, without end.
            hpack::integer(&mut block, 0x00, 7, 1 << 20);
            if !s
                .send(&[Frame::new(kind::HEADERS, 0, id, block.freeze())])
                .await
            {
                return;
            }
            let chunk = Bytes::from(vec![b'a'; MAX_FRAME_SIZE]);
            let burst: Vec<Frame> = (0..16)
                .map(|_| Frame::new(kind::CONTINUATION, 0, id, chunk.clone()))
                .collect();
            while s.send(&burst).await && s.drain().await {
                tokio::task::yield_now().await;
            }
            return;
        }
        Behaviour::WindowUpdateFlood { updates, overflow } => {
            let mut flood: Vec<Frame> = (0..updates)
                .map(|i| Frame::window_update(if i % 2 == 0 { 0 } else { id }, 1))
                .collect();
            match overflow {
                Some(Window::Connection) => flood.push(Frame::window_update(0, MAX_WINDOW)),
                Some(Window::Stream) => flood.push(Frame::window_update(id, MAX_WINDOW)),
                None => {}
            }
            if !s.send(&flood).await || !s.answer(id).await {
                return;
            }
        }
        Behaviour::DataAfterTrailers => {
            s.answered.push(id);
            let mut frames = Script::ok_answer(id).to_vec();
            frames.push(Frame::data(id, grpc_message(b"after the trailers"), false));
            if !s.send(&frames).await {
                return;
            }
        }
        Behaviour::DataOnClosedStream => {
            if !s.answer(id).await {
                return;
            }
            let Some(next) = s.next_request().await else {
                return;
            };
            let late = Frame::data(id, grpc_message(b"on a closed stream"), false);
            if !s.send(&[late]).await || !s.answer(next).await {
                return;
            }
        }
        Behaviour::DataOnResetStream => {
            if !s.reset_of(id).await {
                return;
            }
            let late = [
                Frame::data(id, grpc_message(b"on a reset stream"), false),
                Frame::headers(id, hpack::trailers("0"), true),
            ];
            if !s.send(&late).await {
                return;
            }
        }
        Behaviour::GoawayBelowAnsweredStream => {
            let frames = [
                Frame::headers(id, hpack::response_headers(), false),
                Frame::goaway(below(id), NO_ERROR, b"raw test server"),
            ];
            if s.send(&frames).await {
                s.until_closed().await;
            }
            return;
        }
        Behaviour::IncreasingGoaways {
            first_covers_stream,
        } => {
            let first = if first_covers_stream { id } else { below(id) };
            let frames = [
                Frame::goaway(first, NO_ERROR, b"raw test server"),
                Frame::goaway(first + 2, NO_ERROR, b"raw test server: increased"),
            ];
            if s.send(&frames).await {
                s.until_closed().await;
            }
            return;
        }
        Behaviour::EmptyDataFrames { every, per_tick } => {
            if !s
                .send(&[Frame::headers(id, hpack::response_headers(), false)])
                .await
            {
                return;
            }
            let burst: Vec<Frame> = (0..per_tick)
                .map(|_| Frame::data(id, Bytes::new(), false))
                .collect();
            while s.send(&burst).await && s.pump_for(every).await {}
            return;
        }
        Behaviour::EndlessMessages { every, size } => {
            if !s
                .send(&[Frame::headers(id, hpack::response_headers(), false)])
                .await
            {
                return;
            }
            let message = grpc_message(&vec![b'm'; size]);
            while s.send(&[Frame::data(id, message.clone(), false)]).await
                && s.pump_for(every).await
            {}
            return;
        }
        Behaviour::TrickleMessage { every, chunk } => {
            let mut prefix = BytesMut::new();
            prefix.put_u8(0);
            prefix.put_u32(1 << 20);
            let start = [
                Frame::headers(id, hpack::response_headers(), false),
                Frame::data(id, prefix.freeze(), false),
            ];
            if !s.send(&start).await {
                return;
            }
            let bytes = Bytes::from(vec![b't'; chunk]);
            while s.send(&[Frame::data(id, bytes.clone(), false)]).await && s.pump_for(every).await
            {
            }
            return;
        }
        Behaviour::OversizeHeaders { value_len } => {
            let big = vec![b'b'; value_len];
            let block = hpack::block(&[
                (":status", b"200"),
                ("content-type", b"application/grpc"),
                ("x-big", &big),
            ]);
            let mut frames = Frame::header_frames(id, block, false);
            frames.push(Frame::data(id, grpc_message(b""), false));
            frames.push(Frame::headers(id, hpack::trailers("0"), true));
            if !s.send(&frames).await {
                return;
            }
        }
        Behaviour::GoawayBelowFirstStream { .. }
        | Behaviour::MaxConcurrentOne { .. }
        | Behaviour::Faulty(_)
        | Behaviour::ServeOk
        | Behaviour::Silent
        | Behaviour::Http11 => {}
    }
    s.serve_rest().await;
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

    #[test]
    fn hpack_integers_follow_rfc_7541_examples() {
        // C.1.1: 10 with a 5-bit prefix; C.1.2: 1337 with a 5-bit prefix; C.1.3: 42 at an octet boundary.
        let mut b = BytesMut::new();
        hpack::integer(&mut b, 0, 5, 10);
        assert_eq!(&b[..], &[0x0a]);
        let mut b = BytesMut::new();
        hpack::integer(&mut b, 0, 5, 1337);
        assert_eq!(&b[..], &[0x1f, 0x9a, 0x0a]);
        let mut b = BytesMut::new();
        hpack::integer(&mut b, 0, 8, 42);
        assert_eq!(&b[..], &[0x2a]);
        // A 7-bit string length of exactly 127 needs the continuation byte.
        let mut b = BytesMut::new();
        hpack::integer(&mut b, 0, 7, 127);
        assert_eq!(&b[..], &[0x7f, 0x00]);
    }

    #[test]
    fn hpack_blocks_use_the_static_status_and_plain_literals() {
        let block = hpack::block(&[(":status", b"200"), ("a", b"bc")]);
        assert_eq!(&block[..], &[0x88, 0x00, 1, b'a', 2, b'b', b'c']);
    }

    #[test]
    fn a_long_header_block_is_split_into_continuations() {
        let block = Bytes::from(vec![0u8; MAX_FRAME_SIZE * 2 + 1]);
        let frames = Frame::header_frames(3, block, true);
        let shape: Vec<(u8, u8, usize)> = frames
            .iter()
            .map(|f| (f.kind, f.flags, f.payload.len()))
            .collect();
        assert_eq!(
            shape,
            vec![
                (kind::HEADERS, FLAG_END_STREAM, MAX_FRAME_SIZE),
                (kind::CONTINUATION, 0, MAX_FRAME_SIZE),
                (kind::CONTINUATION, FLAG_END_HEADERS, 1),
            ]
        );
        assert_eq!(
            Frame::header_frames(1, Bytes::from_static(b"x"), false)[0].flags,
            FLAG_END_HEADERS
        );
    }

    #[tokio::test]
    async fn serve_ok_answers_every_stream_in_a_form_h2_decodes() {
        let raw = RawServer::start(vec![], Behaviour::ServeOk).await.unwrap();
        let mut send = test_h2::connect(raw.addr).await;
        for _ in 0..2 {
            let answer = test_h2::call(&mut send, "/any/Path", &[], &[b"hi"])
                .await
                .unwrap();
            assert_eq!(
                answer.headers.get("content-type").unwrap(),
                "application/grpc"
            );
            assert_eq!(answer.messages, vec![Bytes::new()]);
            assert_eq!(answer.status(), Some("0"));
            assert!(!answer.trailers_only);
        }
        assert_eq!(raw.headers_received(), vec![(1, 1), (1, 3)]);
        assert_eq!(raw.sent(kind::HEADERS), 4);
    }

    #[tokio::test]
    async fn oversize_headers_under_the_peer_limit_decode() {
        // h2's client accepts 16 MiB header lists by default: 40 KiB of value crosses CONTINUATION frames.
        let raw = RawServer::start(
            vec![Behaviour::OversizeHeaders {
                value_len: 40 << 10,
            }],
            Behaviour::ServeOk,
        )
        .await
        .unwrap();
        let mut send = test_h2::connect(raw.addr).await;
        let answer = test_h2::call(&mut send, "/any/Path", &[], &[b""])
            .await
            .unwrap();
        assert_eq!(answer.headers.get("x-big").unwrap().len(), 40 << 10);
        assert_eq!(answer.status(), Some("0"));
        assert_eq!(raw.sent(kind::CONTINUATION), 2);
    }

    #[tokio::test]
    async fn a_ping_flood_is_acknowledged_ping_by_ping_before_the_answer() {
        let raw = RawServer::start(
            vec![Behaviour::PingFlood { pings: 1000 }],
            Behaviour::ServeOk,
        )
        .await
        .unwrap();
        let mut send = test_h2::connect(raw.addr).await;
        let answer = test_h2::call(&mut send, "/any/Path", &[], &[b""])
            .await
            .unwrap();
        assert_eq!(answer.status(), Some("0"));
        for _ in 0..200 {
            if raw.received_of(kind::PING, FLAG_ACK).len() >= 1000 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(raw.received_of(kind::PING, FLAG_ACK).len(), 1000);
        assert_eq!(
            raw.sent(kind::PING),
            1000 + 1,
            "the flood and the ACK of connect()'s PING"
        );
    }

    #[tokio::test]
    async fn http11_answers_the_preface_with_a_400() {
        let raw = RawServer::start(vec![], Behaviour::Http11).await.unwrap();
        let mut tcp = TcpStream::connect(raw.addr).await.unwrap();
        tcp.write_all(PREFACE).await.unwrap();
        let mut answer = Vec::new();
        tcp.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, HTTP11_BAD_REQUEST);
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
