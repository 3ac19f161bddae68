//! The HTTP CONNECT handshake (gRFC A1, RFC 9110 §9.3.6) on a connection to a proxy: the request
//! (`CONNECT host:port HTTP/1.1` with `Host`, `User-Agent` and, when the proxy URI has credentials,
//! `Proxy-Authorization`), then the proxy's answer, read up to its blank line and at most [`MAX_ANSWER`]
//! bytes (interim 1xx answers before it are skipped, RFC 9110 §15.2). A 2xx status makes the connection
//! the tunnel; bytes after the answer's header belong to it and
//! are read first ([`Tunnel`]). Everything else is UNAVAILABLE naming the proxy and what it said: a refusal
//! (with the realm of a 407's `Proxy-Authenticate`), a malformed or oversize answer, or the proxy closing
//! the connection before answering. The caller bounds the whole handshake with the connect deadline.
//!
//! [`parse_answer`] is the sans-IO part, tested directly; [`tunnel`] does the I/O.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use super::Proxy;
use crate::wire::status::{Code, Status};

/// The largest answer header accepted from a proxy.
pub(crate) const MAX_ANSWER: usize = 8 << 10;

/// The most header fields an answer may have: as many as fit in [`MAX_ANSWER`] (`a:` and a line end
/// each), so that the byte bound is the only one.
const MAX_FIELDS: usize = MAX_ANSWER / 4;

/// The header fields parsed without a heap allocation: a usual answer (a status line and a few fields)
/// needs no more. An answer with more gets slots for the lines it has, once its header is complete.
const INLINE_FIELDS: usize = 16;

/// What a complete answer header said.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Answer {
    pub(crate) code: u16,
    pub(crate) reason: String,
    /// The realm of a `Proxy-Authenticate` challenge, if the answer had one.
    pub(crate) realm: Option<String>,
    /// The header's length: what follows belongs to the tunnel.
    pub(crate) header_len: usize,
}

#[cfg(test)]
thread_local! {
    /// Header slots `parse_answer` took from the heap on this thread (a test's allocation count).
    static HEAP_SLOTS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Parses the answer in `buf`: `Ok(None)` until its header is complete.
///
/// Called after every read, so the partial case costs no allocation: the fields go to a small array on
/// the stack, and only an answer with more fields than that is parsed again with slots for each of its
/// lines (at most [`MAX_FIELDS`]).
pub(crate) fn parse_answer(buf: &[u8]) -> Result<Option<Answer>, String> {
    let mut inline = [httparse::EMPTY_HEADER; INLINE_FIELDS];
    match parse_with(buf, &mut inline) {
        Err(httparse::Error::TooManyHeaders) => {}
        other => return other.map_err(|e| e.to_string()),
    }
    // More fields than the array holds: wait for the blank line that ends the header, then parse it once.
    if !buf.windows(2).any(|w| w == b"\n\n") && !buf.windows(3).any(|w| w == b"\n\r\n") {
        return Ok(None);
    }
    // Each field takes a line: the lines bound the slots needed.
    let lines = buf.iter().filter(|&&b| b == b'\n').count();
    let slots = lines.min(MAX_FIELDS);
    #[cfg(test)]
    HEAP_SLOTS.with(|n| n.set(n.get() + slots));
    let mut fields = vec![httparse::EMPTY_HEADER; slots];
    parse_with(buf, &mut fields).map_err(|e| e.to_string())
}

fn parse_with<'b>(
    buf: &'b [u8],
    fields: &mut [httparse::Header<'b>],
) -> Result<Option<Answer>, httparse::Error> {
    let mut response = httparse::Response::new(fields);
    // RFC 9112 §5.2: a user agent replaces an obsolete line folding with spaces rather than refusing it.
    let mut config = httparse::ParserConfig::default();
    config.allow_obsolete_multiline_headers_in_responses(true);
    match config.parse_response(&mut response, buf)? {
        httparse::Status::Partial => Ok(None),
        httparse::Status::Complete(header_len) => {
            let code = response.code.unwrap_or(0);
            let reason = response.reason.unwrap_or("").to_owned();
            let realm = response
                .headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case("proxy-authenticate"))
                .find_map(|h| realm_of(h.value));
            Ok(Some(Answer {
                code,
                reason,
                realm,
                header_len,
            }))
        }
    }
}

