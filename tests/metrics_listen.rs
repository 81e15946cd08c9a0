//! `--metrics-listen`: a shard of an SMTP run against the embedded server, scraped over
//! plain HTTP while it runs and once more for its final figures, which must be
//! summary.json's; a bad or busy address ends the command in one line before it starts.
//!
//! The final scrape cannot race the end of the process: with `--metrics-linger` the run
//! keeps serving its final figures (`spate_run_finished 1`) until one scrape has read
//! them, so the test polls until it reads them and the process exits right after.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spate::serve;

/// One GET over a fresh connection: the response's head and body, or None when nothing
/// listens (yet).
fn get(addr: SocketAddr, path: &str) -> Option<(String, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/plain\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    Some((head.to_string(), body.to_string()))
}

/// A port nothing listens on right now (bound, read, released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One scrape's samples: the series as written → value.
struct Scrape(Vec<(String, f64)>);

impl Scrape {
    fn of(body: &str) -> Scrape {
        let lines = spate::monitor::prom::parse(body);
        assert!(!lines.is_empty(), "no samples in {body}");
        Scrape(
            lines
                .iter()
                .map(|l| (l.series.to_string(), l.value))
                .collect(),
        )
    }

    /// The value of the one series named `name` whose labels include `with`.
    fn value(&self, name: &str, with: &str) -> Option<f64> {
        let mut found = self
            .0
            .iter()
            .filter(|(s, _)| s.starts_with(&format!("{name}{{")) && s.contains(with));
        let v = found.next().map(|(_, v)| *v);
        assert!(
            found.next().is_none(),
            "{name} {with}: more than one series"
        );
        v
    }

    fn counter(&self, name: &str) -> u64 {
        self.value(&format!("spate_{name}_total"), "")
            .unwrap_or_else(|| panic!("no spate_{name}_total")) as u64
    }
}

