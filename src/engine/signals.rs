//! Ctrl-C and SIGTERM, and what a run that they stopped exits with.

/// What stopped a run before its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Ctrl-C (SIGINT), or `q` in the live dashboard.
    Interrupt,
    /// SIGTERM.
    Terminate,
}

impl Signal {
    /// The shell's convention: 128 + the signal number.
    pub fn exit_code(self) -> u8 {
        match self {
            Signal::Interrupt => 130,
            Signal::Terminate => 143,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Signal::Interrupt => "SIGINT",
            Signal::Terminate => "SIGTERM",
        }
    }

    /// The signal a summary's `interrupted_by` names.
    pub fn from_name(name: &str) -> Option<Signal> {
        match name {
            "SIGINT" | "q" => Some(Signal::Interrupt),
            "SIGTERM" => Some(Signal::Terminate),
            _ => None,
        }
    }
}

/// Ctrl-C and SIGTERM as one stream.
pub struct Signals {
    term: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    pub fn new() -> Self {
        Signals {
            term: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok(),
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
        tokio::select! {
            _ = tokio::signal::ctrl_c() => Signal::Interrupt,
            _ = term => Signal::Terminate,
        }
    }
}

impl Default for Signals {
    fn default() -> Self {
        Self::new()
    }
}
