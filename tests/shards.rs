//! Sharded runs end to end against the embedded server: four `spate smtp --shard I/4`
//! processes started together, `spate merge` of their directories, and the merged run
//! read by report and verify like any other; every bad shard or merge refused in one line.

mod common;

use std::path::{Path, PathBuf};

use common::{column_sums, phase_count, spate, summary};
use serde_json::Value;
use spate::serve;

/// Runs `n` shards of one SMTP run against `addr` at once, into `root/shard-I`.
async fn shards(addr: &str, root: &Path, n: u32, extra: &[&str]) -> Vec<PathBuf> {
    let mut tasks = Vec::new();
    for i in 0..n {
        let dir = root.join(format!("shard-{i}"));
        let mut args = common::shard_args(addr, i as usize, n as usize, root);
        args.extend(extra.iter().map(|s| s.to_string()));
        tasks.push(tokio::spawn(async move {
            let o =
                common::run_tool(common::SPATE, args, std::time::Duration::from_secs(120)).await;
            (dir, o)
        }));
    }
    let mut dirs = Vec::new();
    for t in tasks {
        let (dir, o) = t.await.unwrap();
        assert_eq!(o.code, Some(0), "{o:?}");
        dirs.push(dir);
    }
    dirs
}

fn strs(dirs: &[PathBuf]) -> Vec<&str> {
    dirs.iter().map(|d| d.to_str().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_shards_merge_into_one_exact_run() {
    let tmp = tempfile::tempdir().unwrap();
    let mail = tmp.path().join("mail");
    let mut cfg = serve::Config::loopback();
    cfg.store.maildir = Some(mail.clone());
    let server = serve::start(cfg).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let dirs = shards(
        &addr,
        tmp.path(),
        4,
        &[
            "--users",
            "10",
            "-n",
            "402",
            "--rcpt",
            "1..2",
            "--to",
            "user{0..19}@example.test",
        ],
    )
    .await;
    let parts: Vec<Value> = dirs.iter().map(|d| summary(d)).collect();
    // One run: one id, one start, shares that sum to the whole.
    let run = parts[0]["run_id"].clone();
    assert!(parts.iter().all(|s| s["run_id"] == run), "one run id");
    let attempted: Vec<u64> = parts
        .iter()
        .map(|s| s["totals"]["attempted"].as_u64().unwrap())
        .collect();
    assert_eq!(attempted, vec![101, 101, 100, 100], "the count's shares");
    let plan: Value =
        serde_json::from_str(&std::fs::read_to_string(dirs[3].join("plan.json")).unwrap()).unwrap();
    assert_eq!(
        plan["model"]["users"], 2,
        "10 users in 4 shards: 3, 3, 2, 2"
    );
    assert_eq!(plan["shard"]["index"], 3);
    let starts: Vec<&str> = parts
        .iter()
        .map(|s| s["started_at"].as_str().unwrap())
        .collect();
    assert!(
        starts.iter().all(|s| *s == starts[0]),
        "one start: {starts:?}"
    );

    let merged = tmp.path().join("merged");
    let mut args = vec!["merge"];
    args.extend(strs(&dirs));
    args.extend(["-o", merged.to_str().unwrap()]);
    let o = spate(&args).await;
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(o.stdout.contains("merged 4 shards"), "{}", o.stdout);
    let m = summary(&merged);
    let server_count = server.stats.snapshot().messages_accepted;
    let sum = |k: &str| -> u64 { parts.iter().map(|s| s["totals"][k].as_u64().unwrap()).sum() };
    assert_eq!(
        m["totals"]["accepted"].as_u64(),
        Some(server_count),
        "the server's own count"
    );
    assert_eq!(m["totals"]["accepted"].as_u64(), Some(sum("accepted")));
    assert_eq!(m["totals"]["attempted"], 402);
    for phase in ["connect", "bdat", "transaction", "response"] {
        let shards: u64 = parts.iter().map(|s| phase_count(s, phase)).sum();
        assert!(shards > 0, "{phase}");
        assert_eq!(phase_count(&m, phase), shards, "{phase}: histograms add");
    }
    // The merged verdict on the generators is the worst shard's.
    let rank = |b: &str| {
        ["server", "undetermined", "generator"]
            .iter()
            .position(|x| *x == b)
    };
    let worst = parts
        .iter()
        .filter_map(|s| s["extra"]["bound_by"]["bound_by"].as_str())
        .max_by_key(|b| rank(b))
        .expect("each shard has a verdict");
    assert_eq!(
        m["extra"]["bound_by"]["bound_by"], worst,
        "{}",
        m["extra"]["bound_by"]
    );
    // The merged maximum is the largest shard's: histograms, not averaged percentiles.
    let max = |s: &Value| {
        s["phases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["phase"] == "transaction")
            .unwrap()["max_us"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(max(&m), parts.iter().map(max).max().unwrap());
    assert_eq!(
        column_sums(&merged, &["attempted", "accepted"]),
        vec![402, server_count],
        "the merged intervals add up"
    );
    assert_eq!(m["extra"]["shards"].as_array().unwrap().len(), 4);
    assert!(merged.join("report.html").exists());

    // verify reads the merged sent log: every message of every shard, once.
    server.shutdown().await;
    let o = spate(&[
        "verify",
        merged.to_str().unwrap(),
        "--maildir",
        mail.to_str().unwrap(),
    ])
    .await;
    assert_eq!(o.code, Some(0), "{o:?}");
    let d: Value =
        serde_json::from_str(&std::fs::read_to_string(merged.join("verify.json")).unwrap())
            .unwrap();
    assert_eq!(d["messages"].as_u64(), Some(server_count), "{d}");
    assert_eq!(d["missing"], 0, "{d}");
    assert_eq!(d["duplicated"], 0, "{d}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_shards_and_merges_are_named_and_nothing_is_written() {
    for (shard, what) in [("5/4", "5/4"), ("0/0", "0/0"), ("x", "expected I/N")] {
        let o = spate(&["smtp", "127.0.0.1:9", "--shard", shard]).await;
        assert_eq!(o.code, Some(2), "{o:?}");
        assert!(
            o.stderr.contains(what) && o.stderr.trim().lines().count() == 1,
            "{o:?}"
        );
    }
    let o = spate(&[
        "smtp",
        "127.0.0.1:9",
        "--shard",
        "0/4",
        "-u",
        "3",
        "--run-id",
        "r1",
    ])
    .await;
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(
        o.stderr.contains("--users 3 cannot be split into 4 shards"),
        "{o:?}"
    );

    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let run_a = shards(&addr, &a, 2, &["-n", "20"]).await;
    let run_b = shards(&addr, &b, 2, &["-n", "20"]).await;
    server.shutdown().await;
    let out = tmp.path().join("merged");
    let merge = |dirs: Vec<&Path>| {
        let mut args: Vec<String> = vec!["merge".into()];
        args.extend(dirs.iter().map(|d| d.display().to_string()));
        args.extend(["-o".into(), out.display().to_string()]);
        common::run_tool(common::SPATE, args, std::time::Duration::from_secs(60))
    };
    let refused = |o: &common::Output, what: &str| {
        assert_eq!(o.code, Some(2), "{what}: {o:?}");
        assert!(o.stderr.contains(what), "{what}: {o:?}");
        assert_eq!(o.stderr.trim().lines().count(), 1, "one line: {o:?}");
        assert!(!out.exists(), "nothing written to -o after: {what}");
    };
    refused(
        &merge(vec![&run_a[0], &run_b[1]]).await,
        "shards of different runs",
    );
    refused(&merge(vec![&run_a[0], &run_a[0]]).await, "given twice");
    refused(&merge(vec![&run_a[1]]).await, "shard 0/2 missing");
    refused(&merge(vec![&tmp.path().join("nowhere")]).await, "nowhere");
    // A shard whose histogram log lost its tail.
    let hlog = run_a[1].join("transaction.hlog");
    let text = std::fs::read_to_string(&hlog).unwrap();
    std::fs::write(&hlog, &text[..text.len() - 20]).unwrap();
    refused(&merge(vec![&run_a[0], &run_a[1]]).await, "transaction.hlog");
    std::fs::write(&hlog, &text).unwrap();
    // A shard without one of its histogram logs: found while the merge is being built,
    // and its build directory goes with it.
    let connect = run_a[1].join("connect.hlog");
    let kept = std::fs::read(&connect).unwrap();
    std::fs::remove_file(&connect).unwrap();
    refused(
        &merge(vec![&run_a[0], &run_a[1]]).await,
        "connect.hlog: 0 values",
    );
    std::fs::write(&connect, kept).unwrap();
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".building-"))
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "build directories left behind: {left:?}");
    // A shard that never finished.
    let s = run_b[0].join("summary.json");
    let text = std::fs::read_to_string(&s).unwrap();
    std::fs::write(
        &s,
        text.replace("\"complete\": true", "\"complete\": false"),
    )
    .unwrap();
    refused(&merge(vec![&run_b[0], &run_b[1]]).await, "did not finish");

    // --partial merges the shards that finished, marked partial, naming what is left out
    // (the killed shard 0 of run b; shard 1 of run a, not given).
    for (dirs, left_out, kept) in [
        (vec![&run_b[0], &run_b[1]], "0/2", &run_b[1]),
        (vec![&run_a[0]], "1/2", &run_a[0]),
    ] {
        let partial = tmp
            .path()
            .join(format!("partial-{left_out}").replace('/', "of"));
        let mut args: Vec<String> = vec!["merge".into()];
        args.extend(dirs.iter().map(|d| d.display().to_string()));
        args.extend([
            "-o".into(),
            partial.display().to_string(),
            "--partial".into(),
        ]);
        let o = common::run_tool(common::SPATE, args, std::time::Duration::from_secs(60)).await;
        assert_eq!(o.code, Some(0), "{o:?}");
        assert!(
            o.stdout.contains("PARTIAL: 1 of 2 shards merged"),
            "{}",
            o.stdout
        );
        let s = summary(&partial);
        assert_eq!(
            s["extra"]["partial"]["missing"],
            serde_json::json!([left_out]),
            "{s}"
        );
        assert_eq!(s["totals"]["accepted"], summary(kept)["totals"]["accepted"]);
    }
}

/// Lists every file below `dir` with its contents, to show that nothing changed.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let kind = e.file_type().unwrap();
            if kind.is_symlink() {
                let to = std::fs::read_link(e.path()).unwrap();
                out.push((e.path(), to.into_os_string().into_encoded_bytes()));
            } else if kind.is_dir() {
                todo.push(e.path());
            } else {
                out.push((e.path(), std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_never_deletes_what_it_did_not_write() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("runs");
    std::fs::create_dir_all(&root).unwrap();
    let dirs = shards(&addr, &root, 2, &["-n", "10"]).await;
    server.shutdown().await;
    std::fs::write(root.join("README"), "the shards of Tuesday's run\n").unwrap();
    let foreign = tmp.path().join("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("notes.txt"), "mine\n").unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "a file\n").unwrap();
    // Another name for a shard.
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&dirs[0], &link).unwrap();
    let before = snapshot(tmp.path());

    let merge = |out: &Path, overwrite: bool| {
        let mut args: Vec<String> = vec!["merge".into()];
        args.extend(dirs.iter().map(|d| d.display().to_string()));
        args.extend(["-o".into(), out.display().to_string()]);
        if overwrite {
            args.push("--overwrite".into());
        }
        common::run_tool(common::SPATE, args, std::time::Duration::from_secs(60))
    };
    let inside = dirs[0].join("sub");
    for (out, what) in [
        (&root, "it contains"),
        (&inside, "it lies inside"),
        (&dirs[1], "one of the inputs"),
        (&link, "one of the inputs"),
        (&foreign, "neither empty nor a results directory"),
        (&file, "is not a directory"),
    ] {
        for overwrite in [false, true] {
            let o = merge(out, overwrite).await;
            assert_eq!(o.code, Some(2), "-o {out:?} --overwrite={overwrite}: {o:?}");
            assert!(o.stderr.contains(what), "{what}: {o:?}");
            assert_eq!(o.stderr.trim().lines().count(), 1, "one line: {o:?}");
            assert_eq!(
                snapshot(tmp.path()),
                before,
                "-o {out:?} --overwrite={overwrite}: nothing deleted, changed or left behind"
            );
        }
    }

    // An empty directory takes a merge; a second merge into it needs --overwrite, and
    // replaces only a results directory's own files.
    let merged = tmp.path().join("merged");
    std::fs::create_dir(&merged).unwrap();
    let o = merge(&merged, false).await;
    assert_eq!(o.code, Some(0), "{o:?}");
    let o = merge(&merged, false).await;
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("--overwrite"), "{o:?}");
    let o = merge(&merged, true).await;
    assert_eq!(o.code, Some(0), "{o:?}");
    assert_eq!(summary(&merged)["totals"]["accepted"], 10);
    std::fs::write(merged.join("notes.txt"), "mine\n").unwrap();
    let kept = snapshot(tmp.path());
    let o = merge(&merged, true).await;
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("holds notes.txt"), "{o:?}");
    assert_eq!(snapshot(tmp.path()), kept, "nothing deleted or left behind");
    // A user's file with a results file's ending is no results file either.
    std::fs::remove_file(merged.join("notes.txt")).unwrap();
    std::fs::write(merged.join("notes.csv"), "mine\n").unwrap();
    let kept = snapshot(tmp.path());
    let o = merge(&merged, true).await;
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("holds notes.csv"), "{o:?}");
    assert_eq!(snapshot(tmp.path()), kept, "nothing deleted or left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_starts_late_says_so_and_the_merge_flags_it() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    // Shard 0 makes the start file and runs its 2 s from the shared start; shard 1 is
    // started only once shard 0 has ended: its shared start (the same file's time, the
    // same plan) is more than 2 s past when it begins.
    let mut dirs = Vec::new();
    let mut launched = std::time::SystemTime::UNIX_EPOCH;
    for i in 0..2 {
        let mut args = common::shard_args(&addr, i, 2, tmp.path());
        args.extend(["--rate", "20/s", "--duration", "2s"].map(String::from));
        launched = std::time::SystemTime::now();
        let o = common::run_tool(common::SPATE, args, std::time::Duration::from_secs(120)).await;
        assert_eq!(o.code, Some(0), "shard {i}: {o:?}");
        dirs.push(tmp.path().join(format!("shard-{i}")));
    }
    server.shutdown().await;
    let warned = |s: &Value, what: &str| {
        s["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .filter(|w| w.contains(what))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let on_time = summary(&dirs[0]);
    assert!(on_time["extra"].get("late_start_s").is_none(), "{on_time}");
    assert!(warned(&on_time, "after its shared start").is_empty());
    let late = summary(&dirs[1]);
    let late_s = late["extra"]["late_start_s"].as_f64().unwrap_or_else(|| {
        panic!("the late shard does not say so: {late}");
    });
    // Shard 1 cannot have begun before the test launched it: it is at least as late as
    // its launch was after the shared start (the start file's time + 2 s), whatever the
    // machine's load (the figure is rounded to the millisecond).
    let shared_start = std::fs::metadata(tmp.path().join("start"))
        .unwrap()
        .modified()
        .unwrap()
        + std::time::Duration::from_secs(2);
    let launch_late = launched
        .duration_since(shared_start)
        .expect("shard 1 was launched after the shared start: shard 0 had run its 2 s")
        .as_secs_f64();
    assert!(
        late_s + 0.001 >= launch_late,
        "late by {late_s} s, launched {launch_late} s after the shared start"
    );
    let said = warned(&late, "after its shared start (--start-at)");
    assert_eq!(said.len(), 1, "{late}");

    let merged = tmp.path().join("merged");
    let o = spate(&[
        "merge",
        strs(&dirs)[0],
        strs(&dirs)[1],
        "-o",
        merged.to_str().unwrap(),
    ])
    .await;
    assert_eq!(o.code, Some(0), "{o:?}");
    let m = summary(&merged);
    let flagged = &m["extra"]["late_shards"];
    assert_eq!(flagged["after"], "start_at", "{m}");
    let shards = flagged["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 1, "only shard 1 was late: {flagged}");
    assert_eq!(shards[0]["shard"], 1, "{flagged}");
    let merged_late = shards[0]["late_s"].as_f64().unwrap();
    assert!(
        (merged_late - late_s).abs() < 0.1,
        "the merge's {merged_late} s, the shard's own {late_s} s"
    );
    // The merged run spans both shards, one after the other: said, not passed off as the
    // run's length.
    let span = m["elapsed_s"].as_f64().unwrap();
    let ran = flagged["shards_ran_s"].as_f64().unwrap();
    assert!(span >= ran + late_s - 0.5, "span {span}, shards ran {ran}");
    assert!(
        (flagged["span_s"].as_f64().unwrap() - span).abs() < 0.01,
        "{flagged}"
    );
    let said = warned(
        &m,
        "shards started late, after the shared start (--start-at): shard 1 by",
    );
    assert_eq!(said.len(), 1, "{m}");
    assert!(said[0].contains("the merged run spans"), "{said:?}");
    // The shard's own warning is carried too, under its name.
    assert_eq!(warned(&m, "shard 1: this run started").len(), 1, "{m}");
}
