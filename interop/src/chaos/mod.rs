//! The chaos soak (issue "Reliability", item 8): `cargo xtask chaos [--quick]`.
//!
//! A chaos server process ([`server`], binary `chaos-server`) runs four backends on loopback ports that inject
//! faults at random, and a chaos client process ([`client`], binary `chaos-client`) drives hundreds of
//! thousands of calls of every shape through three channels (a retry policy with throttling, a hedging policy,
//! no policy) over `round_robin` across the four backends, then checks that the channel survived: every call
//! ended exactly once and on time, nothing panicked, memory stayed flat, and the fds and tasks of the channels
//! are gone once they are dropped.
//!
//! # The service
//!
//! A fictitious service `chaos.Chaos` with one method per call shape (see [`paths`]):
//!
//! | method | request | response |
//! |---|---|---|
//! | `Unary` | raw bytes | the same bytes |
//! | `ServerStream` | [`StreamRequest`] (`count`, `payload`) | `count` [`Item`]s: `index` 0, 1, ... and the payload |
//! | `ClientStream` | [`Number`]s (a value and padding) | one [`Sum`]: how many numbers, their (wrapping) sum and the padding bytes |
//! | `Bidi` | raw bytes, one message at a time | each message echoed as it arrives; OK at the half-close |
//!
//! # The faults (per server stream, that is per attempt, drawn from each backend's seeded RNG)
//!
//! | fault | share of attempts | what the backend does |
//! |---|---|---|
//! | refuse | 2 % | RST_STREAM(REFUSED_STREAM) at once |
//! | unavailable | 10 % | reads the first request message (or the half-close), then answers Trailers-Only `UNAVAILABLE` with `grpc-retry-pushback-ms`: 10 % of them `0`, 85 % 1–30 ms, 5 % negative ("do not retry") |
//! | graceful GOAWAY | 0.3 % | h2 `graceful_shutdown` of the connection (GOAWAY 2^31−1, then the real last id); this call is served normally |
//! | abrupt GOAWAY | 0.1 % | h2 `abrupt_shutdown(NO_ERROR)` (GOAWAY with the last processed id, then close) at a random point of the call |
//! | TCP reset | 0.1 % | the socket is closed with SO_LINGER 0 (an RST) at a random point of the call |
//! | slow | 20 % (independent of the above) | a random delay of up to 300 ms before the first response message |
//! | stall | 0.5 % (instead of slow) | a delay of 0.5–4 s before the first response message: past the deadline (1–3 s) about half the time, so deadlines, cancellation and the "late" check are exercised |
//!
//! "A random point": before reading anything, after the request (unary, client streaming), or after `k`
//! response messages (server streaming, bidi), so some of these land after the response headers, when the call
//! is committed and no policy may retry it. An abrupt GOAWAY or a reset kills every call on the connection, not
//! only the one that drew it. Besides, backend 4 is restarted every 2–5 s: it stops listening, drops all its
//! connections (a FIN, no GOAWAY), and listens again on the same port 100–500 ms later.
//!
//! # Success thresholds, derived from the fault rates
//!
//! Per attempt, the injected failure rate is about `f ≈ 0.10` (unavailable) `+ 0.02·0.02` (refused twice: the
//! first refusal is retried transparently, once per call) `+ k`, where `k` is the share of attempts killed with
//! their connection. With `L` attempts in flight per connection (the client keeps 96 calls in flight over
//! 3 channels × 4 backends, so `L ≈ 10`), the 0.2 % of attempts that kill their connection kill `≈ 2 %` of
//! attempts, and the restarts (≈ a quarter of the in-flight calls every 3.5 s; at the ~4,000 calls/s of
//! 2 cores that is `≈ 0.2 %`, at 700 calls/s on a loaded machine `≈ 1 %`) add a little; so `k ≈ 2–3 %` and
//! `f ≈ 12–13 %` (measured: the no-policy flavour fails 12.5–13.5 % of its calls).
//!
//! * **No policy**: a call fails when its one attempt does (transparent retries only cover refusals and streams
//!   a GOAWAY names as unprocessed), so about 13 % fail, 87 % succeed. The threshold is **80 %**, which
//!   leaves room for `k` to double when the machine is loaded (longer calls, larger `L`), and for the
//!   stalls (`≈ 0.25 %`).
//! * **Retry policy** (`maxAttempts` 4, UNAVAILABLE retryable) and **hedging policy** (`maxAttempts` 4, 20 ms,
//!   UNAVAILABLE non-fatal): a call fails when (a) an attempt gets a negative pushback: 5 % of 10 % = 0.5 % on
//!   the first attempt, plus `f · 0.5 %` on the later ones; (b) four attempts in a row fail: `f⁴ ≈ 0.03 %`;
//!   (c) a connection dies after the call committed (response headers received: server streaming and bidi
//!   once the first response message arrived), which no policy may retry: at most the kill share `k ≈ 3 %`
//!   times the share of a call's life spent committed, under a third for these two shapes and about zero for
//!   the others, so `≤ 0.5 %` overall; (d) the deadline (1–3 s) runs out: a stalled attempt outlives it
//!   about half the time, and a retry policy has no per-attempt timeout, so `≈ 0.25 %` for the retry flavour
//!   (hedging sends the next hedge after 20 ms and is not hurt); slow attempts, backoff and pushback add
//!   little. About 1.5 % in all: the threshold is **97 %**, twice that margin. The retry flavour's
//!   throttle (`maxTokens` 100, `tokenRatio` 0.5) earns 0.5 per success and loses 1 per failure: at `f ≈ 13 %`
//!   it gains `0.87·0.5 − 0.13 ≈ 0.3` per attempt and stays near full, so the throttle is exercised (bursts of
//!   failures when a backend restarts spend tokens) without switching retries off for long.
//!
//! # The other checks
//!
//! * **Lost** (must be 0): calls started minus calls ended once every call had its deadline (≤ 3 s) plus a
//!   10 s grace to end. A call that has not ended by then is reported as lost (and aborted), not waited on.
//! * **Late** (must be 0): a call that ended more than 100 ms (real time, `Instant`) after its deadline.
//! * **Panics** (must be 0): a panic hook counts every panic in the process (the channel's own tasks included),
//!   and each call's task is joined and checked with `JoinError::is_panic`.
//! * **Payloads**: an OK call whose response is wrong (echo mismatch, wrong item index or count, wrong sum) is
//!   counted as `OK_BAD_PAYLOAD`, a failure that fails the run.
//! * **Unexpected codes**: the server only ever ends attempts with OK, UNAVAILABLE, REFUSED_STREAM or a broken
//!   connection, and the client only adds DEADLINE_EXCEEDED; any other code is the channel's invention and
//!   fails the run.
//! * **Memory**: RSS (`/proc/self/statm` resident pages × page size) is sampled every second. START is the
//!   first sample once 20 % of the calls ended (allocator pools, h2 buffers and connection state have grown to
//!   their working size by then), END is sampled when the last call ended, before the channels are dropped.
//!   The rule is `END ≤ START + max(START / 2, 32 MiB)`: the working set does not depend on how many calls
//!   went before, so growth beyond the noise of glibc's arenas is a leak. The full run (1,000,000 calls)
//!   catches a leak of about 40 bytes per call or more (32 MiB over the 800,000 calls after the warm-up);
//!   the quick run (10,000) only catches gross leaks (~4 KiB per call).
//! * **fds and tasks**: `/proc/self/fd` entries and `num_alive_tasks()` are counted before the channels are
//!   created and after they are all dropped (waiting up to 5 s for them to wind down). AFTER must be at most
//!   BEFORE + 2 for fds and BEFORE + 2 for tasks: nothing of the channels may outlive them; the tolerance
//!   only covers what the process may open on its own in between (the runtime's blocking pool, a lazily
//!   opened `/proc` handle).

