//! Watches the frames a server sends for what h2's client API does not report: a GOAWAY (RFC 9113 §6.8),
//! so that the channel can stop giving the connection new calls at once while its streams finish (h2 only
//! fails new requests on it), and a server that answers in HTTP/1, or in TLS, instead of HTTP/2.
//!
//! [`Sniffer`] wraps the connection's byte stream and reads only the 9-byte frame headers of what passes
//! (and a GOAWAY's payload, up to [`DEBUG_DATA_LIMIT`] bytes of debug data); it changes nothing and buffers
//! nothing else.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

/// How much of a GOAWAY's debug data is kept.
pub(crate) const DEBUG_DATA_LIMIT: usize = 64;

const GOAWAY: u8 = 7;
const HEADER_LEN: usize = 9;

/// A GOAWAY the server sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GoAway {
    pub(crate) last_stream_id: u32,
    pub(crate) error_code: u32,
    /// The start of the debug data.
    pub(crate) debug_data: Vec<u8>,
}

/// What the sniffer saw, shared with the connection's owner.
#[derive(Debug)]
pub(crate) struct Seen {
    goaway: Mutex<Option<GoAway>>,
    first_bytes: Mutex<Vec<u8>>,
    notify: Notify,
    /// When bytes last arrived: nanoseconds after `base`, plus one (0: never).
    last_read: AtomicU64,
    base: Instant,
}

impl Default for Seen {
    fn default() -> Self {
        Seen {
            goaway: Mutex::new(None),
            first_bytes: Mutex::new(Vec::new()),
            notify: Notify::new(),
            last_read: AtomicU64::new(0),
            base: Instant::now(),
        }
    }
}

impl Seen {
    /// When the server last sent anything.
    pub(crate) fn last_frame_at(&self) -> Option<Instant> {
        match self.last_read.load(Ordering::Relaxed) {
            0 => None,
            n => Some(self.base + Duration::from_nanos(n - 1)),
        }
    }

    /// The last GOAWAY received, if any.
    pub(crate) fn goaway(&self) -> Option<GoAway> {
        self.goaway.lock().clone()
    }

    /// Waits for the first GOAWAY.
    pub(crate) async fn goaway_received(&self) -> GoAway {
        loop {
            let notified = self.notify.notified();
            if let Some(g) = self.goaway() {
                return g;
            }
            notified.await;
        }
    }

    /// Whether the server's first bytes were an HTTP/1 status line (`HTTP/1.1 400 Bad Request`...): it does
    /// not speak HTTP/2 with prior knowledge.
    pub(crate) fn answered_http1(&self) -> bool {
        self.first_bytes.lock().starts_with(b"HTTP/")
    }

    /// Whether the server's first bytes were a TLS record (a handshake or an alert, version 3.x): it
    /// expects TLS, and this connection is plaintext.
    pub(crate) fn answered_tls(&self) -> bool {
        matches!(self.first_bytes.lock().as_slice(), [0x15 | 0x16, 0x03, ..])
    }

    /// UNAVAILABLE naming the protocol the server answered in, when it was not HTTP/2: HTTP/1, or TLS to a
    /// plaintext connection (`tls`: this connection is TLS, and the sniffer sees what is inside it).
    pub(crate) fn wrong_protocol(&self, tls: bool) -> Option<crate::wire::status::Status> {
        use crate::wire::status::{Code, Status};
        if self.answered_http1() {
            return Some(Status::new(
                Code::Unavailable,
                "the server does not speak HTTP/2: it answered in HTTP/1",
            ));
        }
        if !tls && self.answered_tls() {
            return Some(Status::new(
                Code::Unavailable,
                "the server expects TLS and this channel is plaintext: use an https:// target or \
                 ChannelBuilder::tls",
            ));
        }
        None
    }
}

/// How long a failed write waits for the server's answer before it is reported (see
/// `Sniffer::hold_failed_write`).
const ANSWER_WAIT: Duration = Duration::from_millis(100);

/// The frame-header parser's state.
#[derive(Default)]
struct Parser {
    header: [u8; HEADER_LEN],
    have: usize,
    /// Payload bytes of the current frame still to pass.
    remaining: usize,
    /// The payload of a GOAWAY being read (up to 8 + DEBUG_DATA_LIMIT bytes).
    goaway: Option<Vec<u8>>,
}

/// A byte stream whose incoming HTTP/2 frames are watched.
pub(crate) struct Sniffer<T> {
    io: T,
    parser: Parser,
    seen: Arc<Seen>,
    /// How many of the first 5 bytes are still to be kept.
    first_bytes_missing: usize,
    /// A write error held back until the server's answer is read, at most until its timer fires (see
    /// `hold_failed_write`).
    held_write_error: Option<(io::Error, Pin<Box<tokio::time::Sleep>>)>,
}

