//! Server monitoring end to end: `spate smtp --monitor-*` against the embedded server,
//! watching processes whose CPU and memory are known, a fake Postfix queue and a tiny
//! Prometheus endpoint, then reading monitor.csv and summary.json.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use spate::serve;

const SPATE: &str = env!("CARGO_BIN_EXE_spate");

async fn spate(args: Vec<String>) -> common::Output {
    common::run_tool(SPATE, args, Duration::from_secs(60)).await
}

/// monitor.csv as columns of numbers (t_s included; the time column left out).
fn read_csv(path: &Path) -> (Vec<String>, HashMap<String, Vec<f64>>) {
    let text = std::fs::read_to_string(path).expect("monitor.csv");
    let mut lines = text.lines();
    let header: Vec<String> = lines.next().unwrap().split(',').map(String::from).collect();
    let mut cols: HashMap<String, Vec<f64>> = HashMap::new();
    for line in lines {
        let cells: Vec<&str> = line.split(',').collect();
        assert_eq!(cells.len(), header.len(), "ragged row {line}");
        for (h, c) in header.iter().zip(cells) {
            if h != "time" {
                cols.entry(h.clone()).or_default().push(
                    c.parse()
                        .unwrap_or_else(|_| panic!("{h}: '{c}' is not a number")),
                );
            }
        }
    }
    (header, cols)
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

use common::Kill;

/// A Prometheus text endpoint on loopback: a gauge and a counter that counts scrapes.
fn prom_server(stop: Arc<AtomicBool>) -> (u16, Arc<AtomicU64>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port();
    let scrapes = Arc::new(AtomicU64::new(0));
    let n = scrapes.clone();
    std::thread::spawn(move || {
        // Bounded: at most two minutes even if the test forgets to stop it.
        for _ in 0..12_000 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            match l.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
                    let mut r = BufReader::new(s.try_clone().unwrap());
                    let mut line = String::new();
                    while r.read_line(&mut line).unwrap_or(0) > 2 {
                        line.clear();
                    }
                    let k = n.fetch_add(1, Ordering::Relaxed) + 1;
                    let body = format!(
                        "# TYPE test_gauge gauge\ntest_gauge 42.5\n\
                         # TYPE test_requests_total counter\n\
                         test_requests_total{{method=\"get\"}} {k}\n\
                         test_requests_total{{method=\"post\"}} 7\nother_metric 1\n"
                    );
                    let _ = write!(
                        s,
                        "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n{body}"
                    );
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
    (port, scrapes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_processes_queue_and_prometheus_read_right() {
    if !common::have("python3") {
        return;
    }
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();

    // A process that holds 64 MB and burns half a core (10 ms busy, 10 ms asleep).
    // It says "ready" once the 64 MB are allocated.
    let mut burner = Kill(
        Command::new("python3")
            .args([
                "-c",
                "import time\nb = b'x' * (64 << 20)\nprint('ready', flush=True)\n\
                 end = time.time() + 20\n\
                 while time.time() < end:\n    t = time.time() + 0.01\n    \
                 while time.time() < t: pass\n    time.sleep(0.01)\n",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Two processes with a name of their own, followed by name.
    let sleep_bin = dir.path().join("spmonsleep");
    std::fs::copy("/bin/sleep", &sleep_bin).unwrap();
    let _s1 = Kill(Command::new(&sleep_bin).arg("30").spawn().unwrap());
    let _s2 = Kill(Command::new(&sleep_bin).arg("30").spawn().unwrap());
    // A third that goes away during the run: the group follows it.
    let _s3 = Kill(Command::new(&sleep_bin).arg("3").spawn().unwrap());
    // A fake Postfix queue: 3 incoming, 2 active (hashed), 0 deferred, 1 hold.
    let q = dir.path().join("queue");
    for d in ["incoming", "active/A", "deferred", "hold"] {
        std::fs::create_dir_all(q.join(d)).unwrap();
    }
    for f in [
        "incoming/1",
        "incoming/2",
        "incoming/3",
        "active/A/4",
        "active/A/5",
        "hold/6",
    ] {
        std::fs::write(q.join(f), "x").unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (prom_port, scrapes) = prom_server(stop.clone());
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(burner.0.stdout.take().unwrap()),
        &mut ready,
    )
    .unwrap();
    assert_eq!(ready.trim(), "ready");

    let out = dir.path().join("r");
    let pid = burner.0.id();
    // An independent reading over the same window: on a busy machine the burner gets less
    // than its half core, and the monitor must see what it really got.
    let ticks = || {
        let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let f: Vec<&str> = st.rsplit_once(')').unwrap().1.split_whitespace().collect();
        f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()
    };
    let (t0, c0) = (std::time::Instant::now(), ticks());
    let o = spate(
        [
            "smtp",
            &addr,
            "--rate",
            "50/s",
            "--duration",
            "4s",
            "--monitor-pid",
            &pid.to_string(),
            "--monitor-process",
            "spmonsleep,nosuchprocname",
            "--monitor-queue",
            q.to_str().unwrap(),
            "--monitor-prom",
            &format!("http://127.0.0.1:{prom_port}/metrics"),
            "--monitor-series",
            "test_gauge,test_requests_total",
            "-o",
            out.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
    )
    .await;
    let truth = (ticks() - c0) / 100.0 / t0.elapsed().as_secs_f64() * 100.0;
    stop.store(true, Ordering::Relaxed);
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);

    let (header, cols) = read_csv(&out.join("monitor.csv"));
    assert_eq!(header[0], "t_s");
    assert_eq!(header[1], "time");
    let rows = cols["t_s"].len();
    assert!((3..=6).contains(&rows), "{rows} rows");
    let p = format!("proc.pid{pid}");
    let cpu = mean(&cols[&format!("{p}.cpu_pct")]);
    assert!(
        truth > 10.0 && truth < 60.0,
        "the burner used {truth}% of a core"
    );
    assert!(
        (cpu - truth).abs() < 8.0,
        "burner CPU read {cpu}%, /proc says {truth}% (a half-core burner on a busy machine)"
    );
    let rss = mean(&cols[&format!("{p}.rss_mb")]);
    assert!(
        (64.0..=100.0).contains(&rss),
        "burner RSS {rss} MB (64 MB + python)"
    );
    assert!(cols[&format!("{p}.fds")].iter().all(|&f| f >= 3.0));
    let count = &cols["proc.spmonsleep.count"];
    assert_eq!(count[0], 3.0, "{count:?}");
    assert_eq!(*count.last().unwrap(), 2.0, "{count:?}");
    assert!(cols["proc.spmonsleep.cpu_pct"].iter().all(|&c| c < 5.0));
    assert!(cols["proc.nosuchprocname.count"].iter().all(|&c| c == 0.0));
    assert!(cols["proc.nosuchprocname.rss_mb"].iter().all(|&c| c == 0.0));
    // The host columns are there and sane.
    for c in [
        "host.cpu.user_pct",
        "host.cpu.system_pct",
        "host.cpu.iowait_pct",
    ] {
        assert!(cols[c].iter().all(|&v| (0.0..=100.5).contains(&v)), "{c}");
    }
    assert!(mean(&cols["host.mem.used_mb"]) > rss);
    // Loopback carried the SMTP traffic: 50 messages/s of about 1.5 kB each way.
    assert!(
        mean(&cols["net.lo.rx_kbps"]) > 30.0,
        "{:?}",
        cols["net.lo.rx_kbps"]
    );
    assert!(header
        .iter()
        .any(|h| h.starts_with("disk.") && h.ends_with(".ms_per_io")));
    assert!(header.iter().all(|h| h == "t_s"
        || h == "time"
        || [
            "_pct",
            "_mb",
            "_kbps",
            "_ms",
            "_io",
            ".fds",
            ".count",
            ".incoming",
            ".active",
            ".deferred",
            ".hold",
            ".value",
            ".get",
            ".post"
        ]
        .iter()
        .any(|s| h.ends_with(s))));
    // Queue depth of the fake queue.
    for (q, n) in [
        ("incoming", 3.0),
        ("active", 2.0),
        ("deferred", 0.0),
        ("hold", 1.0),
    ] {
        assert!(
            cols[&format!("queue.postfix.{q}")].iter().all(|&v| v == n),
            "{q}"
        );
    }
    // Prometheus: the gauge as served, the counter going up with each scrape.
    assert!(cols["prom.test_gauge.value"].iter().all(|&v| v == 42.5));
    let get = &cols["prom.test_requests_total.get"];
    assert!(get.last().unwrap() > get.first().unwrap(), "{get:?}");
    assert!(cols["prom.test_requests_total.post"]
        .iter()
        .all(|&v| v == 7.0));
    assert!(!header.iter().any(|h| h.contains("other_metric")));
    assert!(scrapes.load(Ordering::Relaxed) >= 4);

    // The summary's section.
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let m = &s["extra"]["monitor"];
    assert_eq!(m["samples"].as_u64().unwrap() as usize, rows);
    assert_eq!(m["columns"].as_array().unwrap().len(), header.len() - 2);
    let mcpu = m["mean"][format!("{p}.cpu_pct")].as_f64().unwrap();
    assert!((mcpu - cpu).abs() < 0.01);
    assert!(m["self_rss_mb"]["end"].as_f64().unwrap() > 1.0);
    let cost = m["cost_cpu_pct_of_core"].as_f64().unwrap();
    assert!(cost < 5.0, "sampling cost {cost}% of a core (debug build)");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_monitor_options_are_one_line_usage_errors() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    for (args, want) in [
        (vec!["--monitor-pid", "999999999"], "no such process"),
        (
            vec!["--monitor-queue", "/nonexistent/queue"],
            "not a directory",
        ),
        (
            vec!["--monitor-prom", "http://127.0.0.1:9/metrics"],
            "--monitor-series",
        ),
        (vec!["--monitor", "--leak-warn", "lots"], "--leak-warn"),
    ] {
        let mut a = vec!["smtp".to_string(), addr.clone(), "-n".into(), "1".into()];
        a.extend(args.iter().map(|s| s.to_string()));
        let o = spate(a).await;
        assert!(!o.ok);
        assert!(o.stderr.contains(want), "{args:?}: {}", o.stderr);
        assert_eq!(o.stderr.trim().lines().count(), 1, "{}", o.stderr);
    }
    server.shutdown().await;
}
