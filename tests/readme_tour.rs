//! README.md's "A five-minute tour" runs as written, top to bottom, in a fresh directory:
//! every line of its shell blocks, in order, each exiting 0, and `spate verify` printing
//! its OK line.
//!
//! The tour is the section from its heading to the next heading (its `### Real servers on
//! loopback` subsection needs Postfix, Dovecot, Cyrus and Prosody installed: the
//! tests/*testbed*.rs tests use that bed). Each line runs under `sh -c` in a temporary directory, with this build's spate
//! first on the PATH, as a reader would type it, except for these changes:
//! - every `127.0.0.1:PORT` of the text becomes a free port chosen here, the same port
//!   number always the same free port (tests use no fixed ports);
//! - every `--duration X` / `-d X` becomes 1 s (the tour's 30 s runs and 2 s sweep steps
//!   would take minutes; no count is changed);
//! - `spate run scenarios/…` names the repository's `scenarios/` (the reader runs it from
//!   the clone, this test from its temporary directory);
//! - `spate serve … &` is started by the test, not by a shell, so that its PID is known:
//!   the test waits until each of its addresses answers before going on, and kills it when
//!   the test ends however it ends;
//! - `kill %N …` sends SIGTERM to the Nth server the tour started (as the shell's job %N
//!   would be), which must then exit 0.
//!
//! A line that is none of these (a spate command, possibly after `VAR=value`, or `printf`)
//! fails the test: a new kind of line must be taught here, not skipped.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::Kill;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const SPATE: &str = env!("CARGO_BIN_EXE_spate");
const HEADING: &str = "## A five-minute tour";

/// The longest any one line may take (on a busy machine; they take about a second).
const LIMIT: Duration = Duration::from_secs(120);

/// The lines of the tour's shell blocks, in order, continuations joined.
fn tour_lines(readme: &str) -> Vec<String> {
    let mut lines = readme.lines().skip_while(|l| *l != HEADING);
    assert!(lines.next().is_some(), "README.md has no `{HEADING}`");
    let (mut fence, mut out, mut pending) = (None::<String>, Vec::new(), String::new());
    for line in lines {
        if let Some(lang) = line.trim_start().strip_prefix("```") {
            fence = match fence {
                None => Some(lang.trim().to_string()),
                Some(_) => None,
            };
            continue;
        }
        match fence.as_deref() {
            None if line.starts_with('#') => break, // the next heading
            Some("sh" | "bash" | "shell" | "console") => {
                pending.push_str(line.trim_start_matches("$ "));
                if pending.ends_with('\\') {
                    pending.pop();
                    continue;
                }
                if !pending.trim().is_empty() {
                    out.push(std::mem::take(&mut pending));
                }
                pending.clear();
            }
            _ => {}
        }
    }
    assert!(pending.is_empty(), "a continuation line ends the tour");
    out
}

