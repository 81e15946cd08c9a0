//! `spate verify` end to end: the embedded server writes a Maildir, `spate smtp` injects,
//! `spate verify` accounts; then the Maildir is damaged on purpose and every damage must be
//! reported. The last tests run against the real Postfix+Dovecot test bed when available.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::bed::Bed;
use serde_json::Value;
use spate::serve;

const SPATE: &str = env!("CARGO_BIN_EXE_spate");

fn spate(args: &[&str]) -> Output {
    Command::new(SPATE).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn verify_json(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("verify.json")).unwrap()).unwrap()
}

/// Every message file under ROOT/<address>/{new,cur}.
fn files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for mb in std::fs::read_dir(root).unwrap().flatten() {
        out.extend(mailbox_files(&mb.path()));
    }
    out.sort();
    out
}

/// Every message file of one Maildir.
fn mailbox_files(mb: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for sub in ["new", "cur"] {
        if let Ok(rd) = std::fs::read_dir(mb.join(sub)) {
            out.extend(rd.flatten().map(|e| e.path()));
        }
    }
    out.sort();
    out
}

fn seq_of(file: &Path) -> String {
    let data = String::from_utf8_lossy(&std::fs::read(file).unwrap()).to_string();
    let trace = data
        .lines()
        .find(|l| l.starts_with("X-Spate-Trace:"))
        .expect("trace header");
    trace
        .split("seq=")
        .nth(1)
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string()
}

