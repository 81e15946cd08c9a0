//! Parsing of the human units used on the command line and in scenario files:
//! durations (`250ms`, `10m`, `1h30m`), sizes (`1k`, `10KB`, `2MiB`), size ranges
//! (`0..10k`), rates (`200/s`, `5000/min`) and integer ranges (`1..10`).
//!
//! Every parser returns a `UnitError` whose message names the offending text and
//! what was expected, so the CLI can print it as one line.

use std::fmt;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: '{text}' ({hint})")]
pub struct UnitError {
    what: &'static str,
    text: String,
    hint: &'static str,
}

impl UnitError {
    pub fn new(what: &'static str, text: &str, hint: &'static str) -> Self {
        err(what, text, hint)
    }
}

fn err(what: &'static str, text: &str, hint: &'static str) -> UnitError {
    UnitError {
        what,
        text: text.to_string(),
        hint,
    }
}

/// Parses a duration such as `100ms`, `30s`, `10m`, `1h30m`, `2d`, `1.5s`.
/// A bare number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    const HINT: &str = "expected e.g. 500ms, 30s, 10m, 1h30m";
    let s = text.trim();
    if s.is_empty() {
        return Err(err("bad duration", text, HINT));
    }
    if let Ok(secs) = s.parse::<f64>() {
        return secs_to_duration(secs).ok_or_else(|| err("bad duration", text, HINT));
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| err("bad duration", text, HINT))?;
        if num_end == 0 {
            return Err(err("bad duration", text, HINT));
        }
        let value: f64 = rest[..num_end]
            .parse()
            .map_err(|_| err("bad duration", text, HINT))?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" | "sec" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            "d" => 86400.0,
            _ => return Err(err("bad duration", text, HINT)),
        };
        total += value * scale;
        rest = &rest[unit_end..];
    }
    secs_to_duration(total).ok_or_else(|| err("bad duration", text, HINT))
}

fn secs_to_duration(secs: f64) -> Option<Duration> {
    if secs.is_finite() && (0.0..1e10).contains(&secs) {
        Some(Duration::from_secs_f64(secs))
    } else {
        None
    }
}

/// Formats a duration compactly for humans: `850µs`, `12.3ms`, `4.20s`, `3m05s`, `2h10m`.
pub fn fmt_duration(d: Duration) -> String {
    let us = d.as_micros();
    if us < 1_000 {
        format!("{us}µs")
    } else if us < 10_000 {
        format!("{:.2}ms", us as f64 / 1e3)
    } else if us < 1_000_000 {
        format!("{:.1}ms", us as f64 / 1e3)
    } else if us < 60_000_000 {
        format!("{:.2}s", us as f64 / 1e6)
    } else if us < 3_600_000_000 {
        let s = d.as_secs();
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        let s = d.as_secs();
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

/// Parses a byte size: `512`, `1k`, `10KB`, `1.5M`, `2MiB`. `k` and `KB` are 1024 bytes,
/// as in postal and every mail administrator's head.
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    const HINT: &str = "expected e.g. 512, 1k, 10KB, 2M";
    let s = text.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    if split == 0 {
        return Err(err("bad size", text, HINT));
    }
    let value: f64 = s[..split]
        .parse()
        .map_err(|_| err("bad size", text, HINT))?;
    let scale = match s[split..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(err("bad size", text, HINT)),
    };
    let bytes = value * scale;
    if !bytes.is_finite() || bytes > 1e12 {
        return Err(err("bad size", text, HINT));
    }
    Ok(bytes.round() as u64)
}

/// Formats bytes with binary prefixes: `980 B`, `10.0 KiB`, `3.2 MiB`.
pub fn fmt_bytes(b: u64) -> String {
    let b = b as f64;
    if b < 1024.0 {
        format!("{b} B")
    } else if b < 1024.0 * 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else if b < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.1} MiB", b / 1024.0 / 1024.0)
    } else {
        format!("{:.2} GiB", b / 1024.0 / 1024.0 / 1024.0)
    }
}

/// An inclusive range `lo..hi` (or a single value `n`, meaning `n..n`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Range<T> {
    pub lo: T,
    pub hi: T,
}

impl<T: Copy + PartialOrd> Range<T> {
    pub fn fixed(v: T) -> Self {
        Range { lo: v, hi: v }
    }
    pub fn is_fixed(&self) -> bool {
        self.lo == self.hi
    }
}

impl<T: fmt::Display + PartialEq> fmt::Display for Range<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}..{}", self.lo, self.hi)
        }
    }
}

