//! Server pushback (gRFC A6): the `grpc-retry-pushback-ms` trailer. A value ≥ 0 asks the client to retry (or
//! send the next hedge) after exactly that many milliseconds; a negative value, an unparsable one, or more
//! than one value means "do not retry".

use std::time::Duration;

/// What the server's trailers said about retrying.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pushback {
    /// No pushback: the policy decides.
    #[default]
    None,
    /// Retry after exactly this delay.
    RetryAfter(Duration),
    /// Do not retry (and send no more hedges).
    DontRetry,
}

impl Pushback {
    /// Parses the values of every `grpc-retry-pushback-ms` trailer of one response.
    pub fn from_values<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Pushback {
        let mut values = values.into_iter();
        let Some(first) = values.next() else {
            return Pushback::None;
        };
        if values.next().is_some() {
            return Pushback::DontRetry;
        }
        match parse_ms(first) {
            Some(ms) if ms >= 0 => Pushback::RetryAfter(Duration::from_millis(ms as u64)),
            _ => Pushback::DontRetry,
        }
    }
}

/// An ASCII signed 32-bit integer without unneeded leading zeros.
fn parse_ms(v: &[u8]) -> Option<i64> {
    let digits = v.strip_prefix(b"-").unwrap_or(v);
    let all_digits = !digits.is_empty() && digits.iter().all(u8::is_ascii_digit);
    let leading_zero = digits.len() > 1 && digits[0] == b'0';
    let negative_zero = v.starts_with(b"-") && digits == b"0";
    if !all_digits || leading_zero || negative_zero {
        return None;
    }
    let n: i64 = std::str::from_utf8(v).ok()?.parse().ok()?;
    i32::try_from(n).ok().map(i64::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(v: &str) -> Pushback {
        Pushback::from_values([v.as_bytes()])
    }

    #[test]
    fn parses_exactly() {
        assert_eq!(Pushback::from_values([]), Pushback::None);
        assert_eq!(one("0"), Pushback::RetryAfter(Duration::ZERO));
        assert_eq!(one("250"), Pushback::RetryAfter(Duration::from_millis(250)));
        assert_eq!(
            one("2147483647"),
            Pushback::RetryAfter(Duration::from_millis(2_147_483_647))
        );
        for bad in [
            "-1",
            "-2147483648",
            "abc",
            "",
            "007",
            "-0",
            "1.5",
            " 1",
            "2147483648",
            "+5",
        ] {
            assert_eq!(one(bad), Pushback::DontRetry, "{bad:?}");
        }
        assert_eq!(
            Pushback::from_values([&b"10"[..], b"10"]),
            Pushback::DontRetry,
            "repeated"
        );
    }
}