/// Starts the embedded server writing a Maildir and injects `n` messages to it.
async fn inject(root: &Path, out: &Path, n: u64, extra: &[&str]) -> (serve::Running, Output) {
    let mut cfg = serve::Config::loopback();
    cfg.store.maildir = Some(root.to_path_buf());
    let server = serve::start(cfg).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let n = n.to_string();
    let mut args = vec![
        "smtp",
        &addr,
        "-n",
        &n,
        "-u",
        "4",
        "--rcpt",
        "1..3",
        "--to",
        "user{0..9}@example.test",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let o = tokio::task::spawn_blocking(move || Command::new(SPATE).args(&args).output().unwrap())
        .await
        .unwrap();
    (server, o)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_run_then_every_kind_of_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mail");
    let run = tmp.path().join("run");
    let (server, o) = inject(&root, &run, 60, &[]).await;
    assert!(o.status.success(), "{}", text(&o));
    server.shutdown().await;
    let (r, m) = (run.to_str().unwrap(), root.to_str().unwrap());

    // Clean: everything there once.
    let o = spate(&["verify", r, "--maildir", m]);
    assert!(o.status.success(), "{}", text(&o));
    let v = verify_json(&run);
    let expected = v["expected"].as_u64().unwrap();
    assert!(expected >= 60, "{v}");
    assert_eq!(v["delivered"], expected);
    assert_eq!(
        (
            &v["missing"],
            &v["duplicated"],
            &v["corrupted"],
            &v["foreign"]
        ),
        (&0.into(), &0.into(), &0.into(), &0.into())
    );
    assert_eq!(v["ok"], true);
    // The embedded server writes the file before its 250: the Maildir's times cannot
    // give latencies, and verify says so instead of reporting zeros.
    assert_eq!(v["latency"]["measurable"], false, "{v}");
    assert_eq!(v["latency"]["count"], 0);
    let out = text(&o);
    assert!(out.contains("not measurable from this source"), "{out}");
    assert_eq!(files(&root).len() as u64, expected);
    // One row per second; injected and delivered add up to the totals.
    let csv = std::fs::read_to_string(run.join("deliveries.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("t_s,time,injected,delivered"));
    let (mut inj, mut del) = (0, 0);
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        inj += f[2].parse::<u64>().unwrap();
        del += f[3].parse::<u64>().unwrap();
    }
    assert_eq!((inj, del), (expected, expected));
    // No latency log from times that cannot give latencies (the report draws none).
    assert!(!run.join("delivery.hlog").exists());

    // A foreign message is counted, and does not fail the check.
    let all = files(&root);
    let mb = all[0].parent().unwrap().parent().unwrap().to_path_buf();
    let foreign = mb.join("new").join("foreign.eml");
    std::fs::write(&foreign, "From: a@b\r\nSubject: not spate\r\n\r\nhello\r\n").unwrap();
    let o = spate(&["verify", r, "--maildir", m]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(verify_json(&run)["foreign"], 1);

    // Deleted: reported missing with its seq, exit 1, listed in missing.tsv.
    let victim = all[3].clone();
    let seq = seq_of(&victim);
    let saved = std::fs::read(&victim).unwrap();
    std::fs::remove_file(&victim).unwrap();
    let o = spate(&["verify", r, "--maildir", m]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains(&format!("\n  {seq}\t")), "{out}");
    assert!(out.contains("FAILED: 1 missing"), "{out}");
    let v = verify_json(&run);
    assert_eq!(
        (v["missing"].as_u64(), v["ok"].as_bool()),
        (Some(1), Some(false))
    );
    let tsv = std::fs::read_to_string(run.join("missing.tsv")).unwrap();
    assert_eq!(tsv.lines().count(), 2, "{tsv}");
    assert!(tsv.lines().nth(1).unwrap().starts_with(&format!("{seq}\t")));
    std::fs::write(&victim, &saved).unwrap();

    // Altered body: corrupted. A body with only its line endings changed is intact.
    let victim = all[5].clone();
    let saved = std::fs::read(&victim).unwrap();
    let lf = String::from_utf8_lossy(&saved).replace("\r\n", "\n");
    std::fs::write(&victim, lf.as_bytes()).unwrap();
    let o = spate(&["verify", r, "--maildir", m]);
    assert!(o.status.success(), "line endings only: {}", text(&o));
    let mut bad = saved.clone();
    let n = bad.len();
    bad[n - 5] ^= 0x01;
    std::fs::write(&victim, &bad).unwrap();
    let o = spate(&["verify", r, "--maildir", m]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let v = verify_json(&run);
    assert_eq!(
        (v["corrupted"].as_u64(), v["missing"].as_u64()),
        (Some(1), Some(0)),
        "{v}"
    );
    std::fs::write(&victim, &saved).unwrap();

    // A second copy: duplicated.
    let victim = &all[7];
    let copy = victim.parent().unwrap().join("copy-of-one");
    std::fs::copy(victim, &copy).unwrap();
    let out_dir = tmp.path().join("elsewhere");
    let o = spate(&[
        "verify",
        r,
        "--maildir",
        m,
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let v = verify_json(&out_dir);
    assert_eq!(
        (v["duplicated"].as_u64(), v["delivered"].as_u64()),
        (Some(1), Some(expected))
    );
    std::fs::remove_file(&copy).unwrap();

    // Back to clean.
    let o = spate(&["verify", r, "--maildir", m]);
    assert!(o.status.success(), "{}", text(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_until_a_late_delivery_arrives() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mail");
    let run = tmp.path().join("run");
    let (server, o) = inject(&root, &run, 20, &[]).await;
    assert!(o.status.success(), "{}", text(&o));
    server.shutdown().await;
    // Take one message away, put it back 1.5 s after verify started waiting.
    let victim = files(&root)[2].clone();
    let parked = tmp.path().join("parked");
    std::fs::rename(&victim, &parked).unwrap();
    let (r, m) = (run.to_str().unwrap(), root.to_str().unwrap());
    let t = Instant::now();
    let child = Command::new(SPATE)
        .args(["verify", r, "--maildir", m, "--wait", "20s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::rename(&parked, &victim).unwrap();
    let o = child.wait_with_output().unwrap();
    let took = t.elapsed();
    assert!(o.status.success(), "{}", text(&o));
    assert!(took >= Duration::from_millis(1500), "{took:?}");
    assert!(
        took < Duration::from_secs(15),
        "did not stop when complete: {took:?}"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("delivered, 1 missing, waited"), "{err}");

    // Without the message and a short wait: gives up in time, exit 1.
    std::fs::remove_file(&victim).unwrap();
    let t = Instant::now();
    let o = spate(&["verify", r, "--maildir", m, "--wait", "1s"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(t.elapsed() >= Duration::from_secs(1) && t.elapsed() < Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_verify_after_smtp() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mail");
    let run = tmp.path().join("run");
    let src = format!("maildir:{}", root.display());
    let (server, o) = inject(&root, &run, 30, &["--verify", &src, "--verify-wait", "5s"]).await;
    server.shutdown().await;
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("results: "), "{out}");
    assert!(out.contains("OK: all"), "{out}");
    let v = verify_json(&run);
    assert_eq!(v["ok"], true);
    assert_eq!(v["delivered"], v["expected"]);
}

#[test]
fn usage_errors_and_sources_without_passwords() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().to_str().unwrap();
    // No sent.log: not the results of a run, bad input: one line, exit 2.
    let o = spate(&["verify", d, "--maildir", d]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("spate: ") && err.contains("sent.log"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    // No source at all: usage, exit 2.
    assert_eq!(spate(&["verify", d]).status.code(), Some(2));
    std::fs::write(
        tmp.path().join("sent.log"),
        "# spate sent log v1 run=x\nseq\taccepted_at\tdigest\tbytes\tfrom\trecipients\n",
    )
    .unwrap();
    // An IMAP source without passwords: usage, exit 2, saying where passwords come from.
    let o = Command::new(SPATE)
        .args(["verify", d, "--source", "imap://127.0.0.1:1143"])
        .env_remove("SPATE_PASSWORD")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--users-file"));
    let o = spate(&["verify", d, "--source", "gopher://x"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let rules = tmp.path().join("rules");
    std::fs::write(&rules, "bounce per=sometimes\n").unwrap();
    let o = spate(&[
        "verify",
        d,
        "--maildir",
        d,
        "--rules",
        rules.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("line 1"));
    // The help teaches the rules format and the exit status.
    let help = String::from_utf8_lossy(&spate(&["verify", "--help"]).stdout).to_string();
    assert!(
        help.contains("EXIT STATUS") && help.contains("undelivered"),
        "{help}"
    );
}

/// A run with `--verify maildir:` whose server refuses ends at once with the error: the
/// Maildir watch started before the run stops with it (it kept spate alive forever).
#[test]
fn a_refused_run_with_a_watched_maildir_ends() {
    let tmp = tempfile::tempdir().unwrap();
    let target = format!("127.0.0.1:{}", common::free_port());
    let mail = format!("maildir:{}", tmp.path().join("mail").display());
    let out = tmp.path().join("run");
    let args = [
        "smtp",
        &target,
        "-n",
        "5",
        "--verify",
        &mail,
        "-o",
        out.to_str().unwrap(),
    ];
    let t0 = Instant::now();
    let o = common::run_blocking(SPATE, &args, &[], Duration::from_secs(20));
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(o.stderr.contains("connection refused"), "{o:?}");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
}

/// Postfix accepts ghost@ (it is in its virtual mailbox table) but Dovecot's LMTP does not
/// know it: each ghost recipient bounces to the (local) sender, with the original headers
/// returned. spate verify must find every normal delivery in Dovecot's Maildirs and count
/// one bounce per ghost recipient with the bounce rule.
#[test]
fn postfix_dovecot_deliveries_and_bounces() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = Bed::up(
        &tmp.path().join("bed"),
        &["--users", "10", "--port-offset", "auto"],
    ) else {
        return;
    };
    let pf = bed.dir.join("postfix");
    let vmailbox = pf.join("vmailbox");
    let mut table = std::fs::read_to_string(&vmailbox).unwrap();
    table.push_str("ghost@example.test ghost@example.test/\n");
    std::fs::write(&vmailbox, table).unwrap();
    let o = Command::new("postmap")
        .args(["-c", pf.to_str().unwrap()])
        .arg(format!("hash:{}", vmailbox.display()))
        .output()
        .unwrap();
    assert!(o.status.success(), "postmap: {}", text(&o));
    let to = tmp.path().join("to.txt");
    let mut list: String = (0..10).map(|i| format!("user{i}@example.test\n")).collect();
    list.push_str("ghost@example.test\n");
    std::fs::write(&to, list).unwrap();
    let rules = tmp.path().join("bounce.rules");
    std::fs::write(
        &rules,
        "# unknown to Dovecot: bounced to the sender, original headers returned\n\
         bounce per=recipient to=ghost@example.test undelivered in=sender match=trace\n",
    )
    .unwrap();
    let run = tmp.path().join("run");
    let root = bed.dir.join("mail");
    let o = spate(&[
        "smtp",
        bed.var("SPATE_SMTP"),
        "-n",
        "200",
        "-u",
        "4",
        "--rcpt",
        "1..2",
        "--to-file",
        to.to_str().unwrap(),
        "--from",
        "user0@example.test",
        "-q",
        "-o",
        run.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let sent = std::fs::read_to_string(run.join("sent.log")).unwrap();
    let ghosts = sent.matches("ghost@example.test").count() as u64;
    assert!(
        ghosts > 0,
        "the random recipients never picked ghost: {sent}"
    );

    let (r, m, rl) = (
        run.to_str().unwrap(),
        root.to_str().unwrap(),
        rules.to_str().unwrap(),
    );
    let o = spate(&["verify", r, "--maildir", m, "--rules", rl, "--wait", "90s"]);
    assert!(o.status.success(), "{}", text(&o));
    let v = verify_json(&run);
    assert_eq!(v["delivered"], v["expected"], "{v}");
    assert_eq!(v["rules"][0]["expected"], ghosts, "{v}");
    assert_eq!(v["rules"][0]["found"], ghosts, "{v}");
    assert_eq!(v["foreign"], 0, "{v}");
    // Through a real queue and LMTP, delivery takes time; the file times show it.
    let p50 = v["latency"]["p50_us"].as_u64().unwrap();
    assert!(p50 > 100 && p50 < 60_000_000, "{v}");

    // Without the rule, the ghost recipients are missing and their bounces foreign.
    let o = spate(&[
        "verify",
        r,
        "--maildir",
        m,
        "--out",
        tmp.path().to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let v = verify_json(tmp.path());
    assert_eq!(v["missing"].as_u64(), Some(ghosts), "{v}");
    assert_eq!(v["foreign"].as_u64(), Some(ghosts), "{v}");

    // A message deleted from a Dovecot Maildir is missing, by seq; a lost bounce fails the rule.
    let victim = mailbox_files(&root.join("user3@example.test"))
        .into_iter()
        .find(|f| std::fs::read_to_string(f).is_ok_and(|s| s.contains("X-Spate-Trace:")))
        .expect("user3 got something");
    let seq = seq_of(&victim);
    std::fs::remove_file(&victim).unwrap();
    let bounce = mailbox_files(&root.join("user0@example.test"))
        .into_iter()
        .find(|f| std::fs::read_to_string(f).is_ok_and(|s| s.contains("Final-Recipient")))
        .expect("a bounce in the sender's mailbox");
    std::fs::remove_file(&bounce).unwrap();
    let o = spate(&["verify", r, "--maildir", m, "--rules", rl]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!("\n  {seq}\tuser3@example.test\t")),
        "{out}"
    );
    assert!(out.contains("rule bounce:"), "{out}");
    let v = verify_json(&run);
    assert_eq!(v["missing"], 1, "{v}");
    assert_eq!(v["rules"][0]["found"].as_u64(), Some(ghosts - 1), "{v}");
    drop(bed);
}

/// E1-style derived messages: one acceptance notice per message back to the sender,
/// naming the original in In-Reply-To. Crafted here (the embedded server sends none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notice_rule_counts_replies_by_message_id() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mail");
    let run = tmp.path().join("run");
    let (server, o) = inject(&root, &run, 15, &[]).await;
    assert!(o.status.success(), "{}", text(&o));
    server.shutdown().await;
    let sent = std::fs::read_to_string(run.join("sent.log")).unwrap();
    let run_id = sent
        .lines()
        .next()
        .unwrap()
        .split("run=")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let seqs: Vec<&str> = sent
        .lines()
        .skip(2)
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    assert_eq!(seqs.len(), 15);
    let inbox = root.join("spate@example.test").join("new");
    std::fs::create_dir_all(&inbox).unwrap();
    for s in &seqs {
        std::fs::write(
            inbox.join(format!("notice-{s}")),
            format!(
                "From: robot@example.test\r\nSubject: Accepted: your message\r\n\
                 In-Reply-To: <{s}.{run_id}@spate.invalid>\r\n\r\nAccepted.\r\n"
            ),
        )
        .unwrap();
    }
    let rules = tmp.path().join("rules");
    std::fs::write(
        &rules,
        "notice per=message in=sender match=in-reply-to subject=accepted:*\n",
    )
    .unwrap();
    let (r, m, rl) = (
        run.to_str().unwrap(),
        root.to_str().unwrap(),
        rules.to_str().unwrap(),
    );
    let o = spate(&["verify", r, "--maildir", m, "--rules", rl]);
    assert!(o.status.success(), "{}", text(&o));
    let v = verify_json(&run);
    assert_eq!(v["rules"][0]["expected"], 15, "{v}");
    assert_eq!(v["rules"][0]["found"], 15, "{v}");
    assert_eq!(v["foreign"], 0, "{v}");
    // A lost notice fails the rule; a notice in the wrong mailbox is misplaced.
    let elsewhere = root.join("someone@example.test").join("new");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::rename(
        inbox.join(format!("notice-{}", seqs[0])),
        elsewhere.join("misplaced-notice"),
    )
    .unwrap();
    let o = spate(&["verify", r, "--maildir", m, "--rules", rl]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let v = verify_json(&run);
    assert_eq!(
        (&v["rules"][0]["found"], &v["rules"][0]["misplaced"]),
        (&14.into(), &1.into()),
        "{v}"
    );
    assert!(String::from_utf8_lossy(&o.stdout)
        .contains("FAILED: rule notice: 14 of 15 found, 1 misplaced"));
}

/// A message of this run found in a mailbox it was not sent to is misdelivered (and
/// missing where it belongs): the check fails and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_in_the_wrong_mailbox_is_misdelivered() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mail");
    let run = tmp.path().join("run");
    let (server, o) = inject(&root, &run, 20, &[]).await;
    assert!(o.status.success(), "{}", text(&o));
    server.shutdown().await;
    // Move one delivered file into a mailbox no message of the run went to.
    let file = files(&root)[0].clone();
    let stranger = root.join("stranger@example.test").join("new");
    std::fs::create_dir_all(&stranger).unwrap();
    std::fs::rename(&file, stranger.join(file.file_name().unwrap())).unwrap();
    let (r, m) = (run.to_str().unwrap(), root.to_str().unwrap());
    let o = spate(&["verify", r, "--maildir", m]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let v = verify_json(&run);
    assert_eq!(
        (v["misdelivered"].as_u64(), v["unlogged"].as_u64()),
        (Some(1), Some(0)),
        "{v}"
    );
    assert_eq!(v["missing"], 1);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("1 misdelivered"),
        "{}",
        text(&o)
    );
}

/// Runs `cmd` until its stderr shows the verify wait's progress line, then sends it
/// SIGTERM (by its PID) and waits for it to exit, bounded: a wait that does not hear the
/// signal would go on for the whole `--verify-wait` (10 minutes here).
fn term_during_the_wait(cmd: &mut Command) -> (Option<i32>, String) {
    use std::io::{BufRead, BufReader};
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut err = String::new();
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("no verify progress line: {err}"));
        err.push_str(&line);
        err.push('\n');
        if line.starts_with("verify: ") && line.contains(" missing, waited ") {
            break;
        }
    }
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still waiting for deliveries 120 s after SIGTERM: {err}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(5)) {
        err.push_str(&line);
        err.push('\n');
    }
    (status.code(), err)
}

/// SIGTERM while `spate smtp --verify-wait` waits for deliveries (here: a Maildir nothing
/// is delivered to) ends the wait: verify.json is written, with every delivery not found
/// listed as missing, the verdict INCOMPLETE (not judged lost) and why. It used to be
/// unheard: the load's signal listener was gone, and the wait went on to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_the_verify_wait_and_writes_what_was_found() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mail");
    let elsewhere = tmp.path().join("nothing-arrives-here");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let mut cfg = serve::Config::loopback();
    cfg.store.maildir = Some(root.clone());
    let server = serve::start(cfg).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let run = tmp.path().join("run");
    let src = format!("maildir:{}", elsewhere.display());
    let mut cmd = Command::new(SPATE);
    cmd.args(["smtp", &addr, "-n", "12", "-u", "2", "-q"])
        .args(["--to", "user{0..3}@example.test"])
        .args(["--verify", &src, "--verify-wait", "10m", "-o"])
        .arg(&run);
    let (code, err) = tokio::task::spawn_blocking(move || term_during_the_wait(&mut cmd))
        .await
        .unwrap();

    // A run stopped by SIGTERM during its load does not wait for deliveries at all: one
    // last read, and the verdict says why nothing more was waited for.
    let stopped = tmp.path().join("stopped");
    let mut child = Command::new(SPATE)
        .args(["smtp", &addr, "--rate", "20/s", "--duration", "10m", "-q"])
        .args(["--to", "user{0..3}@example.test"])
        .args(["--verify", &src, "--verify-wait", "10m", "-o"])
        .arg(&stopped)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !stopped.join("sent.log").is_file()
        || std::fs::metadata(stopped.join("sent.log")).unwrap().len() < 200
    {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "the load never began"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > Duration::from_secs(240) {
            let _ = child.kill();
            panic!("spate smtp went on after SIGTERM");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    server.shutdown().await;
    assert_eq!(status.code(), Some(143));
    let v = verify_json(&stopped);
    assert!(v["expected"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["missing"], v["expected"], "{v}");
    assert_eq!(
        v["wait_cut_short"], "the run was stopped by SIGTERM: no wait for deliveries",
        "{v}"
    );
    assert_eq!(code, Some(1), "{err}");
    let v = verify_json(&run);
    assert_eq!(v["expected"], 12, "{v}");
    assert_eq!(v["missing"], 12, "{v}");
    assert_eq!(v["ok"], false, "{v}");
    let cut = v["wait_cut_short"].as_str().unwrap_or_default();
    assert!(cut.starts_with("SIGTERM during the wait"), "{v}");
    let verdict = v["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("INCOMPLETE: the wait for deliveries was cut short")
            && verdict.contains("12 deliveries not found by then"),
        "{verdict}"
    );
    // The run's own files are complete beside it.
    assert!(run.join("summary.json").is_file() && run.join("missing.tsv").is_file());

    // `spate verify --wait` on the same run: the same, instead of dying on the signal
    // with nothing written.
    std::fs::remove_file(run.join("verify.json")).unwrap();
    let mut cmd = Command::new(SPATE);
    cmd.arg("verify")
        .arg(&run)
        .arg("--maildir")
        .arg(&elsewhere)
        .args(["--wait", "10m"]);
    let (code, err) = term_during_the_wait(&mut cmd);
    assert_eq!(code, Some(1), "{err}");
    let v = verify_json(&run);
    assert_eq!(v["missing"], 12, "{v}");
    assert!(
        v["wait_cut_short"]
            .as_str()
            .unwrap_or_default()
            .starts_with("SIGTERM during the wait"),
        "{v}"
    );
}
