//! `spate merge`: the results directories of a sharded run's shards made into one.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::ctx::Ctx;

const EXAMPLES: &str = "Every shard of a run (spate ... --shard I/N) writes an ordinary results \
directory; spate merge adds them up into one, which report, compare, verify and scenario \
thresholds read unchanged:
- histograms add interval by interval from the shards' HdrHistogram logs (*.hlog), so the
  merged percentiles are exact, never averaged percentiles;
- counters add; intervals line up on wall-clock seconds (start the shards together with
  --start-at); sent logs concatenate (the shards' sequence numbers interleave);
- monitor series stay per shard (monitor.shardI.csv); summary.json's extra.shards lists
  every shard with its own totals.
A missing, duplicated, unfinished or truncated shard, or one of another run or command
line, is named, exit status 2, and nothing is written to -o (the merge is built beside it
and renamed into place at the end). Shards that were all stopped by `spate ctl ... stop`
(or their live views) merge as one run stopped so; what every shard was told is in the
merge's extra.control.
-o must be new, empty, or an earlier merge (with --overwrite). A merge never deletes what
it did not write: an -o that is a file, that contains or lies inside a shard, that holds
anything but a results directory's files, is refused before anything is built.

EXAMPLES:
  for i in 0 1 2 3; do
    spate smtp 127.0.0.1:25 --shard $i/4 --start-at +10s --start-file /shared/start \\
        --users 200 --duration 10m -o /shared/run/shard-$i &
  done; wait
  spate merge /shared/run/shard-* -o /shared/run/merged
  spate report /shared/run/merged";

/// Options of `spate merge`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXAMPLES)]
pub struct Args {
    /// The shards' results directories (every shard of the run, once each).
    #[arg(required = true, value_name = "SHARD_DIR")]
    pub dirs: Vec<PathBuf>,
    /// The merged results directory.
    #[arg(long, short = 'o', value_name = "DIR")]
    pub out: PathBuf,
    /// Replace -o when it holds an earlier run: only a results directory's own files are
    /// removed; one that holds anything else (a subdirectory, a README) is refused.
    #[arg(long)]
    pub overwrite: bool,
    /// Merge the shards that finished when others are missing, were killed or were
    /// interrupted: the result says it is partial (a warning, summary.json's
    /// extra.partial with the shards left out and why).
    #[arg(long)]
    pub partial: bool,
}

/// `spate merge`.
pub fn run(args: Args, _ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let m = crate::results::merge::merge(&args.dirs, &args.out, args.overwrite, args.partial)?;
    match crate::report::write_report(&m.dir) {
        Ok(_) => {}
        Err(e) => eprintln!("spate: warning: no HTML report: {e:#}"),
    }
    print(&m.summary, m.shards, &m.dir);
    Ok(ExitCode::SUCCESS)
}

/// What a merge made, in a few lines: its counts, its first latency phase, its warnings,
/// where its report and results are.
pub fn print(s: &crate::results::Summary, shards: usize, dir: &std::path::Path) {
    let t = &s.totals;
    println!(
        "merged {shards} shards of run {}: {:.1}s, attempted {}  accepted {}  rejected {}  failed {}",
        s.run_id, s.elapsed_s, t.attempted, t.accepted, t.rejected, t.failed
    );
    if let Some(p) = s.latency_phase() {
        println!(
            "  {}: {} values, p50 {} µs, p99 {} µs (from the merged histograms)",
            p.phase, p.count, p.p50_us, p.p99_us
        );
    }
    for w in &s.warnings {
        println!("warning: {w}");
    }
    let page = dir.join("report.html");
    if page.exists() {
        println!("report: {}", page.display());
    }
    println!("results: {}", dir.display());
}
