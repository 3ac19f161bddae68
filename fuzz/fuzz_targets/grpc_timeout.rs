//! The `grpc-timeout` codec (`timeout.rs`):
//! * decoding never panics and accepts exactly 1 to 8 ASCII digits followed by `H`, `M`, `S`, `m`, `u` or `n`;
//! * a decoded value encodes to at most 8 digits and decodes back to exactly itself (every unit divides the
//!   coarser ones, so the finest unit that fits represents it without rounding);
//! * encoding any `Duration` (up to `Duration::MAX`) never panics; zero encodes to nothing (the header is a
//!   positive integer); any other gives at most 8 digits, uses the finest unit whose value fits, and rounds
//!   up by less than one unit: the decoded timeout is never shorter than the original, except beyond
//!   `99999999H`, which is clamped to it.
//!
//! Input: the whole buffer is decoded; its first 12 bytes (zero-padded) are also read as a `Duration`
//! (8 bytes of seconds, 4 of nanoseconds modulo 10^9) and encoded.
#![no_main]

use std::time::Duration;

use grpc_channel::timeout::{decode, encode};
use libfuzzer_sys::fuzz_target;

const MAX_VALUE: u128 = 99_999_999;

fn unit_nanos(unit: u8) -> Option<u128> {
    Some(match unit {
        b'n' => 1,
        b'u' => 1_000,
        b'm' => 1_000_000,
        b'S' => 1_000_000_000,
        b'M' => 60_000_000_000,
        b'H' => 3_600_000_000_000,
        _ => return None,
    })
}

/// The next finer unit than `unit`, if any.
fn finer(unit: u8) -> Option<u8> {
    Some(match unit {
        b'u' => b'n',
        b'm' => b'u',
        b'S' => b'm',
        b'M' => b'S',
        b'H' => b'M',
        _ => return None,
    })
}

/// Splits an encoded value into its number and unit, checking the shape the header allows.
fn parse(encoded: &str) -> (u128, u8) {
    let bytes = encoded.as_bytes();
    let (unit, digits) = bytes.split_last().expect("empty grpc-timeout");
    assert!(
        (1..=8).contains(&digits.len()) && digits.iter().all(u8::is_ascii_digit),
        "{encoded:?}"
    );
    assert!(unit_nanos(*unit).is_some(), "{encoded:?}");
    let value = std::str::from_utf8(digits)
        .expect("ascii")
        .parse()
        .expect("digits");
    (value, *unit)
}

fn check_encode(d: Duration) {
    let Some(encoded) = encode(d) else {
        assert_eq!(d, Duration::ZERO, "only zero has no encoding");
        return;
    };
    assert!(!d.is_zero(), "zero encoded as {encoded:?}");
    let (value, unit) = parse(&encoded);
    let back = decode(encoded.as_bytes()).expect("encode gave an undecodable value");
    let nanos = d.as_nanos();
    let max = MAX_VALUE * unit_nanos(b'H').expect("H");
    if nanos > max {
        assert_eq!(encoded, "99999999H", "{d:?}");
    } else {
        let per_unit = unit_nanos(unit).expect("unit");
        // Rounded up, by less than one unit.
        assert!(back >= d, "{encoded} decodes to {back:?} < {d:?}");
        assert!(back.as_nanos() - nanos < per_unit, "{encoded} for {d:?}");
        assert_eq!(value, nanos.div_ceil(per_unit));
        // The finest unit that fits.
        if let Some(f) = finer(unit) {
            let finer_value = nanos.div_ceil(unit_nanos(f).expect("unit"));
            assert!(finer_value > MAX_VALUE, "{encoded} for {d:?}: {finer_value}{}", f as char);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // Decoding: exactly the header's grammar.
    let decoded = decode(data);
    let well_formed = match data.split_last() {
        Some((unit, digits)) => {
            unit_nanos(*unit).is_some()
                && (1..=8).contains(&digits.len())
                && digits.iter().all(u8::is_ascii_digit)
        }
        None => false,
    };
    assert_eq!(decoded.is_some(), well_formed, "{data:?}");
    if let Some(d) = decoded {
        let (value, unit) = parse(std::str::from_utf8(data).expect("ascii"));
        assert_eq!(d.as_nanos(), value * unit_nanos(unit).expect("unit"));
        match encode(d) {
            Some(encoded) => {
                parse(&encoded);
                assert_eq!(decode(encoded.as_bytes()), Some(d), "{data:?} -> {encoded}");
            }
            None => assert!(d.is_zero(), "{data:?}"),
        }
    }

    // Encoding: any Duration.
    let mut raw = [0u8; 12];
    let n = data.len().min(12);
    raw[..n].copy_from_slice(&data[..n]);
    let secs = u64::from_le_bytes(raw[..8].try_into().expect("8 bytes"));
    let nanos = u32::from_le_bytes(raw[8..].try_into().expect("4 bytes")) % 1_000_000_000;
    check_encode(Duration::new(secs, nanos));
    check_encode(Duration::MAX);
    check_encode(Duration::from_nanos(u64::from(nanos)));
});
