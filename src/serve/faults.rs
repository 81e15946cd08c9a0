//! Fault injection for the embedded SMTP/LMTP and XMPP server: failures with a chosen
//! reply code, delays, dropped connections, a connection cap, a banner delay and a
//! tarpit. Every injected fault is counted in [`Stats`] by (phase, kind), so a test can
//! check that the client saw exactly what the server injected. With a seed, connection
//! number N always draws the same faults.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

pub use super::injection::{FaultKind, FaultPoint};
use super::stats::Stats;
use crate::units::{parse_duration, parse_duration_range, Range};
use crate::UsageError;

#[derive(Debug, Clone, PartialEq)]
pub struct Fail {
    pub phase: FaultPoint,
    pub code: u16,
    pub probability: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Delay {
    pub phase: FaultPoint,
    pub duration: Range<Duration>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Drop {
    pub phase: FaultPoint,
    pub probability: f64,
}

/// All configured faults (empty by default: a well-behaved server).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    pub fails: Vec<Fail>,
    pub delays: Vec<Delay>,
    pub drops: Vec<Drop>,
    pub banner_delay: Option<Duration>,
    /// Delay before every reply.
    pub tarpit: Option<Duration>,
    /// The share of messages acknowledged and then thrown away (`--lose`).
    pub lose: f64,
    /// The share of messages stored twice (`--duplicate`).
    pub duplicate: f64,
    /// Read every connection at most this fast, bytes per second, with a small receive
    /// buffer (`--slow-read`): the client's writes wait on the TCP window.
    pub slow_read: Option<u64>,
    /// SMTP/LMTP: 421 and close after this many commands on a connection
    /// (`--close-after`).
    pub close_after: Option<u32>,
    pub seed: Option<u64>,
    /// `--serial-delays`: the delays are served one at a time, server-wide.
    pub serial: Option<Serial>,
}

/// The one lock every delayed reply takes while it waits (`--serial-delays`): a server
/// with one disk, whose capacity is one delayed command per delay.
#[derive(Debug, Clone, Default)]
pub struct Serial(pub std::sync::Arc<tokio::sync::Mutex<()>>);

impl PartialEq for Serial {
    fn eq(&self, other: &Serial) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

fn phase(text: &str, whole: &str, flag: &str) -> Result<FaultPoint, UsageError> {
    FaultPoint::parse(text).ok_or_else(|| {
        UsageError(format!(
            "{flag} '{whole}': unknown phase '{text}' (expected connect, banner, ehlo, mail, \
             rcpt, data, dot, stored, xmpp-login, xmpp-stanza, rr, or an IMAP command: login, \
             select, fetch, store, search, append, copy, expunge, idle, list, status, mailbox, \
             or a POP3 one: login, list, retr, dele, quit)"
        ))
    })
}

fn probability(text: &str, whole: &str, flag: &str) -> Result<f64, UsageError> {
    match text.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(UsageError(format!(
            "{flag} '{whole}': probability '{text}' must be a number from 0 to 1"
        ))),
    }
}

/// `PHASE:CODE:PROB`, e.g. `rcpt:451:0.02`; for IMAP commands CODE may be `NO` (450),
/// `BAD` (500) or `BYE` (421: the server says BYE and closes), for POP3 ones `-ERR` (450).
pub fn parse_fail(text: &str) -> Result<Fail, UsageError> {
    let parts: Vec<&str> = text.split(':').collect();
    let [p, code, prob] = parts[..] else {
        return Err(UsageError(format!(
            "--fail '{text}': expected PHASE:CODE:PROB, e.g. rcpt:451:0.02"
        )));
    };
    let word = match code.to_ascii_uppercase().as_str() {
        "NO" | "-ERR" => Some(450),
        "BAD" => Some(500),
        "BYE" => Some(421),
        _ => None,
    };
    let code = match word.map_or_else(|| code.parse::<u16>(), Ok) {
        Ok(c) if (400..600).contains(&c) => c,
        _ => {
            return Err(UsageError(format!(
                "--fail '{text}': reply code '{code}' must be 400..599, or NO, BAD or BYE for IMAP, -ERR for POP3"
            )))
        }
    };
    Ok(Fail {
        phase: phase(p, text, "--fail")?,
        code,
        probability: probability(prob, text, "--fail")?,
    })
}

/// `PHASE:DUR` or `PHASE:MIN..MAX`, e.g. `data:5ms..20ms`.
pub fn parse_delay(text: &str) -> Result<Delay, UsageError> {
    let Some((p, d)) = text.split_once(':') else {
        return Err(UsageError(format!(
            "--delay '{text}': expected PHASE:DURATION or PHASE:MIN..MAX, e.g. data:5ms..20ms"
        )));
    };
    let duration =
        parse_duration_range(d).map_err(|e| UsageError(format!("--delay '{text}': {e}")))?;
    Ok(Delay {
        phase: phase(p, text, "--delay")?,
        duration,
    })
}

/// `PHASE:PROB`, e.g. `data:0.01`.
pub fn parse_drop(text: &str) -> Result<Drop, UsageError> {
    let Some((p, prob)) = text.split_once(':') else {
        return Err(UsageError(format!(
            "--drop '{text}': expected PHASE:PROB, e.g. rcpt:0.01"
        )));
    };
    Ok(Drop {
        phase: phase(p, text, "--drop")?,
        probability: probability(prob, text, "--drop")?,
    })
}

/// A share of messages (`--lose 0.01`).
pub fn parse_share(flag: &str, text: &str) -> Result<f64, UsageError> {
    probability(text, text, flag)
}

/// A plain duration flag (`--banner-delay 2s`).
pub fn parse_plain_duration(flag: &str, text: &str) -> Result<Duration, UsageError> {
    parse_duration(text).map_err(|e| UsageError(format!("{flag}: {e}")))
}

/// What to do at one phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Injected {
    None,
    Fail(u16),
    Drop,
}

