//! `Pushback::from_values` (gRFC A6's `grpc-retry-pushback-ms`) never panics and follows `pushback.rs`:
//! * no value: `None` (the policy decides);
//! * more than one value: `DontRetry`;
//! * one value: `RetryAfter(n ms)` when it is a non-negative 32-bit decimal without a sign and without leading
//!   zeros (`0`, `250`, `2147483647`), `DontRetry` for anything else (negative, `-0`, `007`, `+5`, ` 1`,
//!   `2147483648`, empty, not ASCII digits).
//!
//! Input: the first byte modulo 5 is how many values (at most) to split the rest into, on 0xFF.
#![no_main]

use std::time::Duration;

use grpc_retry::Pushback;
use libfuzzer_sys::fuzz_target;

/// The accepted form, written independently of `pushback.rs`.
fn valid_ms(v: &[u8]) -> Option<u64> {
    match v {
        [b'0'] => Some(0),
        [b'1'..=b'9', rest @ ..] if rest.iter().all(u8::is_ascii_digit) => {
            let mut n: u64 = 0;
            for d in v {
                n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
                if n > i32::MAX as u64 {
                    return None;
                }
            }
            Some(n)
        }
        _ => None,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((count, rest)) = data.split_first() else {
        return;
    };
    let count = usize::from(count % 5);
    let values: Vec<&[u8]> = if count == 0 {
        Vec::new()
    } else {
        rest.splitn(count, |b| *b == 0xff).collect()
    };
    let got = Pushback::from_values(values.iter().copied());
    let want = match values.as_slice() {
        [] => Pushback::None,
        [one] => match valid_ms(one) {
            Some(ms) => Pushback::RetryAfter(Duration::from_millis(ms)),
            None => Pushback::DontRetry,
        },
        _ => Pushback::DontRetry,
    };
    assert_eq!(got, want, "{values:?}");
});
