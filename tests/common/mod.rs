//! Helpers shared by the `serve_*` integration tests: start the embedded server, run
//! external clients (Python, swaks, smtp-source) with a time limit, talk raw TCP.
#![allow(dead_code)]

pub mod bed;
pub mod browser;
pub mod counting;
pub mod embedded;

/// The spate binary of this build.
pub const SPATE: &str = env!("CARGO_BIN_EXE_spate");

/// Runs `spate ARGS...` to completion (killed after two minutes).
pub async fn spate(args: &[&str]) -> Output {
    let args = args.iter().map(|s| s.to_string()).collect();
    run_tool(SPATE, args, Duration::from_secs(120)).await
}

/// How many samples a summary's phase `name` has (0 when it has none).
pub fn phase_count(s: &serde_json::Value, name: &str) -> u64 {
    s["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["phase"] == name)
        .map_or(0, |p| p["count"].as_u64().unwrap())
}

/// A results directory's summary.json. Every test that reads one also checks that the
/// run accounted for every unit: attempted = accepted + rejected + failed + unfinished,
/// in the totals and in every interval of intervals.csv, and the intervals add up to the
/// totals.
pub fn summary(dir: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("summary.json")).expect("summary.json");
    let s: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    assert_every_unit_counted(dir, &s);
    s
}

/// The classes a unit of work ends in, each exactly one.
const CLASSES: [&str; 4] = ["accepted", "rejected", "failed", "unfinished"];

/// attempted = the sum of the classes, in summary.json's totals and in each interval.
pub fn assert_every_unit_counted(dir: &std::path::Path, s: &serde_json::Value) {
    let Some(t) = s.get("totals").filter(|t| t.get("attempted").is_some()) else {
        return; // not a load run's summary (a sweep's, a scenario's)
    };
    let n = |k: &str| t[k].as_u64().unwrap_or(0);
    let classes: u64 = CLASSES.iter().map(|k| n(k)).sum();
    // Indeterminate units are failed ones whose end of data went out.
    assert!(n("indeterminate") <= n("failed"), "{}: {t}", dir.display());
    assert_eq!(
        n("attempted"),
        classes,
        "{}: attempted {} but accepted + rejected + failed + unfinished = {classes}: {t}",
        dir.display(),
        n("attempted")
    );
    if !dir.join("intervals.csv").exists() {
        return;
    }
    let mut cols = vec!["attempted"];
    cols.extend(CLASSES);
    let rows = column_rows(dir, &cols);
    for r in &rows {
        assert_eq!(
            r[0],
            r[1..].iter().sum::<u64>(),
            "{}: an interval {r:?}",
            dir.display()
        );
    }
    if s["complete"] == true {
        let sum: u64 = rows.iter().map(|r| r[0]).sum();
        assert_eq!(
            sum,
            n("attempted"),
            "{}: the intervals add up to the totals",
            dir.display()
        );
    }
}

/// Counter columns of a results directory's intervals.csv, row by row, in the order asked.
pub fn column_rows(dir: &std::path::Path, cols: &[&str]) -> Vec<Vec<u64>> {
    let text = std::fs::read_to_string(dir.join("intervals.csv")).expect("intervals.csv");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    let at: Vec<usize> = cols
        .iter()
        .map(|c| {
            header
                .iter()
                .position(|h| h == c)
                .unwrap_or_else(|| panic!("no column {c}"))
        })
        .collect();
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            at.iter()
                .map(|&i| {
                    f[i].parse::<u64>()
                        .unwrap_or_else(|_| panic!("not a count in {l}"))
                })
                .collect()
        })
        .collect()
}

/// The sums of counter columns of a results directory's intervals.csv, in the order asked.
pub fn column_sums(dir: &std::path::Path, cols: &[&str]) -> Vec<u64> {
    let mut sums = vec![0u64; cols.len()];
    for row in column_rows(dir, cols) {
        for (sum, v) in sums.iter_mut().zip(row) {
            *sum += v;
        }
    }
    sums
}

