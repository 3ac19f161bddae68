//! Client keepalive (gRFC A8, `doc/keepalive.md`): a PING after `keepalive_time` without any frame from the
//! server; no answer within `keepalive_timeout` closes the connection, so a peer that stopped answering with
//! its socket open is found out (its calls fail UNAVAILABLE, calls that never left are retried
//! transparently, and the subchannel reconnects with backoff). Off by default, as in every gRPC
//! implementation; `keepalive_time` is raised to the 10 s minimum. Without `keepalive_permit_without_calls`
//! no PING goes out while no stream is open: while the channel has no call in flight and the connection
//! carries no other stream of the channel's own ([`OpenStreams`]: the health Watch of gRFC A17). A8's
//! "without calls" means without streams, and C-core pings whenever any stream is open, the Watch
//! included: a backend that goes silent is found out even when only its Watch is open, instead of keeping
//! its last SERVING answer until calls time out there. A GOAWAY(ENHANCE_YOUR_CALM, "too_many_pings")
//! doubles the channel's `keepalive_time` for its later connections. TCP keepalive is set on every TCP
//! socket (the kernel's probes find a dead peer even when nothing is sent).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use grpc_lb::Address;
use h2::{Ping, PingPong};
use tokio::time::Instant;

use crate::conn::sniff::{GoAway, Seen};
use crate::wire::status::{Code, Status};

/// The least `keepalive_time` a client may use (A8).
pub const MIN_KEEPALIVE_TIME: Duration = Duration::from_secs(10);
/// The default `keepalive_timeout` (A8).
pub const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// The interval of the kernel's TCP keepalive probes on every socket.
pub(crate) const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

/// ENHANCE_YOUR_CALM.
const ENHANCE_YOUR_CALM: u32 = 0xb;

/// A channel's keepalive settings and the time in force (doubled on each "too_many_pings").
#[derive(Debug)]
pub(crate) struct Keepalive {
    /// Milliseconds; 0 when keepalive is off.
    time_ms: AtomicU64,
    pub(crate) timeout: Duration,
    pub(crate) permit_without_calls: bool,
}

impl Keepalive {
    pub(crate) fn new(
        time: Option<Duration>,
        timeout: Duration,
        permit_without_calls: bool,
    ) -> Arc<Keepalive> {
        let time_ms = time.map_or(0, |t| {
            u64::try_from(t.max(MIN_KEEPALIVE_TIME).as_millis()).unwrap_or(u64::MAX)
        });
        Arc::new(Keepalive {
            time_ms: AtomicU64::new(time_ms),
            timeout,
            permit_without_calls,
        })
    }

    /// The time without a frame from the server after which a PING goes out; `None` when off.
    pub(crate) fn time(&self) -> Option<Duration> {
        match self.time_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    /// The server at `addr` said "too many pings": ping half as often from now on.
    pub(crate) fn on_goaway(&self, addr: &Address, goaway: &GoAway) {
        if goaway.error_code == ENHANCE_YOUR_CALM && goaway.debug_data == b"too_many_pings" {
            let doubled = self
                .time_ms
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |ms| {
                    (ms != 0).then(|| ms.saturating_mul(2))
                });
            if let Ok(previous) = doubled {
                tracing::warn!(
                    %addr,
                    previous_ms = previous,
                    "the server sent GOAWAY too_many_pings: keepalive time doubled"
                );
            }
        }
    }
}

/// The streams open on one connection that are not calls (the health Watch): the connection is in use,
/// for keepalive, while any is. Cheap to clone; each clone counts on the same connection.
#[derive(Clone, Debug, Default)]
pub(crate) struct OpenStreams(Arc<AtomicUsize>);

impl OpenStreams {
    /// A stream opens; it counts until the guard drops.
    pub(crate) fn open(&self) -> OpenStream {
        self.0.fetch_add(1, Ordering::AcqRel);
        OpenStream(self.0.clone())
    }

    /// Whether any such stream is open.
    pub(crate) fn any(&self) -> bool {
        self.0.load(Ordering::Acquire) > 0
    }
}

