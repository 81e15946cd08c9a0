//! Where a command that builds a whole results directory (`spate merge`) may put it, and
//! how it replaces an earlier one without deleting anything it did not write: the target
//! is checked before anything is built, the new directory is built beside it, and an
//! earlier result is taken apart file by file (only files a results directory holds) just
//! before the new one is renamed into place.

use std::path::{Component, Path, PathBuf};

use crate::UsageError;

/// The files spate writes into a run's results directory (the run, its report, a later
/// `spate verify` of it): what `spate merge` may remove when it replaces an earlier
/// merge with `--overwrite`, and what a run refuses to write over in a directory that
/// holds no run. By exact name, so a user's `notes.csv` there is never one; a histogram
/// log is one when its phase is among `phases` (the run's), so a user's `backup.hlog`
/// is not.
pub fn is_results_file(name: &str, phases: &[String]) -> bool {
    const NAMES: [&str; 17] = [
        "plan.json",
        "summary.json",
        "intervals.csv",
        "postal.csv",
        "errors.jsonl",
        "sent.log",
        "report.html",
        "monitor.csv",
        "faults.jsonl",
        "metrics.json",
        "web.json",
        "control.jsonl",
        "verify.json",
        "deliveries.csv",
        "missing.tsv",
        "duplicates.tsv",
        "thresholds.json",
    ];
    let hlog = name.strip_suffix(".hlog").is_some_and(|stem| {
        matches!(stem, "classes" | "delivery") || phases.iter().any(|p| p == stem)
    });
    let monitor = name
        .strip_prefix("monitor.shard")
        .and_then(|r| r.strip_suffix(".csv"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    NAMES.contains(&name) || hlog || monitor
}

/// The phases the run in `dir` timed or declared (plan.json's table, summary.json's
/// phases): the names of its histogram logs.
pub fn declared_phases(dir: &Path) -> Vec<String> {
    let read = |file: &str| -> Option<serde_json::Value> {
        serde_json::from_slice(&std::fs::read(dir.join(file)).ok()?).ok()
    };
    let mut names = Vec::new();
    for doc in [read("plan.json"), read("summary.json")]
        .into_iter()
        .flatten()
    {
        for p in doc["phases"].as_array().into_iter().flatten() {
            if let Some(n) = p["phase"].as_str() {
                if !names.iter().any(|x| x == n) {
                    names.push(n.to_string());
                }
            }
        }
    }
    names
}

/// `p` made absolute and free of `.`/`..` and symlinks as far as it exists (the rest
/// appended as given), so that two spellings of one place compare equal.
fn resolved(p: &Path) -> std::io::Result<PathBuf> {
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()?.join(p)
    };
    let mut tail = Vec::new();
    let mut head = abs.as_path();
    loop {
        if let Ok(c) = std::fs::canonicalize(head) {
            let mut out = c;
            for part in tail.iter().rev() {
                match part {
                    Component::ParentDir => {
                        out.pop();
                    }
                    Component::Normal(s) => out.push(s),
                    _ => {}
                }
            }
            return Ok(out);
        }
        let Some(parent) = head.parent() else {
            return Ok(abs);
        };
        if let Some(c) = head.components().next_back() {
            tail.push(c);
        }
        head = parent;
    }
}

/// What a checked output directory held.
#[derive(Debug)]
pub struct Target {
    out: PathBuf,
    /// The files of the earlier result that the new one replaces (empty: nothing to remove).
    earlier: Vec<PathBuf>,
}

/// Checks `out` as the place of a new results directory built from `inputs` (directories
/// it reads), before anything is built. Refused, with one line: a path that is not a
/// directory; one that is, contains or lies inside an input (with or without
/// `overwrite`); a non-empty directory that is not a results directory; a results
/// directory without `overwrite`; and one that holds anything a results directory does
/// not (a subdirectory, a file of another kind), which is named.
pub fn check(out: &Path, inputs: &[PathBuf], overwrite: bool) -> Result<Target, UsageError> {
    let show = out.display();
    let here = resolved(out).map_err(|e| UsageError(format!("-o {show}: {e}")))?;
    for i in inputs {
        let Ok(input) = std::fs::canonicalize(i) else {
            continue; // named by the reader of the inputs
        };
        let why = if here == input {
            "that is one of the inputs"
        } else if input.starts_with(&here) {
            "it contains"
        } else if here.starts_with(&input) {
            "it lies inside"
        } else {
            continue;
        };
        let what = if here == input {
            String::new()
        } else {
            format!(" {}", i.display())
        };
        return Err(UsageError(format!(
            "-o {show}: {why}{what}; give a directory apart from the inputs (nothing written)"
        )));
    }
    let meta = match std::fs::symlink_metadata(out) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Target {
                out: out.to_path_buf(),
                earlier: Vec::new(),
            })
        }
        Err(e) => return Err(UsageError(format!("-o {show}: {e}"))),
    };
    if !meta.is_dir() {
        return Err(UsageError(format!(
            "-o {show} exists and is not a directory: give a new or empty directory"
        )));
    }
    let mut entries = Vec::new();
    let rd = std::fs::read_dir(out).map_err(|e| UsageError(format!("-o {show}: {e}")))?;
    for e in rd {
        let e = e.map_err(|e| UsageError(format!("-o {show}: {e}")))?;
        entries.push(e);
    }
    if entries.is_empty() {
        return Ok(Target {
            out: out.to_path_buf(),
            earlier: Vec::new(),
        });
    }
    let is_run = out.join("plan.json").is_file() && out.join("summary.json").is_file();
    if !is_run {
        return Err(UsageError(format!(
            "-o {show} is neither empty nor a results directory: not replacing what spate did not write"
        )));
    }
    if !overwrite {
        return Err(UsageError(format!(
            "-o {show} holds an earlier run: give another -o, or --overwrite to replace it"
        )));
    }
    let phases = declared_phases(out);
    let mut earlier = Vec::new();
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let plain = e.file_type().map(|t| t.is_file()).unwrap_or(false);
        if !plain || !is_results_file(&name, &phases) {
            return Err(UsageError(format!(
                "-o {show} holds {name}, which is not a results file: not replacing it (move it away, or give another -o)"
            )));
        }
        earlier.push(e.path());
    }
    Ok(Target {
        out: out.to_path_buf(),
        earlier,
    })
}