/// Errors of `kind` over a results directory's errors.jsonl (its classes, per second).
pub fn errors_of_kind(dir: &std::path::Path, kind: &str) -> u64 {
    let text = std::fs::read_to_string(dir.join("errors.jsonl")).expect("errors.jsonl");
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a JSON line"))
        .filter(|e| e["kind"] == kind)
        .map(|e| e["count"].as_u64().expect("a count"))
        .sum()
}

/// `spate xmpp --users 8 -n 16 --traffic presence` three times on fresh accounts
/// (`spate(dir, extra options)` runs one and gives its exit code, stdout and summary):
/// without a roster nothing is delivered; `--roster all` subscribes every pair once and
/// then every presence arrives; a second `--roster all` finds every roster full.
pub fn roster_all_subscribes_every_pair_once(
    spate: impl Fn(&str, &[&str]) -> (Option<i32>, String, serde_json::Value),
) {
    // No roster: a presence change has no contacts to reach.
    let (code, stdout, s) = spate("none", &[]);
    assert_eq!(code, Some(1), "{stdout}");
    assert_eq!(s["extra"]["xmpp"]["missing"], 16 * 7, "{stdout}");
    let (code, stdout, s) = spate("first", &["--roster", "all"]);
    assert_eq!(code, Some(0), "{stdout}");
    let r = &s["extra"]["xmpp"]["roster"];
    assert_eq!(r["subscriptions_made"], 8 * 7, "{r}");
    assert_eq!(r["subscriptions_refused"], 0, "{r}");
    assert_eq!(r["full_already"], 0, "{r}");
    assert!(r["how"].as_str().unwrap().starts_with("pairwise"), "{r}");
    assert_eq!(s["extra"]["xmpp"]["presence"]["delivered"], 16 * 7, "{s}");
    assert_eq!(phase_count(&s, "subscribe"), 8, "{stdout}");
    let (code, stdout, s) = spate("second", &["--roster", "all"]);
    assert_eq!(code, Some(0), "{stdout}");
    let r = &s["extra"]["xmpp"]["roster"];
    assert_eq!(
        (r["subscriptions_made"].as_u64(), r["full_already"].as_u64()),
        (Some(0), Some(8)),
        "{r}"
    );
    assert!(
        stdout.contains("8 sessions had every other already"),
        "{stdout}"
    );
    assert_eq!(s["extra"]["xmpp"]["delivered"], 16 * 7, "{s}");
}

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A test that cannot run on this machine fails, unless the user allowed skipping with
/// SPATE_ALLOW_SKIP=1; a skip is then written to SPATE_SKIP_LOG for `scripts/test` to
/// count in its last line. A test never passes by returning early on its own.
pub fn cannot_run(reason: &str) {
    if std::env::var_os("SPATE_ALLOW_SKIP").is_some_and(|v| v == "1") {
        eprintln!("SKIPPED: {reason}");
        if let Some(log) = std::env::var_os("SPATE_SKIP_LOG") {
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(log)
            {
                let _ = writeln!(f, "{reason}");
            }
        }
        return;
    }
    panic!(
        "cannot run: {reason}. `scripts/test` installs what the tests need (as root, on Debian); SPATE_ALLOW_SKIP=1 skips such tests instead"
    );
}

/// Is `tool` on the PATH? If not, the test cannot run (see [`cannot_run`]).
pub fn have(tool: &str) -> bool {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false);
    if !found {
        cannot_run(&format!("{tool} is not installed"));
    }
    found
}

#[derive(Debug)]
pub struct Output {
    pub ok: bool,
    /// The exit code; None when killed (by a signal or the time limit).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// A load run that ended as the exit-status rule says it should: 0, or 1 when the
    /// server accepted nothing and the run said so.
    pub fn ended(&self) -> bool {
        self.ok || (self.code == Some(1) && said_it_failed(&self.stdout))
    }
}

/// As [`Output::ended`], for a `std::process::Output`.
pub fn ended(o: &std::process::Output) -> bool {
    o.status.success()
        || (o.status.code() == Some(1) && said_it_failed(&String::from_utf8_lossy(&o.stdout)))
}

