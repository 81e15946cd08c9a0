//! The clap pieces that client commands share, and their validation: transport (TLS,
//! `--ca`, `--insecure`, `--cert/--key`, `--bind`, `--timeout`), workload, output,
//! monitoring, and users files.

pub mod accounts;
pub mod monitor;
pub mod output;
pub mod shard;
pub mod transport;
pub mod workload;

pub use self::monitor::MonitorArgs;
pub use output::OutputArgs;
pub use transport::TransportArgs;
pub use workload::WorkloadArgs;

use serde::Serialize;

/// How each unit picks from a list (addresses, accounts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PickArg {
    Random,
    RoundRobin,
}
