//! The embedded mail server (`spate serve`).

pub mod store;

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    crate::usage("spate serve is not built yet")
}