/// The run said why it exits 1: the server accepted nothing, or most units failed.
fn said_it_failed(stdout: &str) -> bool {
    stdout.contains("nothing accepted") || stdout.contains("most units failed")
}

/// Runs `spate ARGS...` (which include `-o DIR`) to its end and returns the run's
/// summary.json and stdout. It must end as the exit-status rule says (`strict`: exit 0
/// only, the server accepted something).
pub fn run_summary(args: &[&str], strict: bool) -> (serde_json::Value, String) {
    let o = std::process::Command::new(SPATE)
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        if strict {
            o.status.success()
        } else {
            ended(&o)
        },
        "{args:?}: {}\n{stdout}",
        String::from_utf8_lossy(&o.stderr)
    );
    let i = args.iter().position(|a| *a == "-o").expect("-o DIR");
    (summary(std::path::Path::new(args[i + 1])), stdout)
}

/// `spate verify RUN --maildir ROOT EXTRA...` to its end (at most 150 s), and the
/// verify.json it wrote.
pub fn verify_maildir(
    run: &std::path::Path,
    root: &str,
    extra: &[&str],
) -> (Output, serde_json::Value) {
    let mut args = vec!["verify", run.to_str().unwrap(), "--maildir", root];
    args.extend_from_slice(extra);
    let o = run_blocking(SPATE, &args, &[], Duration::from_secs(150));
    let text = std::fs::read_to_string(run.join("verify.json"))
        .unwrap_or_else(|e| panic!("verify.json: {e}\n{o:?}"));
    (o, serde_json::from_str(&text).unwrap())
}

/// Runs a program to completion (killed after `limit`), from a blocking thread.
pub async fn run_tool(program: &str, args: Vec<String>, limit: Duration) -> Output {
    run_tool_env(program, args, Vec::new(), limit).await
}

/// [`run_tool`] with these environment variables set for the program.
pub async fn run_tool_env(
    program: &str,
    args: Vec<String>,
    env: Vec<(String, String)>,
    limit: Duration,
) -> Output {
    let program = program.to_string();
    tokio::task::spawn_blocking(move || run_blocking(&program, &args, &env, limit))
        .await
        .unwrap()
}

/// Runs a program to completion on this thread (killed after `limit`), with these
/// environment variables set for it: for tests with no runtime of their own.
pub fn run_blocking<A: AsRef<std::ffi::OsStr>>(
    program: &str,
    args: &[A],
    env: &[(String, String)],
    limit: Duration,
) -> Output {
    let mut child = Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = wait_bounded(&mut child, limit);
    let stdout = t_out.join().unwrap_or_default();
    let stderr = t_err.join().unwrap_or_default();
    if status.is_none() {
        eprintln!("{program} timed out after {limit:?}");
    }
    Output {
        ok: status.is_some_and(|s| s.success()),
        code: status.and_then(|s| s.code()),
        stdout,
        stderr,
    }
}

