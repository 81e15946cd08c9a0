//! `spate compare`: runs side by side, with differences and noise.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

use crate::ctx::Ctx;
use crate::report::data::Run;

/// Options of `spate compare`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Differences are against the first run. A difference is called \
                  \"within noise\" when the runs' per-interval spreads (mean ± one standard \
                  deviation of the one-second values) overlap.\n\n\
                  EXAMPLES:\n  spate compare before/ after/\n  \
                  spate compare physical/ virtual/ --html=compare.html"
)]
pub struct Args {
    /// Two or more results directories.
    #[arg(required = true, num_args = 2.., value_name = "DIR")]
    pub dirs: Vec<PathBuf>,

    /// Also write an HTML page with the charts overlaid (default file: ./compare.html);
    /// --html FILE or --html=FILE.
    #[arg(long, num_args = 0..=1, value_name = "FILE")]
    pub html: Option<Option<PathBuf>>,

    /// Print the comparison as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `spate compare`.
pub fn run(args: Args, _ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let mut runs = Vec::new();
    for d in &args.dirs {
        if !d.is_dir() {
            return crate::usage(format!("{}: no such directory", d.display()));
        }
        if !d.join("summary.json").is_file() {
            return crate::usage(format!(
                "{}: no summary.json: not the results directory of a run",
                d.display()
            ));
        }
        runs.push(Run::read(d)?);
    }
    let c = crate::report::compare::compare(&runs);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&c)?);
    } else {
        print!("{}", crate::report::compare::render_text(&c));
    }
    if let Some(file) = args.html {
        let file = file.unwrap_or_else(|| PathBuf::from("compare.html"));
        let html = crate::report::compare::render_html(&c, &runs);
        crate::results::write_atomic(&file, html.as_bytes())
            .with_context(|| format!("cannot write {}", file.display()))?;
        println!("html: {}", file.display());
    }
    Ok(ExitCode::SUCCESS)
}