fn parse_range_with<T: Copy + PartialOrd>(
    text: &str,
    what: &'static str,
    hint: &'static str,
    one: impl Fn(&str) -> Result<T, UnitError>,
) -> Result<Range<T>, UnitError> {
    let (lo, hi) = match text.split_once("..") {
        Some((a, b)) => (one(a)?, one(b)?),
        None => {
            let v = one(text)?;
            (v, v)
        }
    };
    if lo > hi {
        return Err(err(what, text, hint));
    }
    Ok(Range { lo, hi })
}

/// `1k` or `0..10k`.
pub fn parse_size_range(text: &str) -> Result<Range<u64>, UnitError> {
    parse_range_with(
        text,
        "bad size range",
        "expected SIZE or MIN..MAX, e.g. 1k or 0..10k",
        parse_size,
    )
}

/// `3` or `1..10`.
pub fn parse_count_range(text: &str) -> Result<Range<u32>, UnitError> {
    const HINT: &str = "expected N or MIN..MAX, e.g. 1 or 1..10";
    parse_range_with(text, "bad range", HINT, |s| {
        s.trim()
            .parse::<u32>()
            .map_err(|_| err("bad range", text, HINT))
    })
}

/// `500ms` or `5ms..20ms`.
pub fn parse_duration_range(text: &str) -> Result<Range<Duration>, UnitError> {
    parse_range_with(
        text,
        "bad duration range",
        "expected D or MIN..MAX, e.g. 5ms..20ms",
        parse_duration,
    )
}

/// A rate in events per second. Accepts `200/s`, `5000/min`, `36000/h`, `200` (per second).
pub fn parse_rate(text: &str) -> Result<f64, UnitError> {
    const HINT: &str = "expected e.g. 200/s, 5000/min, 36000/h";
    let s = text.trim();
    let (num, per) = s.split_once('/').unwrap_or((s, "s"));
    let value: f64 = num
        .trim()
        .parse()
        .map_err(|_| err("bad rate", text, HINT))?;
    let secs = match per.trim() {
        "s" | "sec" => 1.0,
        "m" | "min" => 60.0,
        "h" | "hour" => 3600.0,
        _ => return Err(err("bad rate", text, HINT)),
    };
    let rate = value / secs;
    if !rate.is_finite() || rate < 0.0 {
        return Err(err("bad rate", text, HINT));
    }
    Ok(rate)
}

/// A list of integer values for sweeps: `1..10,20..100/10`, `1,2,4,8,16`.
pub fn parse_steps(text: &str) -> Result<Vec<u64>, UnitError> {
    const HINT: &str = "expected e.g. 1..10,20..100/10 or 1,2,4,8";
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (
                r,
                s.parse::<u64>().map_err(|_| err("bad steps", text, HINT))?,
            ),
            None => (part, 1),
        };
        if step == 0 {
            return Err(err("bad steps", text, HINT));
        }
        let num = |s: &str| {
            s.trim()
                .parse::<u64>()
                .map_err(|_| err("bad steps", text, HINT))
        };
        match range.split_once("..") {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b || (b - a) / step > 100_000 {
                    return Err(err("bad steps", text, HINT));
                }
                let mut v = a;
                while v <= b {
                    out.push(v);
                    v += step;
                }
            }
            None => out.push(num(range)?),
        }
    }
    if out.is_empty() {
        return Err(err("bad steps", text, HINT));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("100ms").unwrap(), Duration::from_millis(100));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        for bad in ["", "ms", "10x", "-1s", "1h30", "abc"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512").unwrap(), 512);
        assert_eq!(parse_size("1k").unwrap(), 1024);
        assert_eq!(parse_size("10KB").unwrap(), 10240);
        assert_eq!(parse_size("2MiB").unwrap(), 2 * 1024 * 1024);
        assert!(parse_size("1q").is_err());
        assert!(parse_size("k").is_err());
        assert_eq!(
            parse_size_range("0..10k").unwrap(),
            Range { lo: 0, hi: 10240 }
        );
        assert!(parse_size_range("10k..1k").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("200/s").unwrap(), 200.0);
        assert_eq!(parse_rate("6000/min").unwrap(), 100.0);
        assert_eq!(parse_rate("50").unwrap(), 50.0);
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("10/fortnight").is_err());
    }

    #[test]
    fn steps() {
        assert_eq!(
            parse_steps("1..3,20..40/10").unwrap(),
            vec![1, 2, 3, 20, 30, 40]
        );
        assert_eq!(parse_steps("1,2,4").unwrap(), vec![1, 2, 4]);
        assert!(parse_steps("5..1").is_err());
        assert!(parse_steps("1..4/0").is_err());
    }

    #[test]
    fn error_message_names_the_text() {
        let e = parse_rate("lots").unwrap_err().to_string();
        assert!(e.contains("'lots'"), "{e}");
    }
}
