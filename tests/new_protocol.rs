//! A protocol spate has never heard of, declared whole in this file: its phase, its own
//! counters, its error kind and its words. It runs on the engine, its results directory
//! explains itself, and `spate report` (text and HTML) and `spate compare` read it, with
//! no line of the shared modules (metrics, results, report, ui, sweep, engine) naming it
//! (issue 34: a new protocol touches none of them).
//!
//! The protocol: a client connects, writes `KNOCK n`, and the door answers `OPEN` or,
//! for every fifth knock, `SHUT`.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use serde::Serialize;
use spate::engine::{
    self, Driver, Model, Outcome, PlanHead, PlanInfo, Setup, UnitReport, Workload,
};
use spate::metrics::{word::Def, Counter, ErrorKey, ErrorKind, Phase};
use spate::results::UnitWords;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

const KNOCK: Phase = Phase::new(&Def {
    name: "knock",
    what: "KNOCK written to the door's answer",
});
const OPENED: Counter = Counter::new(&Def {
    name: "doors_opened",
    what: "doors that opened",
});
const KNOCKED_BYTES: Counter = Counter::new(&Def {
    name: "knock_bytes",
    what: "bytes of the knocks",
});
const SHUT: ErrorKind = ErrorKind::new(&Def {
    name: "shut",
    what: "the door stayed shut",
});

const KNOCKS: u64 = 50;

struct Knocker {
    door: SocketAddr,
}

impl Driver for Knocker {
    const PHASES: &'static [Phase] = &[Phase::CONNECT, KNOCK];
    const COUNTERS: &'static [Counter] = &[OPENED, KNOCKED_BYTES];
    const WORDS: UnitWords = UnitWords::new("knocks", "knocks/s", "knocked", &[KNOCK], true);

    async fn run_one(&mut self, seq: u64, report: &mut UnitReport) -> Outcome {
        let failed = |report: &mut UnitReport, phase, kind, text: String| {
            report.error(
                ErrorKey {
                    phase,
                    kind,
                    code: 0,
                    detail: None,
                    text: text.clone(),
                },
                text,
            );
            Outcome::Failed
        };
        let t = report.start(Phase::CONNECT);
        let stream = match tokio::net::TcpStream::connect(self.door).await {
            Ok(s) => s,
            Err(e) => return failed(report, Phase::CONNECT, ErrorKind::REFUSED, e.to_string()),
        };
        report.timed_now(Phase::CONNECT, t);
        report.counters.connections += 1;
        let mut stream = tokio::io::BufReader::new(stream);
        let knock = format!("KNOCK {seq}\n");
        let t = report.start(KNOCK);
        let mut answer = String::new();
        let io = async {
            stream.get_mut().write_all(knock.as_bytes()).await?;
            stream.read_line(&mut answer).await
        };
        if let Err(e) = io.await {
            return failed(report, KNOCK, ErrorKind::CLOSED, e.to_string());
        }
        report.timed_now(KNOCK, t);
        report.counters.bytes += knock.len() as u64;
        report.counters.count(KNOCKED_BYTES, knock.len() as u64);
        report.done();
        if answer.trim_end() == "OPEN" {
            report.counters.count(OPENED, 1);
            Outcome::Accepted
        } else {
            report.error(
                ErrorKey {
                    phase: KNOCK,
                    kind: SHUT,
                    code: 0,
                    detail: None,
                    text: "the door stayed shut".into(),
                },
                answer.trim_end().to_string(),
            );
            Outcome::Rejected
        }
    }

    async fn finish(&mut self, _report: &mut UnitReport) {}
}

#[derive(Serialize)]
struct Plan {
    #[serde(flatten)]
    head: PlanHead,
    workload: Workload,
}

impl PlanInfo for Plan {
    fn head(&self) -> &PlanHead {
        &self.head
    }
    fn workload(&self) -> &Workload {
        &self.workload
    }
    fn seed(&self) -> u64 {
        1
    }
    fn grace(&self) -> &str {
        "5s"
    }
}