impl<T> Sniffer<T> {
    pub(crate) fn new(io: T) -> (Sniffer<T>, Arc<Seen>) {
        let seen = Arc::new(Seen::default());
        (
            Sniffer {
                io,
                parser: Parser::default(),
                seen: seen.clone(),
                first_bytes_missing: 5,
                held_write_error: None,
            },
            seen,
        )
    }

    fn observe(&mut self, mut bytes: &[u8]) {
        self.observe_first(bytes);
        let p = &mut self.parser;
        while !bytes.is_empty() {
            if p.remaining > 0 {
                let n = p.remaining.min(bytes.len());
                if let Some(payload) = &mut p.goaway {
                    let room = (8 + DEBUG_DATA_LIMIT).saturating_sub(payload.len());
                    payload.extend_from_slice(&bytes[..n.min(room)]);
                }
                p.remaining -= n;
                bytes = &bytes[n..];
                if p.remaining == 0 {
                    if let Some(payload) = p.goaway.take() {
                        record_goaway(&self.seen, &payload);
                    }
                }
                continue;
            }
            let n = (HEADER_LEN - p.have).min(bytes.len());
            p.header[p.have..p.have + n].copy_from_slice(&bytes[..n]);
            p.have += n;
            bytes = &bytes[n..];
            if p.have == HEADER_LEN {
                p.have = 0;
                let h = p.header;
                p.remaining = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
                p.goaway = (h[3] == GOAWAY).then(Vec::new);
                if p.remaining == 0 {
                    if let Some(payload) = p.goaway.take() {
                        record_goaway(&self.seen, &payload);
                    }
                }
            }
        }
    }
}

fn record_goaway(seen: &Seen, payload: &[u8]) {
    // A GOAWAY shorter than its 8 fixed bytes is a protocol error h2 reports itself.
    if payload.len() < 8 {
        return;
    }
    let goaway = GoAway {
        last_stream_id: u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
            & 0x7fff_ffff,
        error_code: u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]),
        debug_data: payload[8..].to_vec(),
    };
    *seen.goaway.lock() = Some(goaway);
    seen.notify.notify_waiters();
}

impl<T: AsyncRead + Unpin> AsyncRead for Sniffer<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = result {
            let this = &mut *self;
            let new = &buf.filled()[before..];
            if !new.is_empty() {
                let since = Instant::now().saturating_duration_since(this.seen.base);
                let nanos = u64::try_from(since.as_nanos()).unwrap_or(u64::MAX - 1);
                this.seen.last_read.store(nanos + 1, Ordering::Relaxed);
            }
            this.observe(new);
        }
        result
    }
}

impl<T: AsyncRead + Unpin> Sniffer<T> {
    /// A write that fails before the server sent anything (a server that answered in another protocol and
    /// closed at once: on a Unix socket the client's next write fails with EPIPE before h2 reads the
    /// answer) is held back until the read side has something to say: the server's first bytes (so the
    /// failure can name the protocol) or its end, which come at once from a peer that closed; a peer that
    /// only stopped reading and stays silent gets the error after [`ANSWER_WAIT`].
    fn hold_failed_write<R>(
        &mut self,
        cx: &mut Context<'_>,
        result: Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        let (error, mut timer) = match (self.held_write_error.take(), result) {
            (Some(held), _) => held,
            (None, Poll::Ready(Err(e)))
                if self.first_bytes_missing == 5
                    && matches!(
                        e.kind(),
                        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                    ) =>
            {
                (e, Box::pin(tokio::time::sleep(ANSWER_WAIT)))
            }
            (None, result) => return result,
        };
        let mut storage = [0u8; 8];
        let mut buf = ReadBuf::new(&mut storage);
        match Pin::new(&mut self.io).poll_read(cx, &mut buf) {
            Poll::Pending if timer.as_mut().poll(cx).is_pending() => {
                self.held_write_error = Some((error, timer));
                Poll::Pending
            }
            Poll::Pending => Poll::Ready(Err(error)),
            Poll::Ready(read) => {
                if read.is_ok() {
                    let n = buf.filled().len();
                    let answer = storage;
                    self.observe_first(&answer[..n]);
                }
                Poll::Ready(Err(error))
            }
        }
    }
}