/// Waits for `child` to exit; after `limit` kills it (by its PID) and gives None.
pub fn wait_bounded(
    child: &mut std::process::Child,
    limit: Duration,
) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The arguments of shard `i` of `n` of an SMTP run against `target`: the shards start
/// together 2 s after the first one created `root/start`, and write `root/shard-I`.
pub fn shard_args(target: &str, i: usize, n: usize, root: &std::path::Path) -> Vec<String> {
    let (start, dir) = (root.join("start"), root.join(format!("shard-{i}")));
    [
        "smtp",
        target,
        "--shard",
        &format!("{i}/{n}"),
        "--start-at",
        "+2s",
        "--start-file",
        start.to_str().unwrap(),
        "-q",
        "-o",
        dir.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Runs a Python 3 script with arguments; the script prints its findings.
pub async fn python(script: &str, args: &[String]) -> Output {
    let mut a = vec!["-c".to_string(), script.to_string()];
    a.extend_from_slice(args);
    let o = run_tool("python3", a, Duration::from_secs(60)).await;
    if !o.ok {
        eprintln!("python stdout:\n{}\npython stderr:\n{}", o.stdout, o.stderr);
    }
    o
}

/// A raw line-oriented client for hostile and pipelining tests (blocking, with timeouts).
pub struct Raw {
    pub reader: BufReader<TcpStream>,
    pub stream: TcpStream,
}

impl Raw {
    pub fn connect(addr: SocketAddr) -> Raw {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Raw {
            reader: BufReader::new(stream.try_clone().unwrap()),
            stream,
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// One line, CRLF stripped; empty at EOF.
    pub fn line(&mut self) -> String {
        let mut s = String::new();
        let _ = self.reader.read_line(&mut s);
        s.trim_end().to_string()
    }

    /// A whole (multi-line) reply: its lines.
    pub fn reply(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        for _ in 0..100 {
            let l = self.line();
            let done = l.len() < 4 || l.as_bytes()[3] != b'-';
            lines.push(l);
            if done {
                break;
            }
        }
        lines
    }

    /// The last line of the next reply.
    pub fn last(&mut self) -> String {
        self.reply().pop().unwrap_or_default()
    }

    /// True when the server closed the connection (EOF within the read timeout).
    pub fn closed(&mut self) -> bool {
        let mut buf = [0u8; 256];
        for _ in 0..100 {
            match self.reader.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(_) => return false,
            }
        }
        false
    }
}

/// IMAP: the lines up to and including the completion of `tag` (or EOF / the read
/// timeout).
pub fn until_tag(c: &mut Raw, tag: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for _ in 0..100 {
        let l = c.line();
        let done = l.is_empty() || l.starts_with(&format!("{tag} "));
        lines.push(l);
        if done {
            break;
        }
    }
    lines
}

/// The number of values in each `*.hlog` of a results directory (every interval's
/// histogram decoded and counted), by file name.
pub fn hlog_counts(dir: &std::path::Path) -> std::collections::BTreeMap<String, u64> {
    use base64::Engine as _;
    let mut counts = std::collections::BTreeMap::new();
    let mut de = hdrhistogram::serialization::Deserializer::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.ends_with(".hlog") {
            continue;
        }
        let mut n = 0u64;
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            if line.is_empty() || line.starts_with('#') || line.starts_with('"') {
                continue;
            }
            let encoded = line.splitn(4, ',').nth(3).expect("4 fields");
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded.trim())
                .unwrap_or_else(|e| panic!("{}: {e}: {line}", path.display()));
            let h: hdrhistogram::Histogram<u64> = de
                .deserialize(&mut std::io::Cursor::new(bytes))
                .unwrap_or_else(|e| panic!("{}: {e}: {line}", path.display()));
            n += h.len();
        }
        counts.insert(name, n);
    }
    counts
}

/// `spate merge SHARDS... -o OUT`, run to completion on this thread.
pub fn merge(shards: &[std::path::PathBuf], out: &std::path::Path) -> Output {
    let mut args: Vec<&std::ffi::OsStr> = vec!["merge".as_ref()];
    args.extend(shards.iter().map(|d| d.as_os_str()));
    args.extend(["-o".as_ref(), out.as_os_str()]);
    run_blocking(SPATE, &args, &[], Duration::from_secs(60))
}