/// A door on its own thread: answers `KNOCKS` connections, then stops.
fn door() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for _ in 0..KNOCKS {
            let Ok((s, _)) = l.accept() else { return };
            let mut line = String::new();
            let mut r = BufReader::new(s.try_clone().unwrap());
            if r.read_line(&mut line).is_err() {
                continue;
            }
            let n: u64 = line
                .trim_end()
                .trim_start_matches("KNOCK ")
                .parse()
                .unwrap_or(0);
            let answer: &[u8] = if n % 5 == 4 { b"SHUT\n" } else { b"OPEN\n" };
            let _ = (&s).write_all(answer);
        }
    });
    addr
}

async fn knock(dir: &Path) -> spate::results::Summary {
    let door = door();
    let plan = Plan {
        head: PlanHead::new::<Knocker>(vec!["knock".into()], "knock", &door.to_string()),
        workload: Workload::bounded(
            Model::Closed {
                users: 2,
                think_ms: 0.0,
            },
            Some(KNOCKS),
            None,
        ),
    };
    let setup = Setup::new(
        &plan,
        Some(dir),
        None,
        Vec::new(),
        Arc::new(AtomicBool::new(false)),
    )
    .unwrap();
    engine::run(setup, move |_, _| Knocker { door })
        .await
        .unwrap()
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn spate(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_spate"))
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{args:?}: {o:?}");
    String::from_utf8(o.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protocol_declared_outside_the_shared_modules_runs_and_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("knocks");
    let summary = knock(&dir).await;
    let t = &summary.totals;
    // Every fifth knock is refused: 40 opened, 10 shut, each in one class.
    assert_eq!(
        (t.attempted, t.accepted, t.rejected, t.failed),
        (50, 40, 10, 0)
    );
    assert_eq!(t.get(OPENED), 40);

    // The results directory says it all in the protocol's own words.
    let s = json(&dir.join("summary.json"));
    assert_eq!(s["words"]["unit"], "knocks", "{s}");
    assert_eq!(s["words"]["service"], serde_json::json!(["knock"]));
    assert_eq!(s["totals"]["doors_opened"], 40, "{s}");
    assert_eq!(s["totals"]["knock_bytes"], s["totals"]["bytes"], "{s}");
    let phases: Vec<&str> = (s["phases"].as_array().unwrap().iter())
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["connect", "knock", "response"], "{s}");
    let shut = (s["errors"].as_array().unwrap().iter())
        .find(|e| e["kind"] == "shut")
        .unwrap_or_else(|| panic!("no shut errors: {s}"));
    assert_eq!(shut["count"], 10);
    let plan = json(&dir.join("plan.json"));
    assert_eq!(plan["counters"][0]["counter"], "doors_opened", "{plan}");
    assert_eq!(plan["counters"][0]["what"], "doors that opened", "{plan}");
    assert!(dir.join("knock.hlog").is_file());

    // intervals.csv: the common columns, the service phase's and the protocol's own.
    let csv = std::fs::read_to_string(dir.join("intervals.csv")).unwrap();
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    for col in [
        "accepted",
        "knock_p50_us",
        "knock_max_us",
        "doors_opened",
        "knock_bytes",
    ] {
        assert!(head.contains(&col), "{col} missing: {head:?}");
    }
    let at = head.iter().position(|c| *c == "doors_opened").unwrap();
    let opened: u64 = lines
        .map(|l| l.split(',').nth(at).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(opened, 40, "{csv}");

    // The views read it without knowing it.
    let d = dir.to_str().unwrap();
    let text = spate(&["report", d, "--text"]);
    println!("{text}");
    assert!(text.contains("knocks/s"), "{text}");
    assert!(text.contains("doors opened 40"), "{text}");
    assert!(text.contains("knock "), "{text}");
    spate(&["report", d]);
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(
        html.contains("KNOCK written to the door&#39;s answer")
            || html.contains("KNOCK written to the door's answer"),
        "what the phase times, from plan.json"
    );
    let cmp = spate(&["compare", d, d]);
    assert!(cmp.contains("knock p99"), "{cmp}");
}
