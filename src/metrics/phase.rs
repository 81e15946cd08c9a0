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

/// What a phase is: its name (its histogram log is `NAME.hlog`) and what it times.
#[derive(Debug)]
pub struct PhaseDef {
    pub name: &'static str,
    pub times: &'static str,
}

/// A phase, as a value: cheap to copy, equal when the names are.
#[derive(Clone, Copy)]
pub struct Phase(&'static PhaseDef);

impl Phase {
    pub const fn new(def: &'static PhaseDef) -> Phase {
        Phase(def)
    }
    pub fn name(self) -> &'static str {
        self.0.name
    }
    /// What the phase times, in a line.
    pub fn describe(self) -> &'static str {
        self.0.times
    }
    /// The phase of `phases` named `name`.
    pub fn find(phases: &[Phase], name: &str) -> Option<Phase> {
        phases.iter().copied().find(|p| p.name() == name)
    }
}

impl Phase {
    /// The phase named `name` as a results directory names it (plan.json, summary.json,
    /// an hlog): the same value as the declared phase of that name. Each name is made
    /// once and kept for the life of the process; callers pass names a run declared.
    pub fn named(name: &str) -> Phase {
        use std::sync::Mutex;
        static NAMED: Mutex<Vec<&'static PhaseDef>> = Mutex::new(Vec::new());
        let mut named = NAMED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(def) = named.iter().find(|d| d.name == name) {
            return Phase(def);
        }
        let def: &'static PhaseDef = Box::leak(Box::new(PhaseDef {
            name: Box::leak(name.to_string().into_boxed_str()),
            times: "",
        }));
        named.push(def);
        Phase(def)
    }
}

/// Declares phases as constants: `phases! { pub EHLO => "ehlo", "EHLO to its reply"; }`.
macro_rules! phases {
    ($($vis:vis $id:ident => $name:literal, $doc:literal;)*) => {
        $(
            #[doc = $doc]
            $vis const $id: $crate::metrics::Phase =
                $crate::metrics::Phase::new(&$crate::metrics::PhaseDef { name: $name, times: $doc });
        )*
    };
}
pub(crate) use phases;

impl PartialEq for Phase {
    #[inline]
    fn eq(&self, other: &Phase) -> bool {
        std::ptr::eq(self.0, other.0) || self.0.name == other.0.name
    }
}
impl Eq for Phase {}
impl std::hash::Hash for Phase {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.name.hash(state);
    }
}
impl PartialOrd for Phase {
    fn partial_cmp(&self, other: &Phase) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Phase {
    fn cmp(&self, other: &Phase) -> std::cmp::Ordering {
        self.0.name.cmp(other.0.name)
    }
}
impl std::fmt::Debug for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
impl Serialize for Phase {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// The phases every run can have, whatever its protocol: the transport's and the
/// engine's.
impl Phase {
    pub const CONNECT: Phase = Phase::new(&PhaseDef {
        name: "connect",
        times: "TCP connect: the connect call to the server's SYN/ACK (the kernel's round-trip sample of the handshake; when a SYN had to be sent again, to when the connect was seen complete)",
    });
    pub const TLS: Phase = Phase::new(&PhaseDef {
        name: "tls",
        times: "TLS handshake (implicit TLS or after STARTTLS)",
    });
    pub const RESPONSE: Phase = Phase::new(&PhaseDef {
        name: "response",
        times: "scheduled start to final reply, incl. waiting and connecting",
    });
    pub const LAG: Phase = Phase::new(&PhaseDef {
        name: "lag",
        times: "how late a message started against its schedule (generator lag)",
    });
}

impl<'de> serde::Deserialize<'de> for Phase {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Phase, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Ok(Phase::named(&name))
    }
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
        const AGAIN: Phase = Phase::new(&PhaseDef {
            name: "one",
            times: "declared twice",
        });
        assert_eq!(ONE, AGAIN);
        assert_ne!(ONE, TWO);
        assert_eq!(TWO.describe(), "the second");
        assert_eq!(Phase::find(&[ONE, TWO], "two"), Some(TWO));
        assert_eq!(serde_json::to_string(&ONE).unwrap(), "\"one\"");
    }
}