use bytes::Bytes;

pub mod client;
pub mod server;
pub mod sick;
mod stalls;

/// The methods of `chaos.Chaos`.
pub mod paths {
    /// Unary echo.
    pub const UNARY: &str = "/chaos.Chaos/Unary";
    /// Server streaming: `count` items.
    pub const SERVER_STREAM: &str = "/chaos.Chaos/ServerStream";
    /// Client streaming: the sum of the numbers.
    pub const CLIENT_STREAM: &str = "/chaos.Chaos/ClientStream";
    /// Bidi echo.
    pub const BIDI: &str = "/chaos.Chaos/Bidi";
}

/// The request of `ServerStream`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct StreamRequest {
    /// How many items to send.
    #[prost(uint32, tag = "1")]
    pub count: u32,
    /// What each item carries.
    #[prost(bytes = "bytes", tag = "2")]
    pub payload: Bytes,
}

/// One response of `ServerStream`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Item {
    /// 0, 1, ...
    #[prost(uint32, tag = "1")]
    pub index: u32,
    /// The request's payload.
    #[prost(bytes = "bytes", tag = "2")]
    pub payload: Bytes,
}

/// One request message of `ClientStream`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Number {
    /// The number.
    #[prost(uint64, tag = "1")]
    pub value: u64,
    /// Bytes to make the message larger (counted, not summed).
    #[prost(bytes = "bytes", tag = "2")]
    pub padding: Bytes,
}

/// The response of `ClientStream`.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct Sum {
    /// How many numbers the server received.
    #[prost(uint32, tag = "1")]
    pub count: u32,
    /// Their wrapping sum.
    #[prost(uint64, tag = "2")]
    pub sum: u64,
    /// The bytes of their paddings.
    #[prost(uint64, tag = "3")]
    pub padding: u64,
}

/// SplitMix64: a small seeded RNG, good enough to draw faults and payloads.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}
