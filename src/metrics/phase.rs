//! Phases. A phase is timed from the first byte of the command written to the last byte
//! of its complete reply, taken when that byte reached this host (the kernel's receive
//! timestamp, not when this process read it); pipelined groups get a phase of their own
//! rather than invented per-command times.
//!
//! There is no list of phases here: each protocol declares its own with [`phases!`]
//! next to its driver (and says which it times in `Driver::PHASES`), the engine and the
//! transport theirs. The recorder, the results and the reports take phases as values and
//! read their names and what they time from the value itself; a results directory names
//! them in plan.json.

use serde::Serialize;

super::word::word!(
    /// A phase, as a value: cheap to copy, equal when the names are (its histogram log is
    /// `NAME.hlog`; what it describes is what it times).
    Phase
);

/// Declares phases as constants: `phases! { pub EHLO => "ehlo", "EHLO to its reply"; }`.
macro_rules! phases {
    ($($t:tt)*) => { $crate::metrics::word::declare! { Phase: $($t)* } };
}
pub(crate) use phases;

// The phases every run can have, whatever its protocol: the transport's and the engine's.
super::word::common! { Phase:
    CONNECT => "connect", "TCP connect: the connect call to the server's SYN/ACK (the kernel's round-trip sample of the handshake; when a SYN had to be sent again, to when the connect was seen complete)";
    TLS => "tls", "TLS handshake (implicit TLS or after STARTTLS)";
    RESPONSE => "response", "scheduled start to final reply, incl. waiting and connecting";
    LAG => "lag", "how late a message started against its schedule (generator lag)";
}

/// A phase as a plan declares it: its name, what it times, and the interval log that
/// holds its histograms.
#[derive(Debug, Clone, Serialize)]
pub struct Declared {
    pub phase: Phase,
    pub times: &'static str,
    pub hlog: String,
}

impl Phase {
    /// The table of `phases` for plan.json.
    pub fn declare(phases: &[Phase]) -> Vec<Declared> {
        phases
            .iter()
            .map(|p| Declared {
                phase: *p,
                times: p.describe(),
                hlog: format!("{}.hlog", p.name()),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    phases! {
        ONE => "one", "the first";
        TWO => "two", "the second";
    }

    #[test]
    fn phases_are_equal_by_name_and_read_their_own_words() {
        const AGAIN: Phase = Phase::new(&crate::metrics::word::Def {
            name: "one",
            what: "declared twice",
        });
        assert_eq!(ONE, AGAIN);
        assert_ne!(ONE, TWO);
        assert_eq!(TWO.describe(), "the second");
        assert_eq!(Phase::find(&[ONE, TWO], "two"), Some(TWO));
        assert_eq!(serde_json::to_string(&ONE).unwrap(), "\"one\"");
    }
}
