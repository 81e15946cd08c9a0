//! Proof under faults: a server that breaks its promises is caught to the message. The
//! embedded server acknowledges some messages and throws them away (`--lose`), stores
//! some twice (`--duplicate`), dies after storing some (`--drop stored:P`) and before
//! storing others (`--drop dot:P`). The client counts a message whose end of data went
//! out without a final reply as indeterminate; `spate verify` then finds exactly the
//! server's own counts: lost = missing, extra copies = duplicated, stored without an
//! answer = recovered, and the rest of the indeterminate ones not found.

mod common;

use std::path::Path;

use common::{spate, summary};
use spate::serve::{self, faults};

/// `spate verify RUN --maildir ROOT`, and the verify.json it wrote.
async fn verify(run: &Path, root: &Path) -> (common::Output, serde_json::Value) {
    verify_with(run, root, &[]).await
}

/// [`verify`] with more options.
async fn verify_with(
    run: &Path,
    root: &Path,
    extra: &[&str],
) -> (common::Output, serde_json::Value) {
    let (run, root) = (run.to_path_buf(), root.to_str().unwrap().to_string());
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        common::verify_maildir(&run, &root, &extra)
    })
    .await
    .unwrap()
}

/// A server storing into the Maildir `root` that lies on purpose: (lose, duplicate, seed)
/// and two drop points.
fn lying(root: &Path, (lose, duplicate, seed): (f64, f64, u64), drops: [&str; 2]) -> serve::Config {
    let mut cfg = serve::Config::loopback();
    cfg.store.maildir = Some(root.to_path_buf());
    cfg.faults.lose = lose;
    cfg.faults.duplicate = duplicate;
    cfg.faults.seed = Some(seed);
    for d in drops {
        cfg.faults.drops.push(faults::parse_drop(d).unwrap());
    }
    cfg
}

