//! `spate report`: the HTML report (or the text summary) of a results directory.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::ctx::Ctx;
use crate::report::data::{Run, Sweep};
use crate::report::{render_to, write_report};

/// Options of `spate report`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "The report is one self-contained HTML file (inline SVG charts and CSS, no \
                  network needed): what ran, headline numbers, throughput, latency per phase \
                  over time and as a percentile plot, errors by class, delivery and server \
                  resources when present. A sweep directory (with sweep.csv) gets the sweep \
                  page: every metric against the swept parameter, saturation marked.\n\n\
                  EXAMPLES:\n  spate report spate-results/2026-11-22T10-00-00-smtp"
)]
pub struct Args {
    /// A results directory (of `spate smtp`, or a sweep directory; a directory of runs,
    /// like the demo's, gets a report in each).
    pub dir: PathBuf,

    /// Where to write the HTML (default: DIR/report.html), like `compare --html FILE`.
    #[arg(long, value_name = "FILE", alias = "out", short_alias = 'o')]
    pub html: Option<PathBuf>,

    /// Print the text summary instead of writing HTML.
    #[arg(long)]
    pub text: bool,
}

/// `spate report`.
pub fn run(args: Args, _ctx: &Ctx) -> anyhow::Result<ExitCode> {
    if !args.dir.is_dir() {
        return crate::usage(format!("{}: no such directory", args.dir.display()));
    }
    let a_run = args.dir.join("summary.json").is_file();
    // A scenario's directory: its own page (each step's report is its step's).
    let a_matrix = crate::report::matrix::is_matrix(&args.dir)
        || crate::report::scenario::is_scenario(&args.dir);
    if !a_run
        && !a_matrix
        && !Sweep::is_sweep(&args.dir)
        && crate::report::data::result_subdirs(&args.dir).is_empty()
    {
        return crate::usage(format!(
            "{}: no summary.json: not the results directory of a run",
            args.dir.display()
        ));
    }
    if args.text && a_matrix {
        let table = ["matrix.csv", "report.csv"]
            .iter()
            .map(|f| args.dir.join(f))
            .find(|p| p.is_file());
        match table {
            Some(p) => print!("{}", std::fs::read_to_string(p)?),
            None => println!("(this scenario has no report columns: see its report.html)"),
        }
        return Ok(ExitCode::SUCCESS);
    }
    if args.text {
        let run = Run::read(&args.dir)?;
        print!("{}", crate::report::text::render(&run.summary));
        return Ok(ExitCode::SUCCESS);
    }
    // A directory of runs (the demo's parts): one report in each.
    let subs = crate::report::data::result_subdirs(&args.dir);
    if args.html.is_none()
        && !args.dir.join("summary.json").exists()
        && !a_matrix
        && !Sweep::is_sweep(&args.dir)
        && !subs.is_empty()
    {
        for d in subs {
            println!("{}", write_report(&d)?.display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let out = args.html.unwrap_or_else(|| args.dir.join("report.html"));
    render_to(&args.dir, &out)?;
    println!("{}", out.display());
    Ok(ExitCode::SUCCESS)
}
