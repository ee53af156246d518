//! Timestamps on the wire (Hyperspace spec §4.1 `createdAt`, `endedAt`, `recordedAt`; the memory
//! records' `createdAt`): RFC 3339 UTC with milliseconds, `2026-03-18T12:00:00.000Z`, formatted
//! from and parsed to Unix milliseconds.
//!
//! # Why not `jiff` or `time`
//!
//! Both are in the lock file and both format this shape (`jiff`'s `{:.3}` of a `Timestamp`), but
//! neither covers the two ends this module must:
//!
//! - **Formatting is total over `u64`.** Both crates stop in the year 9999 (about
//!   253,402,300,800,000 ms; `time` without its `large-dates` feature), and
//!   `format_timestamp(u64::MAX)` must still answer a string (the State primitive's tests pin
//!   it; the year is past 584 million). A crate would need this code as its fallback anyway.
//! - **Parsing accepts one shape only**, `YYYY-MM-DDTHH:MM:SS[.mmm]Z`. The crates' RFC 3339
//!   parsers accept more, such as `2026-03-17T08:30:00.0Z` (one fractional digit) and `+01:00`
//!   offsets, which the memory records refuse (their tests pin `.0Z` as refused); a crate would
//!   need this shape check in front of it.
//!
//! So one hand-written copy is kept (it was two: `state` formatted, `memory::record` parsed),
//! with H. Hinnant's civil-date algorithms in both directions.

/// Formats Unix milliseconds as RFC 3339 UTC with milliseconds: `2026-03-18T12:00:00.000Z`.
#[must_use]
pub fn format_timestamp(ms: u64) -> String {
    let secs = ms / 1000;
    let millis = ms % 1000;
    let second_of_day = secs % 86_400;
    // u64::MAX / 86_400_000 fits an i64 comfortably.
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day) (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Parses `YYYY-MM-DDTHH:MM:SS.mmmZ` (milliseconds optional) into Unix ms.
#[must_use]
pub fn parse_timestamp(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = text.get(r)?;
        if !s.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let millis = match &b[19..] {
        b"Z" => 0,
        [b'.', rest @ ..] if rest.len() == 4 && rest[3] == b'Z' => num(20..23)?,
        _ => return None,
    };
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 59 {
        return None;
    }
    let days = days_from_civil(y, mo, d);
    let ms = ((days * 86_400 + h * 3600 + mi * 60 + s) * 1000) + millis;
    let ms = u64::try_from(ms).ok()?;
    (format_timestamp(ms).get(..10) == text.get(..10)).then_some(ms)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}
