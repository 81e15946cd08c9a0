//! Logins that did not succeed: which are the server's refusals (for good, or for now),
//! what a session does after one (a back-off before the next try, or none ever), and the
//! units of a session whose login was refused for good.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{errors, failure, phase, Session};
use crate::engine::{Outcome, UnitReport};
use crate::session::Failure;

impl Session {
    /// A login that did not succeed: its failure recorded once, and what comes next
    /// decided (none for good after a refusal, else a back-off before the next try).
    /// The outcome of a unit that ended with it.
    pub(super) fn login_failed(&mut self, f: Failure, report: &mut UnitReport) -> Outcome {
        let refusal = refusal(&f);
        f.record(report);
        match refusal {
            Some(Refusal::ForGood) => {
                self.retry = None;
                if !self.refused {
                    self.refused = true;
                    self.s.refused.fetch_add(1, Ordering::SeqCst);
                }
                return Outcome::Rejected;
            }
            Some(Refusal::ForNow) | None => {}
        }
        // The dead writer stays, so that a later unit tries again.
        let backoff = self.retry.map_or(Duration::from_millis(100), |(_, b)| {
            (b * 2).min(Duration::from_secs(30))
        });
        self.retry = Some((tokio::time::Instant::now() + backoff, backoff));
        match refusal {
            Some(_) => Outcome::Rejected,
            None => Outcome::Failed,
        }
    }

    /// Waits until `at`, or the run's end if that comes first.
    pub(super) async fn until(&self, at: tokio::time::Instant) {
        while !self.s.stop.load(Ordering::SeqCst) && tokio::time::Instant::now() < at {
            let step = at.saturating_duration_since(tokio::time::Instant::now());
            tokio::time::sleep(step.min(STOP_POLL)).await;
        }
    }

    /// A unit of a session whose login the server refused for good: it has nothing to
    /// send with, and does not log in again (the account will not be let in later in the
    /// run; trying at every unit would count one refusal many times over and hammer the
    /// server). It is rejected at once (its response time is nothing of the server's),
    /// but it holds its place until the sessions that can send are done sending (or the
    /// run ends), so that a refused session neither spins through units nor takes the
    /// share of those that can send. When no session is left that could send, a run
    /// bounded by its count is done at once, one bounded by its duration at its end.
    pub(super) async fn refused_unit(&mut self, report: &mut UnitReport) -> Outcome {
        report.done();
        let s = &*self.s;
        let ready = || {
            let refused = s.refused.load(Ordering::SeqCst);
            let others_done = s.finishing.count() + refused >= s.sessions;
            s.stop.load(Ordering::SeqCst) || (others_done && (s.counted || refused < s.sessions))
        };
        while !ready() {
            tokio::time::sleep(STOP_POLL).await;
        }
        // Not a busy loop when every unit comes here at once.
        tokio::task::yield_now().await;
        let mut f = failure(
            phase::SEND,
            errors::NOT_LOGGED_IN,
            "the server refused this session's login (not tried again)",
        );
        f.fatal = false;
        f.record(report);
        Outcome::Rejected
    }
}

/// How often a session waiting for the run's end (a back-off, a refused session's unit)
/// looks whether it came: the engine sets it at most once a second.
const STOP_POLL: Duration = Duration::from_millis(20);

/// A login the server refused: for good (its SASL failure other than
/// `temporary-auth-failure`, a registration refused), or for now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    ForGood,
    ForNow,
}

/// Whether a login's failure is the server's refusal (RFC 6120 §6.5: every SASL
/// condition but `temporary-auth-failure` is final; XEP-0077: a registration error), and
/// of which kind; None when the login broke (transport, protocol, a stream error).
fn refusal(f: &Failure) -> Option<Refusal> {
    let for_now = match f.kind {
        k if k == errors::SASL => f.text == "temporary-auth-failure",
        k if k == errors::STANZA && f.phase == phase::REGISTER => {
            matches!(
                f.text.as_str(),
                "resource-constraint" | "service-unavailable"
            )
        }
        _ => return None,
    };
    Some(match for_now {
        true => Refusal::ForNow,
        false => Refusal::ForGood,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::ErrorKind;

    fn said(phase: crate::metrics::Phase, kind: ErrorKind, text: &str) -> Failure {
        Failure {
            text: text.into(),
            ..failure(phase, kind, text)
        }
    }

    #[test]
    fn sasl_failures_are_refusals_and_only_a_temporary_one_is_tried_again() {
        let sasl = |c| refusal(&said(phase::AUTH, errors::SASL, c));
        for c in ["not-authorized", "account-disabled", "credentials-expired"] {
            assert_eq!(sasl(c), Some(Refusal::ForGood), "{c}");
        }
        assert_eq!(sasl("temporary-auth-failure"), Some(Refusal::ForNow));
        let reg = |c| refusal(&said(phase::REGISTER, errors::STANZA, c));
        assert_eq!(reg("not-allowed"), Some(Refusal::ForGood));
        assert_eq!(reg("resource-constraint"), Some(Refusal::ForNow));
        // A login that broke is no refusal: a stream error, the transport, a bind error.
        assert_eq!(
            refusal(&said(phase::AUTH, errors::STREAM, "system-shutdown")),
            None
        );
        assert_eq!(
            refusal(&said(phase::STREAM, ErrorKind::CLOSED, "reset")),
            None
        );
        assert_eq!(
            refusal(&said(phase::BIND, errors::STANZA, "not-allowed")),
            None
        );
    }
}
