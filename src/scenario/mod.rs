//! `spate run SCENARIO.toml`: steps in sequence (commands, shell hooks, waits for a queue
//! to drain, parallel mixed workloads), an optional embedded server, thresholds that make
//! the run fail, and `--dump-scenario` to turn any command line into a scenario.
//!
//! The format (scenarios/README.md has examples):
//! - `[[step]]` with `command = "smtp"` (any subcommand): every other key is a long option
//!   of that command (`users = 50`, `starttls = true`, `rate = "200/s"`, a list for a
//!   repeatable option, the positional by its name: `target = "127.0.0.1:25"`). Special
//!   keys: `name`, `use` (named option sets), `thresholds`. The runner adds
//!   `--out <out>/<NN>-<name>` to commands that have `--out`.
//! - `[[step]]` with `run = "shell command"` (`timeout`, `background = true`): a hook.
//! - `[[step]]` with `wait = "5s"` and/or `until_empty = "/var/spool/postfix"` (`timeout`,
//!   `poll`): a pause, or a wait until a Postfix queue (incoming, active, deferred,
//!   maildrop) is empty; writes wait.json with `drain_s`.
//! - `[[step]]` with `[[step.workload]]` tables: commands run at once; the step's `rate`,
//!   `users` and `count` are split between them by `weight`.
//! - `[server]`: the embedded server (options of `spate serve`), started first, stopped
//!   last; its addresses are `${server.smtp}`, `${server.imap}`, ..., its CA `${server.ca}`.
//! - `[targets.X]`, `[pools.X]`, `[templates.X]`: option sets a step takes with
//!   `use = ["X", ...]`; `[defaults.smtp]`: options for every smtp step.
//! - `[vars]` with `${name}` anywhere in strings (`spate run --set name=value` overrides),
//!   `${env:NAME}` / `${env:NAME:-default}`, `${dir}` (the file's directory), `${out}`,
//!   `${step.NAME}` (that step's results directory).
//! - `thresholds = [...]` per step, or at the top level prefixed with a step name.
//!   `abort_on_fail = true` stops at the first failed threshold.
//! - `[matrix]`: variables with lists of values; the whole scenario runs per combination.

pub mod doc;
pub mod dump;
mod execute;
mod faults;
pub mod junit;
mod matrix;
pub mod model;
pub mod options;
mod plan;
pub mod run;
pub mod spec;
mod table;
pub mod threshold;
mod variables;
pub mod vars;

pub use execute::execute;
pub use matrix::run_matrix;
pub use plan::{dry_run, load_file, plan_lines, shell_word};
pub use spec::{load, Scenario};
