//! Quantities with units, as scenario files write them: sizes ("2GiB"), durations ("8ms"),
//! bandwidths ("2Gbit/s") and counts ("1e9").
//!
//! Hand-written rather than taken from a crate: no single crate parses all four kinds with the
//! bit/byte and decimal/binary distinctions a storage-and-memory model needs, and the error
//! messages here name what is allowed.

/// Page size of every guest and of the host (x86-64 base pages).
pub const PAGE_SIZE: u64 = 4096;

const SIZE_UNITS: &[(&str, f64)] = &[
    ("B", 1.0),
    ("KiB", 1024.0),
    ("MiB", 1048576.0),
    ("GiB", 1073741824.0),
    ("TiB", 1099511627776.0),
    ("kB", 1e3),
    ("KB", 1e3),
    ("MB", 1e6),
    ("GB", 1e9),
    ("TB", 1e12),
    ("pages", PAGE_SIZE as f64),
];

const TIME_UNITS: &[(&str, f64)] = &[("ns", 1.0), ("us", 1e3), ("µs", 1e3), ("ms", 1e6), ("s", 1e9), ("min", 60e9), ("h", 3600e9)];

/// Bandwidth units, in bytes per second.
const RATE_UNITS: &[(&str, f64)] = &[
    ("B/s", 1.0),
    ("KiB/s", 1024.0),
    ("MiB/s", 1048576.0),
    ("GiB/s", 1073741824.0),
    ("kB/s", 1e3),
    ("MB/s", 1e6),
    ("GB/s", 1e9),
    ("bit/s", 0.125),
    ("kbit/s", 125.0),
    ("Mbit/s", 125e3),
    ("Gbit/s", 125e6),
];

fn allowed(units: &[(&str, f64)]) -> String {
    units.iter().map(|(u, _)| *u).collect::<Vec<_>>().join(", ")
}

/// Splits "12.5 GiB" into (12.5, "GiB"); the number may use an exponent ("1e9").
fn split(s: &str) -> Result<(f64, &str), String> {
    let t = s.trim();
    let end = t
        .char_indices()
        .find(|&(i, c)| {
            !(c.is_ascii_digit()
                || c == '.'
                || c == '_'
                || ((c == 'e' || c == 'E') && t[i + 1..].starts_with(|d: char| d.is_ascii_digit() || d == '-' || d == '+'))
                || ((c == '-' || c == '+') && (i == 0 || t[..i].ends_with(['e', 'E']))))
        })
        .map(|(i, _)| i)
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(end);
    if num.is_empty() {
        return Err(format!("'{s}' does not start with a number"));
    }
    let v: f64 = num.replace('_', "").parse().map_err(|_| format!("'{s}': '{num}' is not a number"))?;
    if !v.is_finite() {
        return Err(format!("'{s}' is not a finite number"));
    }
    if v < 0.0 {
        return Err(format!("'{s}' is negative"));
    }
    Ok((v, unit.trim()))
}

fn parse_with(s: &str, units: &[(&str, f64)], what: &str, example: &str) -> Result<f64, String> {
    let (v, unit) = split(s)?;
    if unit.is_empty() {
        return Err(format!("'{s}' has no unit; a {what} needs one, e.g. '{example}' (allowed units: {})", allowed(units)));
    }
    units
        .iter()
        .find(|(u, _)| *u == unit)
        .map(|(_, m)| v * m)
        .ok_or_else(|| format!("'{s}': unknown {what} unit '{unit}' (allowed units: {})", allowed(units)))
}

/// The largest size a scenario may give, 1 EiB: far beyond any host, and small enough that sums
/// and small multiples of sizes cannot overflow.
pub const MAX_BYTES: u64 = 1 << 60;
/// The longest duration a scenario may give, 100 years (of 365.25 days), for the same reason.
pub const MAX_DURATION_NS: u64 = 100 * 31_557_600 * 1_000_000_000;

/// Parses a size into bytes ("2GiB", "512 MiB", "1e6 B", "61036 pages"), at most `MAX_BYTES`.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let v = parse_with(s, SIZE_UNITS, "size", "2GiB")?;
    if v.fract() != 0.0 {
        return Err(format!("'{s}' is not a whole number of bytes"));
    }
    if v > MAX_BYTES as f64 {
        return Err(format!("'{s}' is too large (at most 1048576TiB, 1 EiB)"));
    }
    Ok(v as u64)
}

/// Parses a duration into nanoseconds ("8ms", "2.25ms", "30s", "30min"), at most `MAX_DURATION_NS`.
pub fn parse_duration_ns(s: &str) -> Result<u64, String> {
    let v = parse_with(s, TIME_UNITS, "duration", "30s")?;
    if v.round() > MAX_DURATION_NS as f64 {
        return Err(format!("'{s}' is too long (at most 100 years)"));
    }
    Ok(v.round() as u64)
}