/// The `realm` parameter of a challenge (`Basic realm="corp"`).
fn realm_of(value: &[u8]) -> Option<String> {
    let value = String::from_utf8_lossy(value);
    let lower = value.to_ascii_lowercase();
    let start = lower.find("realm=")? + "realm=".len();
    let rest = &value[start..];
    let realm = match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next().unwrap_or(""),
        None => rest.split([',', ' ']).next().unwrap_or(""),
    };
    Some(realm.chars().take(128).collect())
}

/// The request, as bytes.
pub(crate) fn request(proxy: &Proxy, target: &str, user_agent: &str) -> Vec<u8> {
    let mut request =
        format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nUser-Agent: {user_agent}\r\n");
    if let Some(authorization) = proxy.authorization() {
        request.push_str("Proxy-Authorization: ");
        request.push_str(authorization);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    request.into_bytes()
}

fn unavailable(proxy: &Proxy, what: impl std::fmt::Display) -> Status {
    Status::new(Code::Unavailable, format!("proxy {proxy}: {what}"))
}

/// Asks `proxy`, over `io` (a connection to it), for a tunnel to `target` (`host:port`); returns the
/// tunnel.
pub(crate) async fn tunnel<T>(
    mut io: T,
    proxy: &Proxy,
    target: &str,
    user_agent: &str,
) -> Result<Tunnel<T>, Status>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    io.write_all(&request(proxy, target, user_agent))
        .await
        .map_err(|e| unavailable(proxy, format_args!("sending CONNECT {target}: {e}")))?;
    let mut buf = BytesMut::with_capacity(1024);
    // The bytes of interim answers already skipped.
    let mut skipped = 0;
    loop {
        if let Some(answer) = parse_answer(&buf).map_err(|e| {
            unavailable(
                proxy,
                format_args!("a malformed answer to CONNECT {target}: {e}"),
            )
        })? {
            // RFC 9110 §15.2: interim (1xx) answers come before the final one; skip them. They count
            // against the bound with the final answer. 101 (Switching Protocols) is final: CONNECT asked
            // for no upgrade, so it is a refusal like any other.
            if (100..200).contains(&answer.code) && answer.code != 101 {
                skipped += answer.header_len;
                buf.advance(answer.header_len);
                continue;
            }
            if !(200..300).contains(&answer.code) {
                let realm = answer
                    .realm
                    .map(|r| format!(" (Proxy-Authenticate realm {r:?})"))
                    .unwrap_or_default();
                return Err(unavailable(
                    proxy,
                    format_args!(
                        "refused CONNECT {target}: {} {}{realm}",
                        answer.code,
                        answer.reason.chars().take(128).collect::<String>()
                    ),
                ));
            }
            buf.advance(answer.header_len);
            return Ok(Tunnel {
                early: buf.freeze(),
                io,
            });
        }
        if skipped + buf.len() >= MAX_ANSWER {
            return Err(unavailable(
                proxy,
                format_args!("its answer to CONNECT {target} has a header over {MAX_ANSWER} bytes"),
            ));
        }
        // Read no further than the bound.
        let room = MAX_ANSWER - skipped - buf.len();
        let mut chunk = [0u8; 1024];
        let n = io.read(&mut chunk[..room.min(1024)]).await.map_err(|e| {
            unavailable(
                proxy,
                format_args!("reading its answer to CONNECT {target}: {e}"),
            )
        })?;
        if n == 0 {
            return Err(unavailable(
                proxy,
                format_args!("closed the connection before answering CONNECT {target}"),
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A connection through a proxy: the bytes that came with the proxy's answer, then the connection.
#[derive(Debug)]
pub(crate) struct Tunnel<T> {
    early: Bytes,
    io: T,
}

impl<T: AsyncRead + Unpin> AsyncRead for Tunnel<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.early.is_empty() {
            let n = self.early.len().min(buf.remaining());
            let early = self.early.split_to(n);
            buf.put_slice(&early);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tunnel<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxy(uri: &str) -> Proxy {
        Proxy::parse(uri, "test").expect("a proxy")
    }

    #[test]
    fn the_request_names_the_target_and_carries_credentials() {
        let with = String::from_utf8(request(
            &proxy("http://al%40ce:s%3Acret@proxy:3128"),
            "api.example.com:443",
            "grpc-rust/1",
        ))
        .expect("ascii");
        assert_eq!(
            with,
            "CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\n\
             User-Agent: grpc-rust/1\r\nProxy-Authorization: Basic YWxAY2U6czpjcmV0\r\n\r\n"
        );
        let without =
            String::from_utf8(request(&proxy("proxy:3128"), "[::1]:5", "ua")).expect("ascii");
        assert!(!without.contains("Proxy-Authorization"));
        assert!(without.starts_with("CONNECT [::1]:5 HTTP/1.1\r\nHost: [::1]:5\r\n"));
    }

    #[test]
    fn answers_parse_incrementally_and_keep_what_follows() {
        let answer = b"HTTP/1.1 200 Connection established\r\nProxy-Agent: x\r\n\r\nPRI * HTTP/2.0";
        for cut in 0..answer.len() - 14 {
            assert_eq!(parse_answer(&answer[..cut]), Ok(None), "{cut} bytes");
        }
        let parsed = parse_answer(answer).expect("valid").expect("complete");
        assert_eq!(parsed.code, 200);
        assert_eq!(&answer[parsed.header_len..], b"PRI * HTTP/2.0");
    }

    #[test]
    fn a_407_names_its_realm() {
        let answer = b"HTTP/1.1 407 Proxy Authentication Required\r\n\
            Proxy-Authenticate: Basic realm=\"corp proxy\", charset=\"UTF-8\"\r\nContent-Length: 5\r\n\r\nnope!";
        let parsed = parse_answer(answer).expect("valid").expect("complete");
        assert_eq!(parsed.code, 407);
        assert_eq!(parsed.realm.as_deref(), Some("corp proxy"));
        assert_eq!(realm_of(b"Basic realm=plain").as_deref(), Some("plain"));
        assert_eq!(realm_of(b"Negotiate"), None);
    }

    #[test]
    fn only_a_complete_answer_with_many_fields_takes_slots_from_the_heap() {
        let slots = || HEAP_SLOTS.with(|n| n.get());
        // A usual answer, read a byte at a time: every parse on the stack.
        let usual = b"HTTP/1.1 200 Connection established\r\nProxy-Agent: x\r\nVia: 1.1 p\r\n\r\n";
        for cut in 0..=usual.len() {
            let _ = parse_answer(&usual[..cut]);
        }
        assert_eq!(slots(), 0);
        // 100 fields, read a byte at a time: one parse with slots for its lines, when it is complete.
        let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..100 {
            many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        for cut in 0..many.len() {
            assert_eq!(parse_answer(&many[..cut]), Ok(None), "{cut} bytes");
        }
        assert_eq!(slots(), 0, "no heap slots before the header is complete");
        let parsed = parse_answer(&many).expect("valid").expect("complete");
        assert_eq!((parsed.code, parsed.header_len), (200, many.len()));
        assert_eq!(slots(), 102, "one slot per line, once");
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(parse_answer(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(parse_answer(b"HTTP/1.1 2x0 OK\r\n\r\n").is_err());
        assert!(parse_answer(b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n").is_err());
    }
}
