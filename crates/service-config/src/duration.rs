//! proto3 JSON `google.protobuf.Duration`: decimal seconds with an `s` suffix (`"1s"`, `"0.000340012s"`,
//! `"-2.5s"`), up to 9 fractional digits, within ±315,576,000,000 s.

use std::time::Duration;

/// The largest magnitude proto3 allows, in seconds.
const MAX_SECONDS: u64 = 315_576_000_000;

/// A signed duration as proto3 JSON writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SignedDuration {
    /// Whether it is below zero.
    pub(crate) negative: bool,
    /// Its magnitude.
    pub(crate) magnitude: Duration,
}

/// Parses a proto3 JSON duration; `None` if malformed or out of range.
pub(crate) fn parse(text: &str) -> Option<SignedDuration> {
    let body = text.strip_suffix('s')?;
    let (negative, body) = match body.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, body),
    };
    let (secs, frac) = match body.split_once('.') {
        Some((s, f)) => (s, Some(f)),
        None => (body, None),
    };
    if secs.is_empty() || !secs.bytes().all(|b| b.is_ascii_digit()) || secs.len() > 12 {
        return None;
    }
    let seconds: u64 = secs.parse().ok()?;
    let nanos = match frac {
        None => 0,
        Some(f) if !f.is_empty() && f.len() <= 9 && f.bytes().all(|b| b.is_ascii_digit()) => {
            let padded = format!("{f:0<9}");
            padded.parse::<u32>().ok()?
        }
        Some(_) => return None,
    };
    if seconds > MAX_SECONDS || (seconds == MAX_SECONDS && nanos > 0) {
        return None;
    }
    Some(SignedDuration {
        negative: negative && (seconds > 0 || nanos > 0),
        magnitude: Duration::new(seconds, nanos),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proto3_durations() {
        let ok = |s: &str, d: Duration| assert_eq!(parse(s).map(|x| x.magnitude), Some(d), "{s}");
        ok("1s", Duration::from_secs(1));
        ok("0.1s", Duration::from_millis(100));
        ok("1.000340012s", Duration::new(1, 340_012));
        ok("0s", Duration::ZERO);
        ok("315576000000s", Duration::from_secs(315_576_000_000));
        assert_eq!(parse("-2.5s").map(|x| x.negative), Some(true));
        assert_eq!(parse("-0s").map(|x| x.negative), Some(false));
        for bad in [
            "1",
            "s",
            ".5s",
            "1.s",
            "1.0000000001s",
            "1e3s",
            "+1s",
            " 1s",
            "1.5 s",
            "315576000001s",
            "1,5s",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