/// One open stream of [`OpenStreams`], counted until dropped.
#[derive(Debug)]
pub(crate) struct OpenStream(Arc<AtomicUsize>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Pings the connection as `keepalive` says while `in_use()` (or always, with
/// `keepalive_permit_without_calls`); returns the status to close the connection with when a PING goes
/// unanswered (or the connection is gone). Never returns when keepalive is off.
pub(crate) async fn run(
    keepalive: Arc<Keepalive>,
    ping_pong: Option<PingPong>,
    seen: Arc<Seen>,
    in_use: impl Fn() -> bool,
) -> Status {
    let (Some(mut ping_pong), Some(_)) = (ping_pong, keepalive.time()) else {
        return std::future::pending().await;
    };
    loop {
        let Some(time) = keepalive.time() else {
            return std::future::pending().await;
        };
        // Any frame from the server proves it alive: wait `time` past the last one.
        let due = seen.last_frame_at().unwrap_or_else(Instant::now);
        let at = saturating_deadline_from(due, time);
        if at > Instant::now() {
            tokio::time::sleep_until(at).await;
            continue;
        }
        if !keepalive.permit_without_calls && !in_use() {
            tokio::time::sleep(time).await;
            continue;
        }
        match tokio::time::timeout(keepalive.timeout, ping_pong.ping(Ping::opaque())).await {
            // Answered: the ACK is a frame, so the next PING is due `time` after it.
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Status::from_h2(e),
            Err(_) => {
                return Status::new(
                    Code::Unavailable,
                    format!(
                        "keepalive: the server did not answer a PING within {:?}",
                        keepalive.timeout
                    ),
                )
            }
        }
    }
}

/// `from + timeout`, or a deadline a century away when the sum does not fit: a huge timeout means never.
fn saturating_deadline_from(
    from: tokio::time::Instant,
    timeout: std::time::Duration,
) -> tokio::time::Instant {
    const CENTURY: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 24 * 3600);
    from.checked_add(timeout.min(CENTURY))
        .unwrap_or(from + std::time::Duration::from_secs(3600))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn goaway(code: u32, debug: &[u8]) -> GoAway {
        GoAway {
            last_stream_id: 1,
            error_code: code,
            debug_data: debug.to_vec(),
        }
    }

    #[test]
    fn open_streams_count_until_their_guards_drop() {
        let streams = OpenStreams::default();
        assert!(!streams.any());
        let first = streams.open();
        let second = streams.clone().open();
        assert!(streams.any());
        drop(first);
        assert!(streams.any(), "one is still open");
        drop(second);
        assert!(!streams.any());
    }

    #[test]
    fn off_by_default_raised_to_the_minimum_and_doubled_on_too_many_pings() {
        let addr = Address::Tcp(([127, 0, 0, 1], 50051).into());
        assert_eq!(
            Keepalive::new(None, DEFAULT_KEEPALIVE_TIMEOUT, false).time(),
            None
        );
        let k = Keepalive::new(
            Some(Duration::from_secs(1)),
            DEFAULT_KEEPALIVE_TIMEOUT,
            false,
        );
        assert_eq!(k.time(), Some(MIN_KEEPALIVE_TIME));
        k.on_goaway(&addr, &goaway(ENHANCE_YOUR_CALM, b"too_many_pings"));
        assert_eq!(k.time(), Some(Duration::from_secs(20)));
        // Other GOAWAYs change nothing.
        k.on_goaway(&addr, &goaway(0, b"too_many_pings"));
        k.on_goaway(
            &addr,
            &goaway(ENHANCE_YOUR_CALM, b"header_list_way_too_large"),
        );
        assert_eq!(k.time(), Some(Duration::from_secs(20)));
        // Off stays off; huge values saturate.
        let off = Keepalive::new(None, DEFAULT_KEEPALIVE_TIMEOUT, false);
        off.on_goaway(&addr, &goaway(ENHANCE_YOUR_CALM, b"too_many_pings"));
        assert_eq!(off.time(), None);
        let huge = Keepalive::new(Some(Duration::MAX), DEFAULT_KEEPALIVE_TIMEOUT, false);
        huge.on_goaway(&addr, &goaway(ENHANCE_YOUR_CALM, b"too_many_pings"));
        assert!(huge.time().is_some());
    }
}
