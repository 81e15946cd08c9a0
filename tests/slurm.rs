//! Sharded runs under Slurm, end to end: a private one-node cluster (`scripts/slurm up`,
//! root), the embedded server on loopback, `examples/slurm/spate-array.sh` as a 4-task
//! array with the merge as a job that depends on it, the same script under `srun -n 4`,
//! and a failed shard that keeps the merge from running. Also the Kubernetes examples'
//! offline check (`scripts/check-k8s-examples`), on the real manifests and a broken copy.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{assert_merge_adds_up, have, merge, run_blocking, Output};
use spate::serve;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// How long a job may take from submission to its end.
const JOB_LIMIT: Duration = Duration::from_secs(60);
/// The whole run's workload, which the shards split.
const WORKLOAD: &str = "-n 400 --users 4 -q";

/// A private Slurm cluster under a directory, stopped (`scripts/slurm down`) when
/// dropped, also when the test failed: then the daemons' last log lines are printed.
struct Cluster {
    dir: PathBuf,
    conf: String,
}

impl Cluster {
    /// Starts one, or says why it cannot (None: the test was allowed to skip).
    fn up(dir: &Path) -> Option<Cluster> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            common::cannot_run("a private Slurm cluster needs root (scripts/slurm up)");
            return None;
        }
        // The daemons and munge are scripts/slurm's to find (or install).
        if !["sbatch", "srun", "scontrol"].iter().all(|t| have(t)) {
            return None;
        }
        let o = run_blocking(
            &format!("{ROOT}/scripts/slurm"),
            &["up", "--dir", dir.to_str().unwrap()],
            &[],
            Duration::from_secs(60),
        );
        // What `up` started is stopped even when it failed half-way.
        let mut cluster = Cluster {
            dir: dir.to_path_buf(),
            conf: String::new(),
        };
        assert!(o.ok, "scripts/slurm up: {o:?}");
        cluster.conf = o
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("export SLURM_CONF="))
            .unwrap_or_else(|| panic!("no SLURM_CONF from scripts/slurm up: {o:?}"))
            .to_string();
        Some(cluster)
    }

    /// Runs a Slurm client (or anything) with this cluster's SLURM_CONF and `env`.
    fn run(&self, program: &str, args: &[&str], env: &[(String, String)]) -> Output {
        let mut all = vec![("SLURM_CONF".to_string(), self.conf.clone())];
        all.extend_from_slice(env);
        run_blocking(program, args, &all, JOB_LIMIT)
    }

    /// `sbatch --parsable ARGS`: the job id.
    fn submit(&self, args: &[&str], env: &[(String, String)]) -> String {
        let mut a = vec!["--parsable"];
        a.extend_from_slice(args);
        let o = self.run("sbatch", &a, env);
        assert!(o.ok, "sbatch {args:?}: {o:?}");
        let id = o.stdout.trim().split(';').next().unwrap().to_string();
        assert!(id.parse::<u64>().is_ok(), "sbatch printed {o:?}");
        id
    }

    /// Waits (polling the controller, bounded by [`JOB_LIMIT`]) until every task of
    /// `job` has ended; their states (`COMPLETED`, `FAILED`, `CANCELLED`...) in the
    /// order of their array task ids.
    fn wait(&self, job: &str) -> Vec<String> {
        let start = Instant::now();
        loop {
            let o = self.run("scontrol", &["show", "job", "-o", job], &[]);
            assert!(o.ok, "scontrol show job {job}: {o:?}");
            let field = |line: &str, key: &str| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(key))
                    .map(str::to_string)
            };
            let mut tasks: Vec<(u32, String)> = o
                .stdout
                .lines()
                .filter_map(|l| {
                    let task = field(l, "ArrayTaskId=").and_then(|t| t.parse().ok());
                    Some((task.unwrap_or(0), field(l, "JobState=")?))
                })
                .collect();
            tasks.sort();
            let states: Vec<String> = tasks.into_iter().map(|(_, s)| s).collect();
            let ended = |s: &String| {
                !matches!(
                    s.as_str(),
                    "PENDING"
                        | "RUNNING"
                        | "CONFIGURING"
                        | "COMPLETING"
                        | "SUSPENDED"
                        | "REQUEUED"
                        | "RESIZING"
                )
            };
            if !states.is_empty() && states.iter().all(ended) {
                return states;
            }
            assert!(
                start.elapsed() < JOB_LIMIT,
                "job {job} not ended after {JOB_LIMIT:?}: {}",
                o.stdout
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for log in ["slurmctld.log", "slurmd.log"] {
                if let Ok(text) = std::fs::read_to_string(self.dir.join("log").join(log)) {
                    let lines: Vec<&str> = text.lines().collect();
                    eprintln!(
                        "--- last lines of {log}:\n{}",
                        lines[lines.len().saturating_sub(30)..].join("\n")
                    );
                }
            }
        }
        let o = run_blocking(
            &format!("{ROOT}/scripts/slurm"),
            &["down", "--dir", self.dir.to_str().unwrap()],
            &[],
            Duration::from_secs(60),
        );
        if !o.ok {
            eprintln!("scripts/slurm down failed: {o:?}");
        }
    }
}

