//! `--settle MAX`: after every session has logged in (and its roster is built), the
//! traffic does not start until what the logins set off has passed: each login's
//! presence goes to every contact online, so N logins make the server send up to N²
//! presence stanzas, and on a busy server that storm lasts long after the last login
//! (ejabberd on two cores: 85 000–92 000 stanzas, 36–57 s at 140–170 % CPU for 300
//! sessions). Without it the run's measured window (`after_setup`: the monitor's CPU per
//! delivery, E5's cost per destination) holds the storm's work.
//!
//! Settled: the sessions together read at most [`quiet_rate`] stanzas a second for
//! [`QUIET_SECONDS`] seconds in a row, or MAX has passed (then it did not settle, and the
//! summary says so). One session watches; the others wait for its word.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Settings;

/// Seconds in a row the inbound rate must stay at or under [`quiet_rate`].
pub const QUIET_SECONDS: u32 = 2;

/// The inbound rate under which the sessions are taken to be quiet: one stanza a second
/// per 50 sessions, at least 5 (keepalives, a straggling presence).
pub fn quiet_rate(sessions: usize) -> u64 {
    (sessions as u64 / 50).max(5)
}

/// What the wait found: how long it took, the stanzas read meanwhile, and whether the
/// sessions became quiet before `max`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Settled {
    pub waited_s: f64,
    pub stanzas_read: u64,
    pub settled: bool,
    pub max_s: f64,
    pub rule: String,
}

/// Waits until the sessions are quiet (see the module), at most `max`; session 0 watches
/// and records the result in the ledger, the others wait for it. Ends early when the run
/// is stopped.
pub async fn wait(s: &Settings, id: usize, max: Duration) {
    if id != 0 {
        while s.ledger.settled().is_none() && !s.stop.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        return;
    }
    let t0 = tokio::time::Instant::now();
    let first = s.ledger.read_total.load(Ordering::Relaxed);
    let mut last = first;
    let mut quiet = 0;
    let limit = quiet_rate(s.sessions);
    let settled = loop {
        if s.stop.load(Ordering::SeqCst) {
            break false;
        }
        if t0.elapsed() >= max {
            break false;
        }
        tokio::time::sleep(Duration::from_secs(1).min(max.saturating_sub(t0.elapsed()))).await;
        let now = s.ledger.read_total.load(Ordering::Relaxed);
        let read = now - last;
        last = now;
        quiet = if read <= limit { quiet + 1 } else { 0 };
        if quiet >= QUIET_SECONDS {
            break true;
        }
    };
    s.ledger.settle(Settled {
        waited_s: t0.elapsed().as_secs_f64(),
        stanzas_read: last - first,
        settled,
        max_s: max.as_secs_f64(),
        rule: format!(
            "the sessions read at most {limit} stanzas a second for {QUIET_SECONDS} s in a row"
        ),
    });
}
