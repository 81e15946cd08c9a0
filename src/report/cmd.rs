//! `spate report` and `spate compare`: the commands around the renderers.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;

use super::data::{Run, Sweep};

/// Options of `spate report`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "The report is one self-contained HTML file (inline SVG charts and CSS, no \
                  network needed): what ran, headline numbers, throughput, latency per phase \
                  over time and as a percentile plot, errors by class, delivery and server \
                  resources when present. A sweep directory (with sweep.csv) gets the sweep \
                  page: every metric against the swept parameter, saturation marked.\n\n\
                  Example: spate report spate-results/2026-11-22T10-00-00-smtp"
)]
pub struct ReportArgs {
    /// A results directory (of `spate smtp`, or a sweep directory; a directory of runs,
    /// like the demo's, gets a report in each).
    pub dir: PathBuf,

    /// Where to write the HTML (default: DIR/report.html).
    #[arg(long, short = 'o')]
    pub out: Option<PathBuf>,

    /// Print the text summary instead of writing HTML.
    #[arg(long)]
    pub text: bool,
}

/// Options of `spate compare`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Differences are against the first run. A difference is called \
                  \"within noise\" when the runs' per-interval spreads (mean ± one standard \
                  deviation of the one-second values) overlap.\n\n\
                  Examples:\n  spate compare before/ after/\n  \
                  spate compare physical/ virtual/ --html=compare.html"
)]
pub struct CompareArgs {
    /// Two or more results directories.
    #[arg(required = true, num_args = 2.., value_name = "DIR")]
    pub dirs: Vec<PathBuf>,

    /// Also write an HTML page with the charts overlaid (default file: ./compare.html).
    /// Give the file with an equals sign: --html=FILE.
    #[arg(long, num_args = 0..=1, require_equals = true, value_name = "FILE")]
    pub html: Option<Option<PathBuf>>,

    /// Print the comparison as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Renders the HTML report of `dir` (a run or a sweep) into `out`.
pub fn render_to(dir: &Path, out: &Path) -> anyhow::Result<()> {
    let html = if Sweep::is_sweep(dir) {
        super::sweep::render_sweep(&Sweep::read(dir)?)
    } else {
        super::html::render_run(&Run::read(dir)?)
    };
    crate::results::write_atomic(out, html.as_bytes())
        .with_context(|| format!("cannot write {}", out.display()))
}

/// Writes DIR/report.html; called at the end of every run.
pub fn write_report(dir: &Path) -> anyhow::Result<PathBuf> {
    let out = dir.join("report.html");
    render_to(dir, &out)?;
    Ok(out)
}

pub fn report_main(args: ReportArgs) -> anyhow::Result<ExitCode> {
    if !args.dir.is_dir() {
        return crate::usage(format!("{}: no such directory", args.dir.display()));
    }
    if args.text {
        let run = Run::read(&args.dir)?;
        print!("{}", super::text::render(&run.summary));
        return Ok(ExitCode::SUCCESS);
    }
    // A directory of runs (the demo's parts): one report in each.
    let subs = super::data::result_subdirs(&args.dir);
    if args.out.is_none()
        && !args.dir.join("summary.json").exists()
        && !Sweep::is_sweep(&args.dir)
        && !subs.is_empty()
    {
        for d in subs {
            println!("{}", write_report(&d)?.display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let out = args.out.unwrap_or_else(|| args.dir.join("report.html"));
    render_to(&args.dir, &out)?;
    println!("{}", out.display());
    Ok(ExitCode::SUCCESS)
}

pub fn compare_main(args: CompareArgs) -> anyhow::Result<ExitCode> {
    let mut runs = Vec::new();
    for d in &args.dirs {
        if !d.is_dir() {
            return crate::usage(format!("{}: no such directory", d.display()));
        }
        runs.push(Run::read(d)?);
    }
    let c = super::compare::compare(&runs);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&c)?);
    } else {
        print!("{}", super::compare::render_text(&c));
    }
    if let Some(file) = args.html {
        let file = file.unwrap_or_else(|| PathBuf::from("compare.html"));
        let html = super::compare::render_html(&c, &runs);
        crate::results::write_atomic(&file, html.as_bytes())
            .with_context(|| format!("cannot write {}", file.display()))?;
        println!("html: {}", file.display());
    }
    Ok(ExitCode::SUCCESS)
}
