//! Ctrl-C and SIGTERM, and what a run that they stopped exits with.

/// What stopped a run before its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Ctrl-C (SIGINT), or `q` in the live dashboard.
    Interrupt,
    /// SIGTERM.
    Terminate,
    /// `stop` from the live view (`--web`) or `spate ctl`: as SIGTERM.
    Control,
}

impl Signal {
    /// The shell's convention: 128 + the signal number.
    pub fn exit_code(self) -> u8 {
        match self {
            Signal::Interrupt => 130,
            Signal::Terminate | Signal::Control => 143,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Signal::Interrupt => "SIGINT",
            Signal::Terminate => "SIGTERM",
            Signal::Control => "control",
        }
    }

    /// The signal a summary's `interrupted_by` names.
    pub fn from_name(name: &str) -> Option<Signal> {
        match name {
            "SIGINT" | "q" => Some(Signal::Interrupt),
            "SIGTERM" => Some(Signal::Terminate),
            "control" => Some(Signal::Control),
            _ => None,
        }
    }
}

/// Ctrl-C and SIGTERM as one stream. Both are listened to from `new` on, so that a signal
/// that arrives between two calls of [`Signals::recv`] (while the caller draws or writes an
/// interval, say) is kept for the next call rather than lost.
pub struct Signals {
    int: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    pub fn new() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        Signals {
            int: signal(SignalKind::interrupt()).ok(),
            term: signal(SignalKind::terminate()).ok(),
        }
    }

    pub async fn recv(&mut self) -> Signal {
        let term = async {
            match &mut self.term {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        let int = async {
            match &mut self.int {
                Some(s) => {
                    s.recv().await;
                }
                // Could not listen from the start: listen now, as ctrl_c does (its error,
                // if it cannot either, stops the run as an interrupt would).
                None => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        };
        tokio::select! {
            _ = int => Signal::Interrupt,
            _ = term => Signal::Terminate,
        }
    }
}

impl Default for Signals {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A Ctrl-C that arrives while nobody awaits `recv` (the engine drawing or writing an
    /// interval) still stops the run at the next `recv`: a listener made per call would
    /// miss it.
    #[tokio::test]
    async fn a_signal_between_two_recv_calls_is_kept() {
        let mut s = Signals::new();
        // A first wait that ends without a signal, as a loop's other branch would end it.
        let quiet = tokio::time::timeout(Duration::from_millis(10), s.recv()).await;
        assert!(quiet.is_err());
        // SAFETY: kill with our own pid; SIGINT is handled by the listener made above.
        unsafe { libc::kill(libc::getpid(), libc::SIGINT) };
        // Let the runtime's driver take the signal in before anyone awaits it.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let got = tokio::time::timeout(Duration::from_secs(5), s.recv()).await;
        assert_eq!(got.ok(), Some(Signal::Interrupt));
    }
}