/// One connection's view of the faults, with its own random stream.
pub struct FaultSession<'a> {
    faults: &'a Faults,
    rng: SmallRng,
}

impl Faults {
    pub fn is_empty(&self) -> bool {
        self.fails.is_empty()
            && self.delays.is_empty()
            && self.drops.is_empty()
            && self.banner_delay.is_none()
            && self.tarpit.is_none()
            && self.lose == 0.0
            && self.duplicate == 0.0
            && self.slow_read.is_none()
            && self.close_after.is_none()
    }

    /// The fault stream for connection number `conn_no` (0-based, in accept order).
    pub fn session(&self, conn_no: u64) -> FaultSession<'_> {
        let seed = match self.seed {
            Some(s) => s ^ conn_no.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            None => rand::random(),
        };
        FaultSession {
            faults: self,
            rng: SmallRng::seed_from_u64(seed),
        }
    }
}

impl FaultSession<'_> {
    /// Draws this phase's faults and counts what was injected. Returns the delay to
    /// apply before replying and the outcome.
    pub fn draw(&mut self, phase: FaultPoint, stats: &Stats) -> (Duration, Injected) {
        let f = self.faults;
        let mut delay = Duration::ZERO;
        if phase == FaultPoint::Connect {
            if let Some(d) = f.banner_delay {
                delay += d;
            }
        }
        for d in f.delays.iter().filter(|d| d.phase == phase) {
            delay += if d.duration.is_fixed() {
                d.duration.lo
            } else {
                self.rng.random_range(d.duration.lo..=d.duration.hi)
            };
        }
        if !delay.is_zero() {
            stats.fault(phase, FaultKind::Delay);
        }
        for d in f.drops.iter().filter(|d| d.phase == phase) {
            if self.rng.random_bool(d.probability) {
                stats.fault(phase, FaultKind::Drop);
                return (delay, Injected::Drop);
            }
        }
        for x in f.fails.iter().filter(|x| x.phase == phase) {
            if self.rng.random_bool(x.probability) {
                stats.fault(phase, FaultKind::Fail);
                return (delay, Injected::Fail(x.code));
            }
        }
        (delay, Injected::None)
    }

    pub fn tarpit(&self) -> Option<Duration> {
        self.faults.tarpit
    }

    /// Whether this message is to be acknowledged and thrown away (`--lose`).
    pub fn lose(&mut self) -> bool {
        self.faults.lose > 0.0 && self.rng.random_bool(self.faults.lose)
    }

    /// Whether this message is to be stored twice (`--duplicate`).
    pub fn duplicate(&mut self) -> bool {
        self.faults.duplicate > 0.0 && self.rng.random_bool(self.faults.duplicate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_flags() {
        assert_eq!(
            parse_fail("rcpt:451:0.02").unwrap(),
            Fail {
                phase: FaultPoint::Rcpt,
                code: 451,
                probability: 0.02
            }
        );
        assert_eq!(
            parse_fail("banner:421:1").unwrap().phase,
            FaultPoint::Connect
        );
        let d = parse_delay("data:5ms..20ms").unwrap();
        assert_eq!(d.duration.lo, Duration::from_millis(5));
        assert_eq!(d.duration.hi, Duration::from_millis(20));
        assert_eq!(parse_drop("dot:0.5").unwrap().phase, FaultPoint::Dot);
        for bad in [
            "rcpt:451",
            "rcpt:250:0.1",
            "rcpt:451:2",
            "nowhere:451:0.1",
            "x",
        ] {
            let e = parse_fail(bad).unwrap_err().to_string();
            assert!(e.starts_with("--fail"), "{e}");
            assert!(!e.contains('\n'));
        }
        assert!(parse_delay("data:soon").is_err());
        assert!(parse_drop("data:-1").is_err());
    }

    #[test]
    fn seeded_draws_repeat_and_are_counted() {
        let faults = Faults {
            fails: vec![parse_fail("rcpt:451:0.5").unwrap()],
            seed: Some(7),
            ..Default::default()
        };
        let stats = Stats::default();
        let draw = |n| {
            let mut s = faults.session(n);
            (0..100)
                .map(|_| s.draw(FaultPoint::Rcpt, &stats).1)
                .collect::<Vec<_>>()
        };
        let count = |v: &[Injected]| v.iter().filter(|i| **i == Injected::Fail(451)).count();
        let a = draw(3);
        let b = draw(4);
        assert_eq!(a, draw(3));
        assert_ne!(a, b);
        assert!((20..80).contains(&count(&a)), "{}", count(&a));
        let injected = 2 * count(&a) + count(&b);
        assert_eq!(
            stats.faults(FaultPoint::Rcpt, FaultKind::Fail),
            injected as u64
        );
        assert_eq!(stats.faults(FaultPoint::Mail, FaultKind::Fail), 0);
    }
}
