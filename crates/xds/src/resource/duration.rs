//! `google.protobuf.Duration` as the resources carry it, turned into a [`Duration`]: the seconds and
//! nanoseconds must both be non-negative and the nanoseconds under one second (the type's own rules, which
//! a control plane could break); anything else is a NACK. Only what the resource parsers share.

use std::time::Duration;

use envoy_types::pb::google::protobuf::Duration as ProtoDuration;

/// The largest number of seconds a `google.protobuf.Duration` may hold (10,000 years).
const MAX_SECONDS: i64 = 315_576_000_000;

/// The proto duration as a [`Duration`], or why it is invalid (negative, nanoseconds out of range, or
/// beyond the type's 10,000 years).
pub(crate) fn from_proto(d: &ProtoDuration) -> Result<Duration, String> {
    let seconds = u64::try_from(d.seconds)
        .ok()
        .filter(|&s| s <= MAX_SECONDS as u64)
        .ok_or_else(|| format!("invalid duration: {} seconds", d.seconds))?;
    let nanos = u32::try_from(d.nanos)
        .ok()
        .filter(|&n| n < 1_000_000_000)
        .ok_or_else(|| format!("invalid duration: {} nanoseconds", d.nanos))?;
    Ok(Duration::new(seconds, nanos))
}

#[cfg(test)]
pub(crate) fn to_proto(d: Duration) -> ProtoDuration {
    ProtoDuration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_and_invalid_durations() {
        let d = |seconds, nanos| ProtoDuration { seconds, nanos };
        assert_eq!(from_proto(&d(1, 500)), Ok(Duration::new(1, 500)));
        assert_eq!(from_proto(&d(0, 0)), Ok(Duration::ZERO));
        assert!(from_proto(&d(-1, 0)).is_err());
        assert!(from_proto(&d(0, -1)).is_err());
        assert!(from_proto(&d(0, 1_000_000_000)).is_err());
        assert!(from_proto(&d(MAX_SECONDS + 1, 0)).is_err());
        assert_eq!(
            from_proto(&to_proto(Duration::from_millis(1500))),
            Ok(Duration::from_millis(1500))
        );
    }
}