/// Checks that the merged results directory `merged` is exactly the sum of `shards`, one
/// run, and what the server counted: accepted messages equal `server_accepted` and the
/// shards' sum; every phase's histogram log (and summary count) the shards' sum.
pub fn assert_merge_adds_up(
    merged: &std::path::Path,
    shards: &[std::path::PathBuf],
    server_accepted: u64,
) {
    let m = summary(merged);
    let parts: Vec<serde_json::Value> = shards.iter().map(|d| summary(d)).collect();
    for (d, s) in shards.iter().zip(&parts) {
        assert_eq!(s["run_id"], m["run_id"], "{}: one run", d.display());
    }
    let accepted = |s: &serde_json::Value| s["totals"]["accepted"].as_u64().unwrap();
    assert!(server_accepted > 0, "the server accepted nothing");
    assert_eq!(accepted(&m), server_accepted, "merged = the server's count");
    assert_eq!(
        accepted(&m),
        parts.iter().map(accepted).sum::<u64>(),
        "merged = the sum of the shards'"
    );
    assert_eq!(m["extra"]["shards"].as_array().unwrap().len(), shards.len());
    let merged_logs = hlog_counts(merged);
    let mut summed = std::collections::BTreeMap::<String, u64>::new();
    for d in shards {
        for (name, n) in hlog_counts(d) {
            *summed.entry(name).or_default() += n;
        }
    }
    assert_eq!(merged_logs, summed, "each phase's histograms add up");
    assert!(merged_logs.get("transaction.hlog").is_some_and(|&n| n > 0));
    for p in m["phases"].as_array().unwrap() {
        let phase = p["phase"].as_str().unwrap();
        let sum: u64 = parts.iter().map(|s| phase_count(s, phase)).sum();
        assert_eq!(
            phase_count(&m, phase),
            sum,
            "{phase}: summary counts add up"
        );
    }
}

