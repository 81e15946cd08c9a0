//! `spate serve`: the embedded mail server until Ctrl-C or SIGTERM.

use std::process::ExitCode;

use crate::ctx::Ctx;

/// The server's options (also a scenario's `[server]`).
pub use crate::serve::Args;

/// `spate serve`.
pub async fn run(args: Args, _ctx: &Ctx) -> anyhow::Result<ExitCode> {
    crate::serve::run(args).await
}
