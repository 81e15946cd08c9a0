//! A results directory is never reused: runs started in the same second (even at once)
//! get directories of their own, `spate-results/latest` points to the newest, an
//! explicit --out that holds a run is refused unless --overwrite, and bad input creates
//! nothing.

use std::path::Path;
use std::process::{Command, Output};

use spate::serve;

const SPATE: &str = env!("CARGO_BIN_EXE_spate");

fn spate_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(SPATE)
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("spate runs")
}

fn run_id(dir: &Path) -> String {
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    s["run_id"].as_str().unwrap().to_string()
}

fn runs(root: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && !p.is_symlink())
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_never_share_a_directory_and_an_explicit_one_is_not_overwritten() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let cwd = tempfile::tempdir().unwrap();
    let cwd = cwd.path().to_path_buf();
    let args: Vec<String> = ["smtp", &addr, "-n", "10", "-q"].map(String::from).to_vec();

    // Two at once and one right after: three directories, three runs.
    let (a, b) = {
        let at_once = |cwd: std::path::PathBuf, args: Vec<String>| {
            tokio::task::spawn_blocking(move || {
                let a: Vec<&str> = args.iter().map(String::as_str).collect();
                spate_in(&cwd, &a)
            })
        };
        let t1 = at_once(cwd.clone(), args.clone());
        let t2 = at_once(cwd.clone(), args.clone());
        (t1.await.unwrap(), t2.await.unwrap())
    };
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    let c = spate_in(&cwd, &args);
    assert!(c.status.success());
    let root = cwd.join("spate-results");
    let dirs = runs(&root);
    assert_eq!(dirs.len(), 3, "{dirs:?}");
    let ids: std::collections::BTreeSet<String> = dirs.iter().map(|d| run_id(d)).collect();
    // The summary says what the protocol calls its units (its driver declared them).
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dirs[0].join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(
        s["words"],
        serde_json::json!({"unit": "messages", "rate": "msg/s", "bytes": "sent",
            "service": ["transaction"], "response": true})
    );
    assert_eq!(ids.len(), 3, "three runs, three summaries");
    // `latest` is the last one's.
    let latest = std::fs::canonicalize(root.join("latest")).unwrap();
    let last_printed = String::from_utf8_lossy(&c.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("results: ").map(str::to_string))
        .unwrap();
    assert_eq!(
        latest,
        std::fs::canonicalize(cwd.join(last_printed)).unwrap()
    );

    // An explicit --out that holds a run: refused in one line, the run left as it was.
    let kept = dirs[0].display().to_string();
    let before = run_id(&dirs[0]);
    let o = spate_in(&cwd, &["smtp", &addr, "-n", "10", "-q", "-o", &kept]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--overwrite"), "{err}");
    assert_eq!(run_id(&dirs[0]), before);
    // ... unless asked.
    let o = spate_in(
        &cwd,
        &["smtp", &addr, "-n", "10", "-q", "-o", &kept, "--overwrite"],
    );
    assert!(o.status.success());
    assert_ne!(run_id(&dirs[0]), before);

    // Bad input writes nothing.
    let o = spate_in(&cwd, &["smtp", &addr, "--rcpt", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(runs(&root).len(), 3);
    server.shutdown().await;
}

/// An --out that holds files of a run's names that no run of spate's wrote (a user's own
/// `intervals.csv`, `report.html`) is refused, with or without --overwrite, before
/// anything is sent: a run would replace them. Files of other names do not stand in the
/// way, and are left as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_out_with_a_users_files_of_a_runs_names_is_refused() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let cwd = tempfile::tempdir().unwrap();
    let mine = cwd.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("intervals.csv"), "my own figures\n").unwrap();
    std::fs::write(mine.join("notes.txt"), "keep\n").unwrap();
    let out = mine.display().to_string();
    for extra in [&[][..], &["--overwrite"][..]] {
        let args = [&["smtp", &addr, "-n", "5", "-q", "-o", &out][..], extra].concat();
        let o = spate_in(cwd.path(), &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("intervals.csv"), "{err}");
        assert_eq!(
            std::fs::read_to_string(mine.join("intervals.csv")).unwrap(),
            "my own figures\n"
        );
        assert!(!mine.join("summary.json").exists());
    }
    // Only files of other names: the run goes there and leaves them be.
    std::fs::remove_file(mine.join("intervals.csv")).unwrap();
    let o = spate_in(cwd.path(), &["smtp", &addr, "-n", "5", "-q", "-o", &out]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read_to_string(mine.join("notes.txt")).unwrap(),
        "keep\n"
    );
    assert!(mine.join("summary.json").exists());
    server.shutdown().await;
}