/// The embedded SMTP server on loopback (the shards run under slurmd, on this host), on a
/// runtime of its own so that the test itself can block.
struct Server {
    rt: tokio::runtime::Runtime,
    running: Option<serve::Running>,
    target: String,
}

impl Server {
    fn start() -> Server {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let mut cfg = serve::Config::loopback();
        cfg.store.discard = true;
        let running = rt.block_on(serve::start(cfg)).unwrap();
        let target = running.addrs.smtp.unwrap().to_string();
        Server {
            rt,
            running: Some(running),
            target,
        }
    }

    /// Messages the server accepted, after it stopped (every session ended).
    fn stop(mut self) -> u64 {
        let running = self.running.take().unwrap();
        let stats = running.stats.clone();
        self.rt.block_on(running.shutdown());
        stats.snapshot().messages_accepted
    }
}

/// The environment examples/slurm/spate-array.sh reads: the run's target, directory and
/// workload, and this build's spate.
fn script_env(target: &str, results: &Path, spate: &str) -> Vec<(String, String)> {
    [
        ("TARGET", target),
        ("RESULTS", results.to_str().unwrap()),
        ("SPATE", spate),
        ("SPATE_OPTS", WORKLOAD),
        // Tasks of one array start within a second of each other here.
        ("START_AT", "+2s"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn script() -> String {
    format!("{ROOT}/examples/slurm/spate-array.sh")
}

fn shard_dirs(results: &Path, n: usize) -> Vec<PathBuf> {
    (0..n).map(|i| results.join(format!("shard-{i}"))).collect()
}

/// The job output files (`%A`/`%a` patterns) of a run: what a failure shows.
fn outputs(dir: &Path) -> String {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    files.retain(|f| f.extension().is_some_and(|e| e == "out"));
    files.sort();
    files
        .iter()
        .map(|f| {
            format!(
                "--- {}:\n{}",
                f.display(),
                std::fs::read_to_string(f).unwrap_or_default()
            )
        })
        .collect()
}

/// A cluster, the server and the run's directory (`run/` in the temporary directory,
/// which also holds the jobs' output files); None when the test was allowed to skip.
fn setup() -> Option<(tempfile::TempDir, Cluster, Server, PathBuf)> {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Cluster::up(&tmp.path().join("slurm"))?;
    let results = tmp.path().join("run");
    Some((tmp, cluster, Server::start(), results))
}

/// Submits the script as a 4-task array and the merge as a job that depends on it, as
/// examples/slurm/README.md shows, and waits for both: the array tasks' states and the
/// merge job's.
fn array_and_merge(
    cluster: &Cluster,
    env: &[(String, String)],
    tmp: &Path,
    results: &Path,
) -> (Vec<String>, Vec<String>) {
    let out = |name: &str| format!("--output={}/{name}", tmp.display());
    let array = cluster.submit(
        &[
            "--array=0-3",
            "--no-requeue",
            &out("shard-%a.out"),
            &script(),
        ],
        env,
    );
    // The glob is expanded when the merge runs, after the shards exist.
    let merge_cmd = format!(
        "{} merge {}/shard-* -o {}/merged",
        common::SPATE,
        results.display(),
        results.display()
    );
    let merge = cluster.submit(
        &[
            &format!("--dependency=afterok:{array}"),
            &out("merge.out"),
            "--wrap",
            &merge_cmd,
        ],
        env,
    );
    let merge_state = cluster.wait(&merge);
    (cluster.wait(&array), merge_state)
}

#[test]
fn array_shards_and_the_dependent_merge_job_add_up_to_the_servers_count() {
    let Some((tmp, cluster, server, results)) = setup() else {
        return;
    };
    let env = script_env(&server.target, &results, common::SPATE);
    let (shards, merge) = array_and_merge(&cluster, &env, tmp.path(), &results);
    let accepted = server.stop();
    let log = outputs(tmp.path());
    assert_eq!(shards, vec!["COMPLETED"; 4], "{log}");
    assert_eq!(merge, vec!["COMPLETED"], "{log}");
    assert!(log.contains("merged 4 shards of run slurm-"), "{log}");
    let merged = results.join("merged");
    assert_merge_adds_up(&merged, &shard_dirs(&results, 4), accepted);
    assert_eq!(
        common::summary(&merged)["totals"]["attempted"],
        400,
        "the whole run's count"
    );
}

#[test]
fn srun_tasks_add_up_to_the_servers_count() {
    let Some((_tmp, cluster, server, results)) = setup() else {
        return;
    };
    let env = script_env(&server.target, &results, common::SPATE);
    // 4 tasks on the node's 2 CPUs: --overcommit, or they would queue for ever.
    let o = cluster.run("srun", &["-n", "4", "--overcommit", &script()], &env);
    let accepted = server.stop();
    assert!(o.ok, "srun -n 4: {o:?}");
    let shards = shard_dirs(&results, 4);
    let merged = results.join("merged");
    let m = merge(&shards, &merged);
    assert!(m.ok, "{m:?}");
    assert_merge_adds_up(&merged, &shards, accepted);
    let s = common::summary(&merged);
    assert!(
        s["run_id"].as_str().unwrap().starts_with("slurm-"),
        "the run id is the job's: {s}"
    );
}

#[test]
fn a_failed_shard_keeps_the_merge_from_running() {
    let Some((tmp, cluster, server, results)) = setup() else {
        return;
    };
    // A port nobody listens on: bound, then released.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    // Array task 2 is pointed at the closed port; the others at the server.
    let wrapper = tmp.path().join("spate-wrapper");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ncmd=$1 target=$2\nshift 2\n\
             [ \"$SLURM_ARRAY_TASK_ID\" = 2 ] && target={closed}\n\
             exec {} \"$cmd\" \"$target\" \"$@\"\n",
            common::SPATE
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let env = script_env(&server.target, &results, wrapper.to_str().unwrap());
    let (shards, merge_state) = array_and_merge(&cluster, &env, tmp.path(), &results);
    server.stop();
    let log = outputs(tmp.path());
    assert_eq!(
        shards,
        vec!["COMPLETED", "COMPLETED", "FAILED", "COMPLETED"],
        "{log}"
    );
    let failed = std::fs::read_to_string(tmp.path().join("shard-2.out")).unwrap();
    assert!(
        failed.contains(&format!("cannot connect to {closed}")),
        "{failed}"
    );
    // kill_invalid_depend (scripts/slurm's slurm.conf) cancels the merge job.
    assert_eq!(merge_state, vec!["CANCELLED"], "{log}");
    let merged = results.join("merged");
    assert!(!merged.exists(), "nothing at -o");
    // And spate merge itself refuses the three shards there are.
    let mut three = shard_dirs(&results, 4);
    three.remove(2);
    let m = merge(&three, &merged);
    assert_eq!(m.code, Some(2), "{m:?}");
    assert!(m.stderr.contains("shard 2/4 missing"), "{m:?}");
    assert!(!merged.exists(), "nothing at -o");
}

#[test]
fn the_kubernetes_examples_pass_the_check_and_a_broken_copy_fails() {
    if !have("python3") {
        return;
    }
    let check = format!("{ROOT}/scripts/check-k8s-examples");
    let o = run_blocking(&check, &[] as &[&str], &[], Duration::from_secs(60));
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(
        o.stdout.contains("ok: ") && o.stdout.contains("4 shards of run smtp-run-1"),
        "{o:?}"
    );
    // Copies with one mistake each: fewer completions than --shards; a merge that
    // lists only three of the four shards.
    let tmp = tempfile::tempdir().unwrap();
    let src = Path::new(ROOT).join("examples/kubernetes");
    let good_shards = std::fs::read_to_string(src.join("spate-shards.yaml")).unwrap();
    let good_merge = std::fs::read_to_string(src.join("spate-merge.yaml")).unwrap();
    for (name, shards, merge, finding) in [
        (
            "completions",
            good_shards.replace("completions: 4", "completions: 3"),
            good_merge.clone(),
            "completions 3 != parallelism 4",
        ),
        (
            "merge",
            good_shards.clone(),
            good_merge.replace("            - /results/$(RUN_ID)/shard-3\n", ""),
            "no Job merges exactly its 4 shards",
        ),
    ] {
        assert!(
            shards != good_shards || merge != good_merge,
            "{name}: the copy must differ"
        );
        let dir = tmp.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("spate-shards.yaml"), &shards).unwrap();
        std::fs::write(dir.join("spate-merge.yaml"), &merge).unwrap();
        let o = run_blocking(
            &check,
            &[dir.to_str().unwrap()],
            &[],
            Duration::from_secs(60),
        );
        assert_eq!(o.code, Some(1), "{name}: {o:?}");
        assert!(o.stdout.contains(finding), "{name}: {o:?}");
    }
}

/// The sh block of examples/slurm/README.md that starts with `marker`, as written.
fn readme_block(marker: &str) -> String {
    let text = std::fs::read_to_string(Path::new(ROOT).join("examples/slurm/README.md")).unwrap();
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("no block with {marker}"));
    let start = text[..at].rfind("```sh\n").expect("an sh block") + "```sh\n".len();
    let end = text[start..].find("```").expect("a closed block") + start;
    text[start..end].to_string()
}

/// "Trying it on one machine" of examples/slurm/README.md, run as written (its SL, RUN
/// and PORT given: a directory of the test's and a free port): a private cluster, the
/// embedded server, the array and its merge, the report, everything stopped again. The
/// merged run holds every message the server received.
#[test]
fn the_one_machine_example_runs_as_written() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        common::cannot_run("a private Slurm cluster needs root (scripts/slurm up)");
        return;
    }
    if !["sbatch", "srun", "scontrol"].iter().all(|t| have(t)) {
        return;
    }
    let block = readme_block("SL=${SL:-/tmp/sl}");
    let tmp = tempfile::tempdir().unwrap();
    let (sl, run) = (tmp.path().join("sl"), tmp.path().join("run1"));
    // Whatever happens, the cluster and the server stop (the block does it too when it
    // gets to its end; `timeout` ends a block that hangs with TERM, which runs the trap).
    let script = format!(
        "set -euo pipefail\ntrap 'kill ${{SERVE:-}} 2>/dev/null || true; scripts/slurm down --dir \"$SL\" >/dev/null 2>&1 || true' EXIT\n{block}"
    );
    let bin = Path::new(common::SPATE).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let env = vec![
        ("SL".to_string(), sl.display().to_string()),
        ("RUN".to_string(), run.display().to_string()),
        ("PORT".to_string(), common::free_port().to_string()),
        ("PATH".to_string(), path),
    ];
    let o = run_blocking(
        "timeout",
        &["--signal=TERM", "170", "bash", "-c", &script],
        &env,
        Duration::from_secs(200),
    );
    assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("accepted 400"), "{}", o.stdout);
    let s = common::summary(&run.join("merged"));
    assert_eq!(s["totals"]["accepted"], 400);
    assert!(!sl.exists(), "the cluster was brought down");
}