/// Lines of the run's sent log with this outcome (its last column).
fn sent_lines(dir: &Path, outcome: &str) -> usize {
    std::fs::read_to_string(dir.join("sent.log"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("seq\t"))
        .filter(|l| l.rsplit('\t').next() == Some(outcome))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lying_server_is_caught_to_the_message() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mail");
    let run = tmp.path().join("run");
    let cfg = lying(&root, (0.05, 0.05, 11), ["stored:0.05", "dot:0.04"]);
    let server = serve::start(cfg).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    // One recipient per message: a message and its delivery are the same count.
    let o = spate(&[
        "smtp",
        &addr,
        "-n",
        "400",
        "-u",
        "4",
        "--to",
        "user{0..9}@example.test",
        "-q",
        "-o",
        run.to_str().unwrap(),
    ])
    .await;
    let counts = server.stats.snapshot();
    server.shutdown().await;
    assert!(o.ok, "{o:?}");
    let s = summary(&run);
    let t = &s["totals"];
    let n = |k: &str| t[k].as_u64().unwrap();
    let fault = |k: &str| counts.faults.get(k).copied().unwrap_or(0);
    // Every drop came after the end of data: each such message is indeterminate, and
    // nothing else failed.
    let dropped = fault("stored:drop") + fault("dot:drop");
    assert!(
        fault("stored:drop") > 0 && fault("dot:drop") > 0,
        "{counts:?}"
    );
    assert_eq!(n("indeterminate"), dropped, "{t}\n{counts:?}");
    assert_eq!(n("failed"), dropped, "{t}");
    assert_eq!(n("accepted"), counts.messages_accepted, "{t}\n{counts:?}");
    assert!(
        o.stdout
            .contains(&format!("failed {dropped} ({dropped} indeterminate")),
        "{}",
        o.stdout
    );
    // The sent log keeps them, said as what they are.
    assert_eq!(sent_lines(&run, "indeterminate") as u64, dropped);
    assert_eq!(sent_lines(&run, "accepted") as u64, n("accepted"));

    let (v, j) = verify(&run, &root).await;
    // The server lost and duplicated messages: the check fails, and says by how much.
    assert_eq!(v.code, Some(1), "{v:?}");
    let g = |k: &str| j[k].as_u64().unwrap();
    assert!(counts.recipients_lost > 0 && counts.recipients_duplicated > 0);
    assert_eq!(g("missing"), counts.recipients_lost, "{j}\n{counts:?}");
    assert_eq!(
        g("duplicated"),
        counts.recipients_duplicated,
        "{j}\n{counts:?}"
    );
    // Each one named, as missing.tsv names the missing: one copy too many apiece here.
    let dups = std::fs::read_to_string(run.join("duplicates.tsv")).unwrap();
    let rows: Vec<Vec<&str>> = dups
        .lines()
        .skip(1)
        .map(|l| l.split('\t').collect())
        .collect();
    assert_eq!(rows.len() as u64, counts.recipients_duplicated, "{dups}");
    assert!(
        rows.iter()
            .all(|r| r.len() == 4 && r[2] == "2" && r[3].starts_with("the server: sent once")),
        "{dups}"
    );
    assert!(
        v.stdout.contains("duplicated (seq recipient copies;"),
        "{}",
        v.stdout
    );
    assert_eq!(g("indeterminate"), dropped, "{j}");
    assert_eq!(
        g("recovered"),
        counts.recipients_unacknowledged,
        "{j}\n{counts:?}"
    );
    // A message dropped after its store point may have been lost on purpose first.
    assert!(g("recovered") <= fault("stored:drop"), "{j}");
    assert_eq!(g("unlogged"), 0, "{j}");
    // compare shows every class too, from verify.json, and a run that was not checked
    // as not measured (-), not as 0.
    let unchecked = tmp.path().join("unchecked");
    let cp = std::process::Command::new("cp")
        .args(["-r", run.to_str().unwrap(), unchecked.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(cp.success());
    std::fs::remove_file(unchecked.join("verify.json")).unwrap();
    let (r, u) = (run.to_str().unwrap(), unchecked.to_str().unwrap());
    let c = spate(&["compare", r, u, "--json"]).await;
    assert!(c.ok, "{c:?}");
    let cj: serde_json::Value = serde_json::from_str(&c.stdout).unwrap();
    let row = |name: &str| {
        let m = cj["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("no {name} row: {cj}"));
        (m["values"][0].as_f64(), m["values"][1].as_f64())
    };
    let lost = counts.recipients_lost as f64;
    assert_eq!(row("lost"), (Some(lost), None), "{cj}");
    let dup = counts.recipients_duplicated as f64;
    assert_eq!(row("duplicated"), (Some(dup), None), "{cj}");
    let rec = counts.recipients_unacknowledged as f64;
    assert_eq!(row("recovered"), (Some(rec), None), "{cj}");
    assert_eq!(row("indeterminate").0, Some(dropped as f64), "{cj}");
    assert!(
        cj["note"]
            .as_str()
            .unwrap()
            .contains("run B has no verify.json"),
        "{cj}"
    );
    let c = spate(&["compare", r, u]).await;
    assert!(c.ok, "{c:?}");
    let line = |name: &str| {
        c.stdout
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name} line: {}", c.stdout))
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let l = line("lost (deliveries)");
    assert_eq!(
        l[2..4],
        [counts.recipients_lost.to_string(), "-".into()],
        "{}",
        c.stdout
    );
    assert!(
        line("misdelivered").contains(&"0".to_string()),
        "{}",
        c.stdout
    );
    assert_eq!(g("messages"), n("accepted"), "{j}");
    assert_eq!(
        g("delivered") + g("missing"),
        g("expected"),
        "every accepted delivery is found or lost: {j}"
    );
    assert!(
        v.stdout.contains(&format!(
            "{} found (recovered), {} not",
            counts.recipients_unacknowledged,
            dropped - counts.recipients_unacknowledged
        )),
        "{}",
        v.stdout
    );
}

/// A run that ends while a message's final reply is pending logs it as unfinished, and
/// verify finds it as recovered rather than as a message nobody sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_cut_off_by_the_run_end_is_recovered_not_unlogged() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mail");
    let run = tmp.path().join("run");
    let mut cfg = serve::Config::loopback();
    cfg.store.maildir = Some(root.clone());
    // Stored at once, answered 5 s later: past the run's end (1 s) and its grace (1 s).
    cfg.faults
        .delays
        .push(faults::parse_delay("stored:5s").unwrap());
    let server = serve::start(cfg).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let o = spate(&[
        "smtp",
        &addr,
        "-d",
        "1s",
        "--grace",
        "1s",
        "-u",
        "2",
        "--to",
        "user{0..9}@example.test",
        "-q",
        "-o",
        run.to_str().unwrap(),
    ])
    .await;
    server.shutdown().await;
    let s = summary(&run);
    let t = &s["totals"];
    assert_eq!(t["unfinished"], 2, "{t}\n{o:?}");
    assert_eq!(t["accepted"], 0, "{t}");
    assert_eq!(sent_lines(&run, "unfinished"), 2);
    let (v, j) = verify(&run, &root).await;
    assert_eq!(j["indeterminate"], 2, "{j}\n{v:?}");
    assert_eq!(j["recovered"], 2, "{j}");
    assert_eq!(j["unlogged"], 0, "{j}");
    assert_eq!(j["missing"], 0, "{j}");
    // Nothing was promised and nothing broken: the check passes.
    assert_eq!(v.code, Some(0), "{v:?}");
}

/// `spate serve --ack-before-store 1s --maildir DIR` answers 250 at once and writes each
/// message a second later; killed with SIGKILL mid-run (spate's own `--fault`), it loses
/// what it had acknowledged and not yet written. Its own account (acked lines without
/// their stored line) is exactly what verify finds missing, plus what the client never
/// heard acknowledged (indeterminate): nothing more, nothing less.
#[test]
fn a_server_that_acknowledges_before_storing_loses_exactly_what_it_says_when_killed() {
    use std::collections::BTreeSet;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mail");
    std::fs::create_dir_all(&root).unwrap();
    let (server, addr) = common::serve_process(
        "--smtp",
        &[
            "--maildir".as_ref(),
            root.as_os_str(),
            "--ack-before-store".as_ref(),
            "1s".as_ref(),
        ],
    );
    let pid = server.0.id();
    let run = tmp.path().join("run");
    let fault = format!("at=2s signal=KILL pid={pid}");
    let o = common::run_blocking(
        common::SPATE,
        &[
            "smtp",
            &addr,
            "--rate",
            "100/s",
            "-d",
            "4s",
            "--timeout",
            "2s",
            "--grace",
            "2s",
            "--to",
            "user{0..9}@example.test",
            "--fault",
            &fault,
            "-q",
            "-o",
            run.to_str().unwrap(),
        ],
        &[],
        std::time::Duration::from_secs(60),
    );
    assert!(o.code.is_some(), "{o:?}");
    drop(server);
    // The server's own account: copies acknowledged, and those written.
    let journal = std::fs::read_to_string(root.join(spate::serve::behind::JOURNAL)).unwrap();
    let seqs = |what: &str| -> BTreeSet<u64> {
        journal
            .lines()
            .filter_map(|l| l.strip_prefix(what))
            .filter_map(|v| v.split(';').find_map(|p| p.trim().strip_prefix("seq=")))
            .map(|s| s.parse().unwrap())
            .collect()
    };
    let thrown_away: BTreeSet<u64> = seqs("acked ")
        .difference(&seqs("stored "))
        .copied()
        .collect();
    assert!(
        thrown_away.len() > 20,
        "a second of acknowledged mail: {thrown_away:?}"
    );
    // The client's: what it heard acknowledged, and what it sent without hearing back.
    let sent = std::fs::read_to_string(run.join("sent.log")).unwrap();
    let outcome = |o: &str| -> BTreeSet<u64> {
        sent.lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with("seq\t"))
            .filter(|l| l.rsplit('\t').next() == Some(o))
            .map(|l| l.split('\t').next().unwrap().parse().unwrap())
            .collect()
    };
    let (accepted, indeterminate) = (outcome("accepted"), outcome("indeterminate"));
    assert!(
        thrown_away
            .iter()
            .all(|s| accepted.contains(s) || indeterminate.contains(s)),
        "every message the server threw away was sent to the end of its data"
    );
    let lost = thrown_away.intersection(&accepted).count() as u64;
    assert!(lost > 0);
    let (v, j) = common::verify_maildir(&run, root.to_str().unwrap(), &[]);
    assert_eq!(v.code, Some(1), "lost mail fails the check: {v:?}");
    assert_eq!(j["missing"].as_u64(), Some(lost), "{j}");
    assert_eq!(j["unlogged"], 0, "{j}");
    let s = summary(&run);
    assert_eq!(
        s["extra"]["faults"]["occurrences"][0]["applied"], true,
        "{s}"
    );
}

/// LMTP answers each recipient after the data: a server that acknowledges some of a
/// message's recipients and then dies leaves the others unknown, but those it did
/// acknowledge are promised. Each acknowledged recipient the server threw away (`--lose`)
/// is missing, exactly the server's own count, even when the message's other recipients'
/// replies never came (the whole message used to be filed as indeterminate, and such a
/// loss went unseen). Recipients without a reply of their own are counted apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lmtp_losses_are_caught_per_recipient() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mail");
    let run = tmp.path().join("run");
    let mut cfg = lying(&root, (0.05, 0.03, 9), ["stored:0.05", "dot:0.03"]);
    cfg.listen.smtp = None;
    cfg.listen.lmtp = Some("127.0.0.1:0".parse().unwrap());
    let server = serve::start(cfg).await.unwrap();
    let addr = server.addrs.lmtp.unwrap().to_string();
    let o = spate(&[
        "smtp",
        "--lmtp",
        &addr,
        "-n",
        "600",
        "-u",
        "4",
        "--rcpt",
        "1..3",
        "--to",
        "user{0..9}@example.test",
        "-q",
        "-o",
        run.to_str().unwrap(),
    ])
    .await;
    let counts = server.stats.snapshot();
    server.shutdown().await;
    assert!(o.ok, "{o:?}");
    let s = summary(&run);
    let unsure_rcpts = s["totals"]["rcpt_indeterminate"].as_u64().unwrap();
    // Some messages were cut off after some of their recipients' replies.
    assert!(unsure_rcpts > 0, "{}", s["totals"]);
    let sent = std::fs::read_to_string(run.join("sent.log")).unwrap();
    let marked = sent.matches(",?").count() + sent.matches("\t?").count();
    assert_eq!(marked as u64, unsure_rcpts, "{sent}");

    let (v, j) = verify(&run, &root).await;
    assert_eq!(v.code, Some(1), "{v:?}");
    let g = |k: &str| j[k].as_u64().unwrap();
    assert!(counts.recipients_lost > 0, "{counts:?}");
    assert_eq!(g("missing"), counts.recipients_lost, "{j}\n{counts:?}");
    assert_eq!(g("unsure_recipients"), unsure_rcpts, "{j}");
    assert_eq!(
        g("duplicated"),
        counts.recipients_duplicated,
        "{j}\n{counts:?}"
    );
    assert_eq!(g("unlogged"), 0, "{j}");
    assert!(v.stdout.contains("unsure rcpts"), "{}", v.stdout);
}

/// A message the MTA still holds in its queue when the check ends is not lost: `spate
/// verify --queue DIR` (and `--verify` with the run's `--monitor-queue`) finds its trace
/// header in the queue's files and counts it `still queued`, apart from missing; the
/// verdict is INCOMPLETE, not a loss. Here the queue is a Postfix-shaped directory holding
/// a copy of the messages the server threw away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_still_in_the_queue_is_not_called_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mail");
    let run = tmp.path().join("run");
    let mut cfg = serve::Config::loopback();
    cfg.store.maildir = Some(root.clone());
    cfg.faults.lose = 0.2;
    cfg.faults.seed = Some(5);
    let server = serve::start(cfg).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let o = spate(&[
        "smtp",
        &addr,
        "-n",
        "40",
        "--to",
        "user{0..4}@example.test",
        "-q",
        "-o",
        run.to_str().unwrap(),
    ])
    .await;
    let lost = server.stats.snapshot().recipients_lost;
    server.shutdown().await;
    assert!(o.ok, "{o:?}");
    assert!(lost > 1, "{lost}");
    let (_, j) = verify(&run, &root).await;
    assert_eq!(j["missing"].as_u64(), Some(lost), "{j}");
    // Queue files as Postfix keeps them (a hashed subdirectory of deferred), each with the
    // message's header lines; the first lost message is not there (really lost).
    let run_id = summary(&run)["run_id"].as_str().unwrap().to_string();
    let missing: Vec<u64> = std::fs::read_to_string(run.join("missing.tsv"))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split('\t').next().unwrap().parse().unwrap())
        .collect();
    let queue = tmp.path().join("postfix-queue");
    let deferred = queue.join("deferred").join("A");
    std::fs::create_dir_all(&deferred).unwrap();
    std::fs::create_dir_all(queue.join("active")).unwrap();
    for (i, seq) in missing.iter().enumerate().skip(1) {
        std::fs::write(
            deferred.join(format!("4Q{i:06X}")),
            format!("C\x00\x00\x00S\x1bfrom@example.test\x00N\x2aX-Spate-Trace: run={run_id}; seq={seq}; sent=1; digest=0; size=1\x00"),
        )
        .unwrap();
    }
    let (v, j) = verify_with(&run, &root, &["--queue", queue.to_str().unwrap()]).await;
    assert_eq!(j["missing"], 1, "{j}");
    assert_eq!(j["still_queued"].as_u64(), Some(lost - 1), "{j}");
    assert_eq!(v.code, Some(1), "{v:?}");
    assert!(v.stdout.contains("still queued"), "{}", v.stdout);
    // With the really lost one gone from the count, only queued ones left: INCOMPLETE.
    let lost_seq = missing[0];
    std::fs::write(
        deferred.join("4Q000000"),
        format!("N\x2aX-Spate-Trace: run={run_id}; seq={lost_seq}; sent=1\x00"),
    )
    .unwrap();
    let (v, j) = verify_with(&run, &root, &["--queue", queue.to_str().unwrap()]).await;
    assert_eq!(j["missing"], 0, "{j}");
    assert!(v.stdout.contains("INCOMPLETE: "), "{}", v.stdout);
    assert!(!v.stdout.contains("lost\n"), "{}", v.stdout);
}