/// --overwrite leaves only what the new run wrote: the earlier run's verify.json (and its
/// other files) would otherwise be read as the new run's by report.html and compare. A
/// user's file of another name stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overwritten_run_keeps_nothing_of_the_earlier_one() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let cwd = tempfile::tempdir().unwrap();
    let out = cwd.path().join("r");
    let o_s = out.display().to_string();
    let o = spate_in(cwd.path(), &["smtp", &addr, "-n", "20", "-q", "-o", &o_s]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // What a verify of the first run leaves, and a user's note beside it.
    std::fs::write(
        out.join("verify.json"),
        "{\"expected\": 20, \"delivered\": 20}\n",
    )
    .unwrap();
    std::fs::write(out.join("missing.tsv"), "seq\trcpt\n").unwrap();
    std::fs::write(out.join("notes.txt"), "keep\n").unwrap();
    // A symlink of a results file's name pointing at a user's file: what it points at is
    // never removed or written through (only plain files spate writes are removed).
    let users = cwd.path().join("users-report.html");
    std::fs::write(&users, "mine\n").unwrap();
    std::fs::remove_file(out.join("report.html")).unwrap();
    std::os::unix::fs::symlink(&users, out.join("report.html")).unwrap();
    let o = spate_in(
        cwd.path(),
        &["smtp", &addr, "-n", "7", "-q", "-o", &o_s, "--overwrite"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        !out.join("verify.json").exists(),
        "the earlier run's verify.json"
    );
    assert!(
        !out.join("missing.tsv").exists(),
        "the earlier run's missing.tsv"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("notes.txt")).unwrap(),
        "keep\n"
    );
    assert_eq!(std::fs::read_to_string(&users).unwrap(), "mine\n");
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["totals"]["attempted"], 7);
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        !page.contains("20 expected"),
        "the report shows the old verify"
    );
    server.shutdown().await;
}

/// A directory that holds only a user's plan.json is not a run: refused like any user's
/// file of a run's name, with or without --overwrite, and left as it was. A regular file
/// named spate-results/latest is not replaced by the link (said on stderr).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_plan_json_and_latest_are_not_replaced() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let cwd = tempfile::tempdir().unwrap();
    let mine = cwd.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("plan.json"), "{\"my\": \"plan\"}\n").unwrap();
    let out = mine.display().to_string();
    for extra in [&[][..], &["--overwrite"][..]] {
        let args = [&["smtp", &addr, "-n", "5", "-q", "-o", &out][..], extra].concat();
        let o = spate_in(cwd.path(), &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains("plan.json"), "{err}");
        assert_eq!(
            std::fs::read_to_string(mine.join("plan.json")).unwrap(),
            "{\"my\": \"plan\"}\n"
        );
        assert!(!mine.join("summary.json").exists());
    }
    let root = cwd.path().join("spate-results");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("latest"), "my file\n").unwrap();
    let o = spate_in(cwd.path(), &["smtp", &addr, "-n", "5", "-q"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("is not a link spate made"), "{err}");
    assert_eq!(
        std::fs::read_to_string(root.join("latest")).unwrap(),
        "my file\n"
    );
    assert_eq!(runs(&root).len(), 1);
    server.shutdown().await;
}