/// Free loopback ports, distinct: all bound at once, then released.
fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// Each `127.0.0.1:PORT` port of the lines, with the free port that stands for it.
fn port_map(lines: &[String]) -> Vec<(String, String)> {
    let mut ports: Vec<String> = Vec::new();
    for l in lines {
        for (at, _) in l.match_indices("127.0.0.1:") {
            let digits: String = l[at + 10..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if !digits.is_empty() && !ports.contains(&digits) {
                ports.push(digits);
            }
        }
    }
    let free = free_ports(ports.len());
    ports
        .into_iter()
        .zip(free)
        .map(|(p, f)| (format!("127.0.0.1:{p}"), format!("127.0.0.1:{f}")))
        .collect()
}

/// The line with the changes listed at the top of this file (but for how it is run).
fn rewrite(line: &str, ports: &[(String, String)]) -> String {
    // Ports: each address followed by a non-digit, so that :252 never eats :2525.
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find("127.0.0.1:") {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let end = 10
            + tail[10..]
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(tail.len() - 10);
        let (_, to) = ports
            .iter()
            .find(|(from, _)| *from == tail[..end])
            .expect("every port was mapped");
        out.push_str(to);
        rest = &tail[end..];
    }
    out.push_str(rest);
    // Durations: the word after --duration or -d.
    for flag in [" --duration ", " -d "] {
        let mut done = String::new();
        let mut rest = out.as_str();
        while let Some(at) = rest.find(flag) {
            let after = &rest[at + flag.len()..];
            let word = after.find(' ').unwrap_or(after.len());
            done.push_str(&rest[..at + flag.len()]);
            done.push_str("1s");
            rest = &after[word..];
        }
        done.push_str(rest);
        out = done;
    }
    out.replace(
        "spate run scenarios/",
        &format!("spate run {ROOT}/scenarios/"),
    )
}

/// The words of a line as the shell splits them, its comment left out.
fn words(line: &str) -> Vec<String> {
    shlex::split(line)
        .unwrap_or_else(|| panic!("not shell: {line}"))
        .into_iter()
        .take_while(|w| !w.starts_with('#'))
        .collect()
}

/// A spate command, possibly after VAR=value assignments (`SPATE_PASSWORD=secret spate …`).
fn is_spate(words: &[String]) -> bool {
    words
        .iter()
        .find(|w| !is_assignment(w))
        .is_some_and(|w| w == "spate")
}

/// `NAME=value`, as the shell takes it before a command.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// What one line left behind: its exit status and printed text.
struct Ran {
    ok: bool,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `line` with `sh -c` in `dir`, this build's spate first on the PATH.
fn shell(dir: &Path, n: usize, line: &str) -> Ran {
    let bin = Path::new(SPATE).parent().unwrap();
    let path = std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let (out, err) = (
        dir.join(format!(".line-{n}.out")),
        dir.join(format!(".line-{n}.err")),
    );
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(line)
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("SPATE_PASSWORD")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("sh");
    let status = common::wait_bounded(&mut child, LIMIT);
    Ran {
        ok: status.is_some_and(|s| s.success()),
        code: status.and_then(|s| s.code()),
        stdout: std::fs::read_to_string(out).unwrap_or_default(),
        stderr: std::fs::read_to_string(err).unwrap_or_default(),
    }
}

/// `spate serve ARGS` in `dir`, in the background; returns once every address of ARGS
/// answers.
fn serve(dir: &Path, n: usize, words: &[String]) -> Kill {
    let log = |ext| std::fs::File::create(dir.join(format!(".serve-{n}.{ext}"))).unwrap();
    let child = Command::new(SPATE)
        .args(&words[1..])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log("out"))
        .stderr(log("err"))
        .spawn()
        .expect("spate serve");
    let server = Kill(child);
    for w in words.iter().filter(|w| w.starts_with("127.0.0.1:")) {
        common::wait_listen(w, Duration::from_secs(30));
    }
    server
}

/// `kill %N`: SIGTERM to server N (from 1), which must stop and exit 0.
fn stop(dir: &Path, servers: &mut [Kill], job: &str) {
    let n: usize = job
        .strip_prefix('%')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("kill {job}: only %N job numbers are known here"));
    assert!(
        (1..=servers.len()).contains(&n),
        "kill %{n}: the tour started {} servers",
        servers.len()
    );
    let child = &mut servers[n - 1].0;
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on the PID of a child of ours that has not been waited for.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0, "kill %{n}");
    let status = common::wait_bounded(child, LIMIT);
    let said: String = ["out", "err"]
        .map(|ext| {
            std::fs::read_to_string(dir.join(format!(".serve-{n}.{ext}"))).unwrap_or_default()
        })
        .concat();
    assert!(
        status.is_some_and(|s| s.success()),
        "server %{n} did not stop cleanly on SIGTERM: {status:?}\n{said}"
    );
    assert!(said.contains("shutting down"), "server %{n} said:\n{said}");
}

#[test]
fn the_tour_runs_as_written() {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    let lines = tour_lines(&readme);
    assert!(lines.len() >= 10, "only {} lines in the tour", lines.len());
    let ports = port_map(&lines);
    let tmp = tempfile::tempdir().unwrap();
    let dir: PathBuf = tmp.path().to_path_buf();
    // Declared after `tmp`, dropped before it: the servers die before their directory goes.
    let mut servers: Vec<Kill> = Vec::new();
    let mut verified = 0;
    for (n, written) in lines.iter().enumerate() {
        let line = rewrite(written, &ports);
        let w = words(&line);
        let shown = format!("tour line {}: `{written}`\n  ran as `{line}`", n + 1);
        if w.last().is_some_and(|l| l == "&") {
            assert!(
                w.starts_with(&["spate".to_string(), "serve".to_string()]),
                "{shown}: only `spate serve … &` may run in the background"
            );
            servers.push(serve(&dir, servers.len() + 1, &w[..w.len() - 1]));
        } else if w.first().is_some_and(|c| c == "kill") {
            for job in &w[1..] {
                stop(&dir, &mut servers, job);
            }
        } else if is_spate(&w) || w.first().is_some_and(|c| c == "printf") {
            let r = shell(&dir, n + 1, &line);
            assert!(
                r.ok,
                "{shown}\nexited {:?}\nstdout:\n{}\nstderr:\n{}",
                r.code, r.stdout, r.stderr
            );
            if w.iter()
                .skip_while(|w| *w != "spate")
                .nth(1)
                .map(String::as_str)
                == Some("verify")
            {
                assert!(
                    r.stdout.lines().any(|l| l.starts_with("OK: all ")),
                    "{shown}\nprinted no OK line:\n{}",
                    r.stdout
                );
                verified += 1;
            }
        } else {
            panic!("{shown}\nthis test does not know how to run that line: teach it, or change the tour");
        }
    }
    assert!(verified >= 1, "the tour never runs spate verify");
    assert!(
        dir.join("spate-results/latest").exists(),
        "no spate-results/latest in the tour's directory"
    );
}