impl Target {
    /// A new, empty directory beside the target to build in (never an existing one).
    pub fn build_dir(&self) -> Result<PathBuf, UsageError> {
        let parent = self
            .out
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent)
            .map_err(|e| UsageError(format!("cannot create {}: {e}", parent.display())))?;
        let name = self
            .out
            .file_name()
            .map_or("results".into(), |n| n.to_string_lossy().into_owned());
        for n in 0..1000 {
            let tmp = parent.join(format!(".{name}.building-{}-{n}", std::process::id()));
            match std::fs::create_dir(&tmp) {
                Ok(()) => return Ok(tmp),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(UsageError(format!("cannot create {}: {e}", tmp.display()))),
            }
        }
        Err(UsageError(format!(
            "cannot find a free name beside {}",
            self.out.display()
        )))
    }

    /// Puts the directory built in `tmp` in the target's place: the earlier result's own
    /// files removed one by one, its directory removed only when that left it empty
    /// (anything that appeared since stays, and the new result is left in `tmp`, named).
    pub fn commit(self, tmp: &Path) -> Result<PathBuf, UsageError> {
        for f in &self.earlier {
            match std::fs::remove_file(f) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(UsageError(format!(
                        "cannot replace {}: {e}; the new result is in {}",
                        f.display(),
                        tmp.display()
                    )))
                }
            }
        }
        if self.out.exists() {
            std::fs::remove_dir(&self.out).map_err(|e| {
                UsageError(format!(
                    "cannot replace {}: {e} (something new is in it); the new result is in {}",
                    self.out.display(),
                    tmp.display()
                ))
            })?;
        }
        std::fs::rename(tmp, &self.out).map_err(|e| {
            UsageError(format!(
                "cannot create {}: {e}; the new result is in {}",
                self.out.display(),
                tmp.display()
            ))
        })?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_resolved_through_what_exists() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir(base.join("a")).unwrap();
        assert_eq!(resolved(&base.join("a/../b/c")).unwrap(), base.join("b/c"));
        assert_eq!(resolved(&base.join("a/./x")).unwrap(), base.join("a/x"));
    }

    /// The build directory a failed merge removes whole is always one it made: a
    /// directory already there under a build directory's name (a user's, another merge's)
    /// is never chosen, so never removed.
    #[test]
    fn a_build_directory_is_never_one_that_was_there() {
        let tmp = tempfile::tempdir().unwrap();
        let taken = tmp
            .path()
            .join(format!(".out.building-{}-0", std::process::id()));
        std::fs::create_dir(&taken).unwrap();
        std::fs::write(taken.join("mine.txt"), "keep").unwrap();
        let t = Target {
            out: tmp.path().join("out"),
            earlier: Vec::new(),
        };
        let b = t.build_dir().unwrap();
        assert_ne!(b, taken);
        assert_eq!(std::fs::read_dir(&b).unwrap().count(), 0, "made new, empty");
        // What a failed merge does with it leaves the other directory as it was.
        std::fs::remove_dir_all(&b).unwrap();
        assert_eq!(
            std::fs::read_to_string(taken.join("mine.txt")).unwrap(),
            "keep"
        );
    }

    #[test]
    fn only_results_files_may_be_replaced() {
        let phases = vec!["transaction".to_string(), "connect".to_string()];
        for ok in [
            "plan.json",
            "errors.jsonl",
            "transaction.hlog",
            "classes.hlog",
            "sent.log",
            "report.html",
            "monitor.shard3.csv",
        ] {
            assert!(is_results_file(ok, &phases), "{ok}");
        }
        for no in [
            "README",
            "notes.txt",
            ".hidden.json",
            "data.db",
            "notes.csv",
            "mine.json",
            "backup.hlog",
            "monitor.shardX.csv",
        ] {
            assert!(!is_results_file(no, &phases), "{no}");
        }
    }
}