/// Scrapes `addr` until the run's final figures are served: the first scrape with
/// accepted messages that are not final yet, and the final one.
fn follow(addr: SocketAddr, limit: Duration, ended: &AtomicBool) -> (Scrape, Scrape, Instant) {
    let deadline = Instant::now() + limit;
    let mut during = None;
    loop {
        assert!(
            Instant::now() < deadline,
            "no final figures within {limit:?}"
        );
        assert!(
            !ended.load(Ordering::SeqCst),
            "the run ended before its final figures were read"
        );
        let Some((head, body)) = get(addr, "/metrics") else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
        assert!(
            head.contains("Content-Type: text/plain; version=0.0.4"),
            "{head}"
        );
        let s = Scrape::of(&body);
        let finished = s
            .value("spate_run_finished", "")
            .expect("spate_run_finished");
        if finished == 1.0 {
            let during = during.expect("a scrape while the run was going on");
            return (during, s, Instant::now());
        }
        if during.is_none() && s.counter("accepted") > 0 {
            during = Some(s);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A `spate smtp` run with `--metrics-listen` on a free port and `extra` options, against
/// an embedded server, going on in the background.
struct Run {
    metrics: SocketAddr,
    out: PathBuf,
    /// Set when the process has exited.
    ended: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<common::Output>,
    _server: serve::Running,
    _tmp: tempfile::TempDir,
}

impl Run {
    async fn start(extra: &'static [&'static str]) -> Run {
        let server = serve::start(serve::Config::loopback()).await.unwrap();
        let target = server.addrs.smtp.unwrap().to_string();
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        // Shard I listens on the port given + I: give the free port less I.
        let index: u16 = extra
            .iter()
            .position(|a| *a == "--shard")
            .and_then(|i| extra[i + 1].split('/').next()?.parse().ok())
            .unwrap_or(0);
        let listen = format!("127.0.0.1:{}", metrics.port() - index);
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("run");
        let ended = Arc::new(AtomicBool::new(false));
        let (flag, dir) = (ended.clone(), out.clone());
        let task = tokio::spawn(async move {
            let mut args = vec!["smtp", &target, "--metrics-listen", &listen, "-q"];
            args.extend(["-o", dir.to_str().unwrap()]);
            args.extend(extra);
            let o = common::spate(&args).await;
            flag.store(true, Ordering::SeqCst);
            o
        });
        Run {
            metrics,
            out,
            ended,
            task,
            _server: server,
            _tmp: tmp,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scraped_run_ends_with_its_summary_figures() {
    let run = Run::start(&[
        "--users",
        "2",
        "--duration",
        "3s",
        "--shard",
        "1/2",
        "--run-id",
        "live-1",
        "--metrics-linger",
        "60s",
    ])
    .await;
    let (metrics, ended) = (run.metrics, run.ended.clone());
    let followed =
        tokio::task::spawn_blocking(move || follow(metrics, Duration::from_secs(90), &ended)).await;
    let o = run.task.await.unwrap();
    let Ok((during, last, read_at)) = followed else {
        panic!("{o:?}");
    };
    let exited = read_at.elapsed();
    assert_eq!(o.code, Some(0), "{o:?}");
    // Shard 1 listened on the port given + 1, and its results say where.
    let at: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.out.join("metrics.json")).unwrap())
            .unwrap();
    assert_eq!(at["address"], metrics.to_string(), "{at}");
    // The linger ended with the final scrape, not after its 60 s.
    assert!(exited < Duration::from_secs(30), "exited {exited:?} after");
    assert!(get(metrics, "/metrics").is_none(), "still listening");

    let s = common::summary(&run.out);
    let totals = s["totals"].as_object().unwrap();
    assert!(totals["accepted"].as_u64().unwrap() > 0);
    for (name, v) in totals {
        let v = v.as_u64().unwrap();
        // A microsecond total is exposed in seconds, as Prometheus names times.
        match name.strip_suffix("_us") {
            Some(base) => {
                let secs = last
                    .value(&format!("spate_{base}_seconds_total"), "")
                    .unwrap_or_else(|| panic!("no spate_{base}_seconds_total"));
                assert!((secs - v as f64 / 1e6).abs() < 1e-9, "{name}");
            }
            None => assert_eq!(last.counter(name), v, "{name}"),
        }
    }
    let accepted = |x: &Scrape| x.counter("accepted");
    assert!(0 < accepted(&during) && accepted(&during) <= accepted(&last));
    assert_eq!(during.value("spate_run_finished", ""), Some(0.0));
    for (series, _) in &last.0 {
        assert!(
            series.contains(r#"{run_id="live-1",shard="1/2",protocol="smtp""#),
            "{series}"
        );
    }

    let phases = s["phases"].as_array().unwrap();
    assert!(phases.len() >= 4, "{phases:?}");
    for p in phases {
        let name = p["phase"].as_str().unwrap();
        let with = format!(r#"phase="{name}""#);
        let count = p["count"].as_u64().unwrap() as f64;
        assert_eq!(
            last.value("spate_phase_seconds_count", &with),
            Some(count),
            "{name}"
        );
        let inf = format!(r#"{with},le="+Inf""#);
        assert_eq!(
            last.value("spate_phase_seconds_bucket", &inf),
            Some(count),
            "{name}"
        );
        let buckets: Vec<f64> = last
            .0
            .iter()
            .filter(|(s, _)| s.starts_with("spate_phase_seconds_bucket{") && s.contains(&with))
            .map(|(_, v)| *v)
            .collect();
        assert!(
            buckets.windows(2).all(|w| w[0] <= w[1]),
            "{name}: {buckets:?}"
        );
        // The mean from the histogram's sum, against summary.json's (both from HDR).
        let sum = last.value("spate_phase_seconds_sum", &with).unwrap();
        let mean_us = p["mean_us"].as_f64().unwrap();
        assert!(
            (sum / count * 1e6 - mean_us).abs() <= 0.1 + mean_us * 1e-9,
            "{name}: sum {sum} count {count} mean {mean_us}"
        );
        // What --metrics-listen reports is what the run recorded, phase by phase.
        assert!(
            during
                .value("spate_phase_seconds_count", &with)
                .unwrap_or(0.0)
                <= count,
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_paths_are_not_found_while_serving() {
    let run = Run::start(&["--duration", "2s"]).await;
    let (metrics, ended) = (run.metrics, run.ended.clone());
    let head = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some((head, _)) = get(metrics, "/") {
                return head;
            }
            assert!(!ended.load(Ordering::SeqCst), "the run ended unheard");
            assert!(Instant::now() < deadline, "nothing listens on {metrics}");
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await;
    let o = run.task.await.unwrap();
    let head = head.unwrap_or_else(|_| panic!("{o:?}"));
    assert!(head.starts_with("HTTP/1.1 404 "), "{head}");
    assert_eq!(o.code, Some(0), "{o:?}");
}

/// The one line a refused command prints, and its exit code.
fn refused(o: &common::Output, code: i32, says: &str) {
    assert_eq!(o.code, Some(code), "{o:?}");
    assert_eq!(o.stderr.lines().count(), 1, "{o:?}");
    assert!(o.stderr.contains(says), "{o:?}");
    assert!(o.stdout.is_empty(), "{o:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_or_busy_address_ends_the_command_before_the_run() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let target = server.addrs.smtp.unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let dir = out.to_str().unwrap();
    let run = |listen: &str| {
        let args = [
            "smtp",
            &target,
            "-n",
            "5",
            "-o",
            dir,
            "--metrics-listen",
            listen,
        ];
        let args = args.map(String::from).to_vec();
        common::run_tool(common::SPATE, args, Duration::from_secs(60))
    };
    for bad in ["localhost:9464", "127.0.0.1", "9464", "127.0.0.1:99999"] {
        refused(&run(bad).await, 2, "--metrics-listen");
    }
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let o = run(&busy.local_addr().unwrap().to_string()).await;
    refused(&o, 1, "cannot listen on");
    assert!(o.stderr.contains("--metrics-listen"), "{o:?}");
    assert!(!out.exists(), "a run that cannot start writes nothing");
    assert_eq!(server.stats.snapshot().messages_accepted, 0);
    let o = common::spate(&["smtp", &target, "--metrics-linger", "5s"]).await;
    refused(&o, 2, "--metrics-listen");
}
