//! `spate run SCENARIO.toml`: a scenario file's steps (or its `[matrix]` of runs).

use std::path::PathBuf;

use anyhow::Context as _;
use std::process::ExitCode;

use crate::ctx::Ctx;
use crate::scenario::{dry_run, execute, load_file, run_matrix};

#[derive(Debug, clap::Args)]
#[command(after_long_help = "FORMAT (in short):\n  \
    [server]                 options of `spate serve`; addresses ${server.smtp}, ${server.ca}, ...\n  \
    [vars]                   name = \"value\", ${name}; ${env:X:-default} ${out} ${step.NAME}\n  \
    [targets.X] [pools.X] [templates.X]   option sets a step takes with use = [\"X\", ...]\n  \
    [defaults.smtp]          options for every smtp step\n  \
    [[step]] command = \"smtp\"   + its long options as keys: users = 50, starttls = true\n  \
    [[step]] run = \"sh cmd\"     hook (timeout, background = true)\n  \
    [[step]] wait = \"5s\" / until_empty = \"/var/spool/postfix\"   pause / queue drain\n  \
    [[step]] + [[step.workload]] command = ..., weight = 2   run at once; rate/users/count split\n  \
    [[step]] command = \"smtp\" shards = 4   4 shards of one run at once, merged (spate merge)\n  \
    [matrix] procs = [1, 2, 4]   the whole scenario once per value, ${procs}\n  \
    thresholds = [\"p99(transaction) < 500ms\", \"errors.rate < 0.1%\", \"verify.missing == 0\"]\n  \
    thresholds = [\"p99(response) < 1s abort after 30s\"]   (a step's) stops its command when broken\n\n\
EXAMPLES:\n  \
    spate run scenarios/inject-embedded.toml\n  \
    spate run e1.toml --set smtp=127.0.0.1:25 --out results/e1\n  \
    spate run e1.toml --dry-run\n  \
    spate smtp 127.0.0.1:2525 --users 5 --count 100 --dump-scenario > s.toml\n\n\
Exit status: 0 every step succeeded and every threshold held; 1 a step failed of itself; \
99 only thresholds broke (the scenario's, a step's, or a step command's own); 2 the \
scenario is invalid (file:line:col: what was expected); 130/143 stopped by Ctrl-C/SIGTERM.\n\
Format reference: scenarios/README.md.")]
pub struct Args {
    /// The scenario file (TOML).
    pub file: PathBuf,
    /// Override a variable of [vars] or [matrix], NAME=VALUE (repeatable). A [matrix]
    /// variable set to one value runs only that value; NAME=[a,b,c] runs those values.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
    /// Results directory of the whole scenario; each step writes <OUT>/<NN>-<name>
    /// (default: ./spate-results/<timestamp>-<file name>).
    #[arg(long, short = 'o')]
    pub out: Option<PathBuf>,
    /// Write into --out even when it holds an earlier run (its files are replaced).
    #[arg(long)]
    pub overwrite: bool,
    /// Check the scenario and print each step's command line; run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also write the outcome as JUnit XML (for GitLab, Jenkins, GitHub test reporters):
    /// a test case per step and per threshold, a failure with the measured value and the
    /// limit; a [matrix] gives a test suite per combination
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
}

/// `spate run`.
pub async fn run(args: Args, ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let sc = load_file(&args.file, &args.set, &(ctx.commands)())?;
    let stem = args
        .file
        .file_stem()
        .map_or("scenario".into(), |s| s.to_string_lossy().to_string());
    if args.dry_run {
        let out = args.out.clone().unwrap_or_else(|| {
            PathBuf::from(crate::opts::output::RESULTS).join(format!("<timestamp>-{stem}"))
        });
        if !sc.matrix.is_empty() {
            return run_matrix(&sc, &args.file, &args.set, &out, true, false, ctx).await;
        }
        dry_run(&sc, &args.file, &out);
        return Ok(ExitCode::SUCCESS);
    }
    let out = crate::opts::output::results_dir(args.out.as_deref(), args.overwrite, &stem)?;
    let code = if sc.matrix.is_empty() {
        execute(&sc, out.clone(), args.overwrite, ctx).await?
    } else {
        run_matrix(&sc, &args.file, &args.set, &out, false, args.overwrite, ctx).await?
    };
    if let Some(file) = &args.junit {
        junit(file, &out, &stem)?;
    }
    Ok(code)
}

/// Writes `file` from the scenario.json of the run in `out` (or of each combination of a
/// matrix, in its subdirectory).
fn junit(file: &std::path::Path, out: &std::path::Path, stem: &str) -> anyhow::Result<()> {
    let read = |p: &std::path::Path| -> Option<serde_json::Value> {
        serde_json::from_str(&std::fs::read_to_string(p.join("scenario.json")).ok()?).ok()
    };
    let mut runs = Vec::new();
    match read(out) {
        Some(doc) => runs.push((stem.to_string(), doc)),
        None => {
            let mut dirs: Vec<_> = std::fs::read_dir(out)?
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.join("scenario.json").is_file())
                .collect();
            dirs.sort();
            for d in dirs {
                let name = d
                    .file_name()
                    .map_or(String::new(), |n| n.to_string_lossy().into());
                if let Some(doc) = read(&d) {
                    runs.push((format!("{stem} {name}"), doc));
                }
            }
        }
    }
    crate::scenario::junit::write(file, "spate run", &runs)
        .with_context(|| format!("--junit {}", file.display()))?;
    println!("junit: {}", file.display());
    Ok(())
}