/// The slowest bandwidth taken, bytes per second: a 4 KiB page then takes 4 s, and everything a
/// run of at most 100 years could queue on the device stays within its nanosecond clock (below
/// some 1e-6 B/s one page's transfer alone overflows it).
pub const MIN_RATE: f64 = 1e3;

/// Parses a bandwidth into bytes per second ("2Gbit/s", "550MB/s"), at least `MIN_RATE`.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let v = parse_with(s, RATE_UNITS, "bandwidth", "550MB/s")?;
    if v < MIN_RATE {
        return Err(format!("'{s}': a bandwidth must be at least 1kB/s"));
    }
    Ok(v)
}

/// Formats bytes in the largest binary unit that divides them exactly.
pub fn fmt_bytes(b: u64) -> String {
    for (u, m) in [("TiB", 1u64 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if b >= m && b.is_multiple_of(m) {
            return format!("{}{u}", b / m);
        }
    }
    format!("{b}B")
}

/// Formats a size for people: the largest binary unit it reaches, to one decimal ("355.2 MiB").
pub fn human_bytes(b: u64) -> String {
    for (u, m) in [("TiB", 1u64 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if b >= m {
            let x = b as f64 / m as f64;
            return if b.is_multiple_of(m) { format!("{} {u}", b / m) } else { format!("{x:.1} {u}") };
        }
    }
    format!("{b} B")
}

/// Formats nanoseconds in the largest unit that divides them exactly.
pub fn fmt_duration(ns: u64) -> String {
    for (u, m) in [("h", 3_600_000_000_000u64), ("min", 60_000_000_000), ("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)] {
        if ns >= m && ns.is_multiple_of(m) {
            return format!("{}{u}", ns / m);
        }
    }
    format!("{ns}ns")
}

/// Formats a bandwidth in bytes per second, in the largest decimal unit that divides it exactly.
pub fn fmt_rate(bps: f64) -> String {
    if bps.fract() != 0.0 {
        return format!("{bps}B/s");
    }
    let b = bps as u64;
    for (u, m) in [("GB/s", 1_000_000_000u64), ("MB/s", 1_000_000), ("kB/s", 1_000)] {
        if b >= m && b.is_multiple_of(m) {
            return format!("{}{u}", b / m);
        }
    }
    format!("{b}B/s")
}

/// Pages needed to hold `bytes` (rounded up).
pub fn pages(bytes: u64) -> u64 {
    bytes.div_ceil(PAGE_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_bytes("1.5 KiB").unwrap(), 1536);
        assert_eq!(parse_bytes("1e6B").unwrap(), 1_000_000);
        assert_eq!(parse_bytes("61036 pages").unwrap(), 61036 * 4096);
        assert!(parse_bytes("2048").unwrap_err().contains("no unit"));
        assert!(parse_bytes("-1GiB").unwrap_err().contains("negative"));
        assert!(parse_bytes("2GB/s").unwrap_err().contains("unknown size unit"));
        assert!(parse_bytes("GiB").is_err());
        // A size that would saturate (or overflow a sum of a few) is refused, not clamped.
        assert_eq!(parse_bytes("1048576TiB").unwrap(), MAX_BYTES);
        assert!(parse_bytes("1e30B").unwrap_err().contains("too large"));
        assert!(parse_bytes("1048577TiB").unwrap_err().contains("at most 1048576TiB"));
    }

    #[test]
    fn durations_and_rates() {
        assert_eq!(parse_duration_ns("2.25ms").unwrap(), 2_250_000);
        assert_eq!(parse_duration_ns("30min").unwrap(), 1_800_000_000_000);
        assert_eq!(parse_rate("2Gbit/s").unwrap(), 250e6);
        assert!(parse_rate("0MB/s").unwrap_err().contains("at least 1kB/s"));
        // Slow enough that a page's transfer time overflowed the device clock to zero.
        assert!(parse_rate("1e-9B/s").is_err());
        assert_eq!(parse_rate("1kB/s").unwrap(), MIN_RATE);
        assert!(parse_duration_ns("1e30s").unwrap_err().contains("at most 100 years"));
        assert!(parse_duration_ns("876601h").unwrap_err().contains("too long"));
        assert!(parse_duration_ns("876600h").is_ok());
    }

    #[test]
    fn formatting_round_trips() {
        for b in [4096u64, 2 << 30, 1536, 7] {
            assert_eq!(parse_bytes(&fmt_bytes(b)).unwrap(), b);
        }
        for ns in [8_000_000u64, 150_000_000_000, 2_250_000, 5] {
            assert_eq!(parse_duration_ns(&fmt_duration(ns)).unwrap(), ns);
        }
    }
}
