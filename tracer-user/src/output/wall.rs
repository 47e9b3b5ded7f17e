//! Wall-clock times for people and for JSON: UTC, from nanoseconds since the Unix epoch.

/// `2026-11-26T23:50:01.123456Z`: RFC 3339, UTC, microseconds (times before the epoch are
/// written as the epoch).
#[must_use]
pub fn rfc3339(unix_ns: i128) -> String {
    let micros = unix_ns.max(0) / 1_000;
    let (secs, micro) = (micros / 1_000_000, micros % 1_000_000);
    let (days, day) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micro:06}Z",
        day / 3600,
        day / 60 % 60,
        day % 60
    )
}

/// `23:50:01.123456`: the time of day, UTC, microseconds.
#[must_use]
pub fn time_of_day_us(unix_ns: i128) -> String {
    let micros = unix_ns.max(0) / 1_000;
    let (secs, micro) = (micros / 1_000_000, micros % 1_000_000);
    let day = secs % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{micro:06}",
        day / 3600,
        day / 60 % 60,
        day % 60
    )
}

/// `23:50:01.123`: the time of day, UTC, milliseconds (cut, as `date +%T.%3N` does).
#[must_use]
pub fn time_of_day_ms(unix_ns: i128) -> String {
    let mut t = time_of_day_us(unix_ns);
    t.truncate(t.len() - 3);
    t
}

/// Year, month, day of `days` since 1970-01-01 (proleptic Gregorian; H. Hinnant's
/// `civil_from_days`).
fn civil(days: i128) -> (i128, i128, i128) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i128::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_times() {
        let s = 1_000_000_000_i128;
        let cases = [
            (0, "1970-01-01T00:00:00.000000Z", "00:00:00.000"),
            (-5 * s, "1970-01-01T00:00:00.000000Z", "00:00:00.000"),
            // date -u -d @951782400 (a leap day)
            (
                951_782_400 * s,
                "2000-02-29T00:00:00.000000Z",
                "00:00:00.000",
            ),
            // date -u -d @1795737001.123456
            (
                1_795_737_001 * s + 123_456_789,
                "2026-11-26T23:50:01.123456Z",
                "23:50:01.123",
            ),
            (
                4_102_444_799 * s,
                "2099-12-31T23:59:59.000000Z",
                "23:59:59.000",
            ),
        ];
        for (ns, iso, hms) in cases {
            assert_eq!(rfc3339(ns), iso, "{ns}");
            assert_eq!(time_of_day_ms(ns), hms, "{ns}");
        }
    }
}
