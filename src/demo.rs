//! `spate demo`: the embedded server plus a canned workload, in one command.

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    crate::usage("spate demo is not built yet")
}
