//! The `grpc-timeout` header (`doc/PROTOCOL-HTTP2.md`): a positive integer of at most 8 digits and a unit
//! (`H` hours, `M` minutes, `S` seconds, `m` milliseconds, `u` microseconds, `n` nanoseconds).
//!
//! Encoding picks the finest unit whose value fits in 8 digits and rounds up, so the server never sees a
//! shorter deadline than the client's. A zero timeout has no encoding (`None`: the header's value must be
//! positive, so a call with no time left fails locally and is never sent); a timeout beyond `99999999H` is
//! clamped to it.

use std::time::Duration;

const MAX_VALUE: u128 = 99_999_999;

const UNITS: [(u128, char); 6] = [
    (1, 'n'),
    (1_000, 'u'),
    (1_000_000, 'm'),
    (1_000_000_000, 'S'),
    (60_000_000_000, 'M'),
    (3_600_000_000_000, 'H'),
];

/// Encodes a timeout for the `grpc-timeout` header, rounding up to the finest unit whose value fits in 8
/// digits (clamped at `99999999H`). `None` for a zero timeout: the header's value is a positive integer,
/// so a call with no time left must end locally with DEADLINE_EXCEEDED, never be sent.
pub fn encode(timeout: Duration) -> Option<String> {
    let nanos = timeout.as_nanos();
    if nanos == 0 {
        return None;
    }
    for (per_unit, unit) in UNITS {
        let value = nanos.div_ceil(per_unit);
        if value <= MAX_VALUE {
            return Some(format!("{value}{unit}"));
        }
    }
    Some(format!("{MAX_VALUE}H"))
}

/// Decodes a `grpc-timeout` header value; `None` if it is not 1 to 8 digits followed by a known unit.
pub fn decode(value: &[u8]) -> Option<Duration> {
    let (unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0'));
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_at_the_finest_unit_that_fits_rounding_up() {
        assert_eq!(
            encode(Duration::ZERO),
            None,
            "a positive integer: zero is never sent"
        );
        let cases = [
            (Duration::from_nanos(1), "1n"),
            (Duration::from_nanos(99_999_999), "99999999n"),
            (Duration::from_nanos(100_000_000), "100000u"),
            (Duration::from_nanos(100_000_001), "100001u"),
            (Duration::from_millis(1), "1000000n"),
            (Duration::from_secs(1), "1000000u"),
            (Duration::from_secs(100), "100000m"),
            (Duration::from_secs(100_000), "100000S"),
            (Duration::from_secs(100_000_000), "1666667M"),
            (Duration::from_secs(6_000_000_000), "1666667H"),
            (Duration::from_secs(u64::MAX), "99999999H"),
        ];
        for (d, want) in cases {
            assert_eq!(encode(d).as_deref(), Some(want), "{d:?}");
        }
    }

    #[test]
    fn never_encodes_more_than_eight_digits_and_never_shortens() {
        let mut d = Duration::from_nanos(7);
        while d < Duration::from_secs(10_000_000_000) {
            let s = encode(d).expect("positive");
            let digits = s.len() - 1;
            assert!(digits <= 8, "{s}");
            assert!(
                decode(s.as_bytes()).expect("round trip") >= d,
                "{s} < {d:?}"
            );
            d = d * 3 + Duration::from_nanos(1);
        }
    }

    #[test]
    fn decodes_strictly() {
        assert_eq!(decode(b"1S"), Some(Duration::from_secs(1)));
        assert_eq!(decode(b"250m"), Some(Duration::from_millis(250)));
        assert_eq!(decode(b"2H"), Some(Duration::from_secs(7200)));
        for bad in [&b""[..], b"S", b"123456789S", b"-1S", b"1s", b"1.5S", b"10"] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }
}
