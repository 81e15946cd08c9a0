//! Reports: pure functions of a results directory (text summary, HTML report, sweep page,
//! comparison). Nothing here follows a live run; the live views are in `ui`.

pub mod chart;
pub mod classes;
pub mod compare;
pub mod data;
pub mod html;
pub mod matrix;
pub mod scenario;
pub mod sweep;
pub mod text;

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use data::{Run, Sweep};

/// Renders the HTML report of `dir` (a run, a sweep, a scenario or a scenario matrix)
/// into `out`.
pub fn render_to(dir: &Path, out: &Path) -> anyhow::Result<()> {
    let html = if Sweep::is_sweep(dir) {
        sweep::render_sweep(&Sweep::read(dir)?)
    } else if matrix::is_matrix(dir) {
        matrix::render_matrix(dir)?
    } else if scenario::is_scenario(dir) {
        scenario::render_scenario(dir)?
    } else {
        html::render_run(&Run::read(dir)?)
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
