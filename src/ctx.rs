//! What a command gets from the one that started it, passed down explicitly: the command
//! line to record as its own, a way to run other spate command lines in-process (scenario
//! steps, the demo's parts), and the definition of every command's options (scenario files
//! are checked against it).

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;

/// The future of an in-process command.
pub type CommandFuture = Pin<Box<dyn Future<Output = anyhow::Result<ExitCode>> + Send>>;

/// Runs a spate command line (`argv[0]` is the program name) as if typed.
pub trait Runner: Send + Sync {
    fn run(&self, argv: Vec<String>) -> CommandFuture;
}

#[derive(Clone)]
pub struct Ctx {
    /// The command line recorded in plan.json and summary.json.
    pub command_line: Vec<String>,
    /// Runs other command lines in-process; each gets its own command line recorded.
    pub runner: Arc<dyn Runner>,
    /// Every command's options, as clap defines them.
    pub commands: fn() -> clap::Command,
}

impl Ctx {
    /// The context of a command started by this one (a scenario step, a demo part).
    pub async fn run(&self, argv: Vec<String>) -> anyhow::Result<ExitCode> {
        self.runner.run(argv).await
    }
}
