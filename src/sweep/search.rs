//! The search for the highest load that meets an objective, apart from running probes:
//! the load doubles from where it starts until a probe fails, then the gap between the
//! highest pass and the lowest failure is halved until it is within the precision. A
//! probe the generator could not make counts as a limit of the search, never as the
//! server's failure. `spate sweep --find-max` and `spate capacity` run it.

use serde::Serialize;

/// What a probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Pass,
    Fail,
    /// The generator was the limit: nothing is known of the server at this load.
    Generator,
}

impl Outcome {
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::Generator => "generator-bound",
        }
    }
}

/// The search, apart from running probes: which load to probe next.
#[derive(Debug, Clone)]
pub struct Search {
    /// The first load probed, and the highest.
    pub from: u64,
    pub up_to: u64,
    precision: f64,
    passes: Vec<u64>,
    /// The lowest load that failed.
    pub fail: Option<u64>,
    /// The lowest load the generator could not make.
    pub generator: Option<u64>,
}

impl Search {
    pub fn new(from: u64, up_to: u64, precision: f64) -> Search {
        Search {
            from: from.max(1),
            up_to: up_to.max(from.max(1)),
            precision,
            passes: Vec::new(),
            fail: None,
            generator: None,
        }
    }

    /// The lowest load that failed, or that the generator could not make.
    fn limit(&self) -> Option<u64> {
        match (self.fail, self.generator) {
            (Some(f), Some(g)) => Some(f.min(g)),
            (f, g) => f.or(g),
        }
    }

    /// The highest load that passed below every failure.
    pub fn best(&self) -> Option<u64> {
        let limit = self.limit();
        self.passes
            .iter()
            .copied()
            .filter(|p| limit.is_none_or(|l| *p < l))
            .max()
    }

    /// The next load to probe; None when the search is over.
    pub fn next(&self) -> Option<u64> {
        match (self.best(), self.limit()) {
            (None, None) => Some(self.from),
            (Some(p), None) => (p < self.up_to).then(|| p.saturating_mul(2).min(self.up_to)),
            // The first load already failed: lower.
            (None, Some(l)) => (l > 1).then_some(l / 2),
            (Some(p), Some(l)) => {
                let close = ((p as f64 * self.precision).ceil() as u64).max(1);
                (l - p > close).then(|| p + (l - p) / 2)
            }
        }
    }

    pub fn record(&mut self, value: u64, outcome: Outcome) {
        let min = |a: Option<u64>| Some(a.map_or(value, |a| a.min(value)));
        match outcome {
            Outcome::Pass => self.passes.push(value),
            Outcome::Fail => self.fail = min(self.fail),
            Outcome::Generator => self.generator = min(self.generator),
        }
    }
}