/// How many errors of `phase` with reply `code` a summary lists.
pub fn errors_of(s: &serde_json::Value, phase: &str, code: u64) -> u64 {
    s["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["phase"] == phase && e["code"] == code)
        .map(|e| e["count"].as_u64().unwrap())
        .sum()
}

/// Every message the embedded server stored carries a trace digest that matches its
/// body; returns how many were checked.
pub fn check_digests(server: &spate::serve::Running) -> usize {
    use spate::message::{body_digest, hex, split_message};
    let mut checked = 0;
    for (mailbox, _, _) in server.store.mailbox_counts() {
        server.store.with_mailbox(&mailbox, |mb| {
            for m in &mb.messages {
                let (head, body) = split_message(&m.data);
                let head = String::from_utf8_lossy(head);
                let digest = head
                    .split("digest=")
                    .nth(1)
                    .expect("a spate message")
                    .split(';')
                    .next()
                    .unwrap();
                assert_eq!(digest, hex(&body_digest(body)), "{mailbox}");
                checked += 1;
            }
        });
    }
    checked
}

/// A child process killed (and reaped) when dropped: a failed assertion never leaves it
/// running.
pub struct Kill(pub std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback port nothing listens on right now (bound, read, released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until something accepts connections on `addr`, at most `limit`.
pub fn wait_listen(addr: &str, limit: Duration) {
    let t0 = std::time::Instant::now();
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(t0.elapsed() < limit, "nothing listens on {addr}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `spate serve LISTEN 127.0.0.1:PORT EXTRA...` in a process of its own on a free port,
/// listening; the address, and the process (killed when dropped; its stdout, a few lines,
/// is piped for the test to read).
pub fn serve_process(listen: &str, extra: &[&std::ffi::OsStr]) -> (Kill, String) {
    let addr = format!("127.0.0.1:{}", free_port());
    let child = std::process::Command::new(SPATE)
        .args(["serve", listen, &addr])
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spate serve");
    let server = Kill(child);
    wait_listen(&addr, Duration::from_secs(10));
    (server, addr)
}

/// LMTP with refusals after the content: `spate serve --lmtp` refusing 10 % of the
/// recipients at the final dot (452), and `spate smtp --lmtp` sending it 400 messages to
/// 2 recipients each from 4 sessions, plus `extra`. Checks that every refusal the server
/// made is counted once, as a lost recipient and not a lost message, that the counts add
/// up to 800 recipients, and that every delivered body is intact; returns the summary and
/// the run's printed text. `phase` is where the final replies are timed (bdat or body).
pub async fn lmtp_refused_at_the_dot(extra: &[&str], phase: &str) -> (serde_json::Value, String) {
    use spate::serve::{self, faults};
    let mut cfg = serve::Config::loopback();
    cfg.listen.lmtp = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    cfg.listen.smtp = None;
    cfg.faults
        .fails
        .push(faults::parse_fail("dot:452:0.1").unwrap());
    cfg.faults.seed = Some(9);
    let server = serve::start(cfg).await.unwrap();
    let lmtp = server.addrs.lmtp.unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lmtp");
    let mut args = vec![
        "smtp",
        "--lmtp",
        &lmtp,
        "-u",
        "4",
        "-n",
        "400",
        "--rcpt",
        "2",
        "--to",
        "user{0..9}@example.test",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = spate(&args).await;
    assert!(o.ok, "{}", o.stderr);
    let s = summary(&out);
    let t = &s["totals"];
    let refused = errors_of(&s, phase, 452);
    assert!(refused > 20, "{refused}");
    assert_eq!(server.stats.rejections(452), refused);
    assert_eq!(
        t["rcpt_accepted"].as_u64().unwrap(),
        server.stats.recipients()
    );
    assert_eq!(t["rcpt_accepted"].as_u64().unwrap() + refused, 800);
    assert_eq!(check_digests(&server), server.stats.recipients() as usize);
    assert_eq!(
        server.stats.snapshot().messages_chunked,
        if phase == "bdat" { 400 } else { 0 }
    );
    server.shutdown().await;
    (s, o.stdout)
}

/// Headless Chromium, fresh profile, no network; returns (stdout, stderr).
pub fn chromium(
    extra: &[&str],
    page: &std::path::Path,
    profile: &std::path::Path,
) -> (String, String) {
    let mut cmd = std::process::Command::new("chromium");
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(extra)
    .arg(format!("file://{}", page.display()));
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start chromium");
    let id = child.id();
    // Bounded: a hung browser is killed (by its own pid) after 90 s.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(Duration::from_secs(90)) {
        Ok(o) => o.expect("chromium output"),
        Err(_) => {
            unsafe { libc::kill(id as i32, libc::SIGKILL) };
            panic!("chromium did not finish in 90 s");
        }
    };
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A JUnit file read with Python's xml.etree as JUnit readers do (testsuites > testsuite >
/// testcase with classname, name and time; a failure or skipped with a message), the
/// counts in its attributes checked. Prints "CASES [(failed case, message)...] [skipped]".
pub fn junit_cases(file: &std::path::Path) -> String {
    let check = r#"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "testsuites", root.tag
for s in root.findall("testsuite"):
    assert s.get("hostname"), s.attrib
cases = [c for s in root.findall("testsuite") for c in s.findall("testcase")]
for c in cases:
    assert c.get("classname") and c.get("name") and c.get("time") is not None, c.attrib
    float(c.get("time"))
fails = [(c.get("name"), c.find("failure").get("message")) for c in cases if c.find("failure") is not None]
skips = [c.get("name") for c in cases if c.find("skipped") is not None]
for c in cases:
    if c.find("skipped") is not None:
        assert c.find("skipped").get("message"), c.attrib
assert int(root.get("tests")) == len(cases), (root.get("tests"), len(cases))
assert int(root.get("failures")) == len(fails), (root.get("failures"), fails)
assert int(root.get("skipped")) == len(skips), (root.get("skipped"), skips)
print(len(cases), sorted(fails), skips)
"#;
    let file = file.to_str().unwrap();
    let py = run_blocking(
        "python3",
        &["-c", check, file],
        &[],
        Duration::from_secs(30),
    );
    assert!(py.ok, "{}{}", py.stdout, py.stderr);
    py.stdout
}

/// Where tests keep what a person looks at after a failure (screenshots):
/// target/test-artifacts.
pub fn artifacts() -> std::path::PathBuf {
    let p = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("test-artifacts");
    std::fs::create_dir_all(&p).unwrap();
    p
}

/// The embedded server's XMPP counters once no session is bound any more (every
/// session's end counted), or after 10 s.
pub async fn xmpp_settled(r: &spate::serve::Running) -> spate::serve::XmppCounts {
    let t = std::time::Instant::now();
    loop {
        let x = r.stats.xmpp();
        if x.sessions == 0 || t.elapsed() > Duration::from_secs(10) {
            return x;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
