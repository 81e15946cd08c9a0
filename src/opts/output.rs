//! Where results go and how a run shows itself: the output options every load command
//! shares.

use serde::Serialize;

/// Where results go and how the run shows itself: shared by every load command.
#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct OutputArgs {
    /// Results directory (default: ./spate-results/<timestamp>-<command>).
    #[arg(long, short = 'o', help_heading = "Output")]
    pub out: Option<std::path::PathBuf>,
    /// Print nothing while running; only the final summary.
    #[arg(long, short = 'q', help_heading = "Output")]
    pub quiet: bool,
    /// Print progress even when stderr is not a terminal.
    #[arg(long, help_heading = "Output")]
    pub progress: bool,
    /// Live dashboard instead of the progress line: throughput, latency per phase, errors;
    /// q stops cleanly (results are still written).
    #[arg(long, help_heading = "Output")]
    pub tui: bool,
    /// After Ctrl-C or the end of the schedule, wait this long for work in flight.
    #[arg(long, default_value = "10s", help_heading = "Output")]
    pub grace: String,
    /// Seed for every random choice, for repeatable runs.
    #[arg(long, help_heading = "Output")]
    pub seed: Option<u64>,
}

impl OutputArgs {
    /// Live progress on stderr: asked for, or stderr is a terminal and not --quiet.
    pub fn progress_enabled(&self) -> bool {
        use std::io::IsTerminal;
        !self.quiet && (self.progress || std::io::stderr().is_terminal())
    }
}

/// `./spate-results/<timestamp>-<kind>`.
pub fn default_out(kind: &str) -> std::path::PathBuf {
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
    std::path::PathBuf::from("spate-results").join(format!("{stamp}-{kind}"))
}