impl<T> Sniffer<T> {
    /// Keeps the first bytes the server sent (to tell HTTP/1 and TLS answers apart).
    fn observe_first(&mut self, bytes: &[u8]) {
        if self.first_bytes_missing > 0 && !bytes.is_empty() {
            let n = self.first_bytes_missing.min(bytes.len());
            self.seen.first_bytes.lock().extend_from_slice(&bytes[..n]);
            self.first_bytes_missing -= n;
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Sniffer<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.held_write_error.is_some() {
            return self.hold_failed_write(cx, Poll::Pending);
        }
        let result = Pin::new(&mut self.io).poll_write(cx, buf);
        self.hold_failed_write(cx, result)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.held_write_error.is_some() {
            return self.hold_failed_write(cx, Poll::Pending);
        }
        let result = Pin::new(&mut self.io).poll_flush(cx);
        self.hold_failed_write(cx, result)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.held_write_error.is_some() {
            return self.hold_failed_write(cx, Poll::Pending);
        }
        let result = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.hold_failed_write(cx, result)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, 0];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn goaway(last: u32, code: u32, debug: &[u8]) -> Vec<u8> {
        let mut p = last.to_be_bytes().to_vec();
        p.extend_from_slice(&code.to_be_bytes());
        p.extend_from_slice(debug);
        frame(GOAWAY, 0, &p)
    }

    #[test]
    fn finds_a_goaway_among_frames_whatever_the_read_boundaries() {
        let mut bytes = frame(4, 0, &[0; 6]);
        bytes.extend(frame(0, 1, &[7; 100]));
        bytes.extend(goaway(5, 11, b"too_many_pings"));
        bytes.extend(frame(6, 0, &[1; 8]));
        for chunk in [1, 2, 7, 9, 10, 64, bytes.len()] {
            let (mut s, seen) = Sniffer::new(());
            let _ = seen.last_frame_at();
            for piece in bytes.chunks(chunk) {
                s.observe(piece);
            }
            assert_eq!(
                seen.goaway(),
                Some(GoAway {
                    last_stream_id: 5,
                    error_code: 11,
                    debug_data: b"too_many_pings".to_vec()
                }),
                "chunks of {chunk}"
            );
            assert!(!seen.answered_http1());
        }
    }

    #[test]
    fn keeps_the_last_goaway_and_bounds_the_debug_data() {
        let (mut s, seen) = Sniffer::new(());
        s.observe(&goaway(0x7fff_ffff, 0, b""));
        assert_eq!(seen.goaway().map(|g| g.last_stream_id), Some(0x7fff_ffff));
        s.observe(&goaway(0x8000_0003, 0, &[b'x'; 1000]));
        let g = seen.goaway().expect("goaway");
        assert_eq!(g.last_stream_id, 3, "the reserved bit is ignored");
        assert_eq!(g.debug_data.len(), DEBUG_DATA_LIMIT);
        // Still in step with the frames after it.
        s.observe(&goaway(1, 2, b""));
        assert_eq!(seen.goaway().map(|g| g.error_code), Some(2));
    }

    #[test]
    fn an_http1_answer_is_recognised() {
        let (mut s, seen) = Sniffer::new(());
        s.observe(b"HT");
        s.observe(b"TP/1.1 400 Bad Request\r\n\r\n");
        assert!(seen.answered_http1());
        assert_eq!(seen.goaway(), None);
    }

    /// A peer that stopped reading (every write fails with EPIPE) but stays open and silent: the write
    /// error is held for the server's answer at most [`ANSWER_WAIT`], then reported.
    #[tokio::test(start_paused = true)]
    async fn a_write_to_a_silent_peer_that_stopped_reading_fails_after_the_answer_wait() {
        struct StoppedReading;
        impl AsyncRead for StoppedReading {
            fn poll_read(
                self: Pin<&mut Self>,
                _: &mut Context<'_>,
                _: &mut ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                Poll::Pending
            }
        }
        impl AsyncWrite for StoppedReading {
            fn poll_write(
                self: Pin<&mut Self>,
                _: &mut Context<'_>,
                _: &[u8],
            ) -> Poll<io::Result<usize>> {
                Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()))
            }
            fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }
            fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }
        }
        let (mut s, seen) = Sniffer::new(StoppedReading);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(Pin::new(&mut s)
            .poll_write(&mut cx, b"PRI * HTTP/2.0")
            .is_pending());
        tokio::time::advance(ANSWER_WAIT).await;
        match Pin::new(&mut s).poll_write(&mut cx, b"PRI * HTTP/2.0") {
            Poll::Ready(Err(e)) => assert_eq!(e.kind(), io::ErrorKind::BrokenPipe),
            other => panic!("the write error must come after the wait: {other:?}"),
        }
        assert!(!seen.answered_tls());
    }
}
