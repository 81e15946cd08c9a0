//! The report of a 63-hour run, without waiting 63 hours: spate's own results writer
//! (`results::Writer`, `results::TaggedLog`, `SummaryHeader::summary`) is fed synthetic
//! intervals whose time advances 63 hours (the writer takes its time from the intervals,
//! not the clock), as `spate rr` at E3's shape: a TLS handshake per request, hit and miss
//! classes, an error now and then, and server monitoring (monitor.csv, written here in
//! the monitor's layout: its values come from /proc, which cannot be made up).
//!
//! The test checks what a browser is handed (points per chart series, bytes) and that the
//! figures are the run's. `write_63_hour_run` (ignored) makes the directory the faithful
//! way, one-second intervals throughout, for bench/report-63h.sh to time `spate report`.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use hdrhistogram::Histogram;
use spate::metrics::{new_histogram, ErrorKey, ErrorKind, Phase, Shard};
use spate::report::{chart, data, html};
use spate::results::SummaryHeader;
use spate::results::{TaggedLog, Writer};
use spate::session::rr::classes::latency_json;

mod report_fixture;
use report_fixture::Lcg;

const HOURS: f64 = 63.0;
const DETAIL: Duration = Duration::from_secs(3600);
const CLASSES: [&str; 2] = ["hit", "miss"];

/// About `median`, with a long right tail.
fn latency(rng: &mut Lcg, median: f64) -> u64 {
    let u = rng.next().max(1e-9);
    (median * (0.6 + 0.4 * (-u.ln()))) as u64
}

/// What the generator made, counted on its own.
struct Made {
    totals: Shard,
    classes: Vec<Histogram<u64>>,
    requests: u64,
    failed: u64,
    /// Rows written: intervals.csv, monitor.csv.
    rows: usize,
}

/// One interval of `len_s` seconds at `rate`/s (a daily swing of ±20 %) into `iv` and
/// `classes` (each class's response times), and the same values into `made`'s totals
/// (recorded twice rather than added: a debug build's `Histogram::add` is slow).
fn interval(
    rng: &mut Lcg,
    t0_s: f64,
    len_s: f64,
    rate: f64,
    (iv, classes): (&mut Shard, &mut [Histogram<u64>]),
    made: &mut Made,
) {
    let day = (t0_s / 86_400.0 * std::f64::consts::TAU).sin();
    let n = (rate * len_s * (1.0 + 0.2 * day)).round() as u64;
    for _ in 0..n {
        iv.counters.attempted += 1;
        made.requests += 1;
        // A timeout every ten thousand requests or so.
        if rng.next() < 1e-4 {
            iv.counters.failed += 1;
            made.failed += 1;
            let key = ErrorKey {
                phase: Phase::RESPONSE,
                kind: ErrorKind::TIMEOUT,
                code: 0,
                detail: None,
                text: "response timeout".into(),
            };
            iv.error(key.clone(), || "(no response in 5s)".into());
            made.totals.error(key, || "(no response in 5s)".into());
            continue;
        }
        let miss = rng.next() < 0.1;
        let connect = latency(rng, 120.0);
        let tls = latency(rng, 1_500.0);
        let request = latency(rng, 25.0);
        let first_byte = latency(rng, if miss { 20_000.0 } else { 300.0 });
        let response = connect + tls + request + first_byte;
        for (p, v) in [
            (Phase::CONNECT, connect),
            (Phase::TLS, tls),
            (spate::session::rr::phase::REQUEST, request),
            (spate::session::rr::phase::FIRST_BYTE, first_byte),
            (Phase::RESPONSE, response),
        ] {
            iv.record(p, v);
            made.totals.record(p, v);
        }
        classes[usize::from(miss)].record(response).unwrap();
        made.classes[usize::from(miss)].record(response).unwrap();
        let c = &mut iv.counters;
        c.accepted += 1;
        c.connections += 1;
        c.tls_connections += 1;
        c.bytes += 180;
    }
}

/// monitor.csv as the monitor writes it: a row a second for the detail period, then the
/// minute's means.
fn monitor_row(out: &mut String, start: SystemTime, t_s: f64, rng: &mut Lcg) {
    let wall = start + Duration::from_secs_f64(t_s);
    let cpu = 20.0 + 10.0 * rng.next();
    // The server's memory creeps up by 1 MB an hour.
    let rss = 80.0 + t_s / 3600.0;
    out.push_str(&format!(
        "{t_s:.3},{},{cpu:.3},{:.3},0,{:.3},{:.3},{rss:.3}\n",
        spate::results::rfc3339(wall),
        cpu / 4.0,
        2048.0 + rss,
        cpu * 0.8,
    ));
}

/// Writes a `hours`-long run into `dir`. `step_s`: the interval length after the detail
/// period; 1 is the engine's, 60 makes the same rows (a minute is gathered either way)
/// from minute-long intervals, which a debug build writes in seconds.
fn write_run(dir: &Path, hours: f64, rate: f64, step_s: f64) -> Made {
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_340_000);
    let plan = serde_json::json!({
        "protocol": "rr", "target": "127.0.0.1:7443", "classes": CLASSES,
        "note": "synthetic: tests/report_long.rs",
    });
    let mut w = Writer::create(dir, &plan, start, None, DETAIL).unwrap();
    let labels: Vec<String> = CLASSES.iter().map(|c| c.to_string()).collect();
    let mut log = TaggedLog::create(
        &dir.join("classes.hlog"),
        "response time per request class",
        start,
        &labels,
        DETAIL,
    )
    .unwrap();
    let mut monitor = String::from(
        "t_s,time,host.cpu.user_pct,host.cpu.system_pct,host.cpu.iowait_pct,host.mem.used_mb,proc.nginx.cpu_pct,proc.nginx.rss_mb\n",
    );
    let mut rng = Lcg(63);
    let mut made = Made {
        totals: Shard::default(),
        classes: CLASSES.iter().map(|_| new_histogram()).collect(),
        requests: 0,
        failed: 0,
        rows: 0,
    };
    let end = hours * 3600.0;
    let mut t = 0.0;
    let mut classes: Vec<Histogram<u64>> = CLASSES.iter().map(|_| new_histogram()).collect();
    while t < end - 1e-9 {
        let len = if t < DETAIL.as_secs_f64() {
            1.0
        } else {
            step_s
        };
        let len = len.min(end - t);
        let mut iv = Shard::default();
        for h in classes.iter_mut().filter(|h| !h.is_empty()) {
            h.reset();
        }
        interval(&mut rng, t, len, rate, (&mut iv, &mut classes), &mut made);
        made.totals.counters.add(&iv.counters);
        w.interval(&iv, t, len, 30).unwrap();
        log.interval(t, len, &classes).unwrap();
        t += len;
        let whole = ((t + 1e-6) % 60.0) < 1e-3;
        if t <= DETAIL.as_secs_f64() + 1e-6 || whole || t >= end - 1e-9 {
            monitor_row(&mut monitor, start, t, &mut rng);
            made.rows += 1;
        }
    }
    log.finish().unwrap();
    std::fs::write(dir.join("monitor.csv"), monitor).unwrap();
    let header = SummaryHeader {
        run_id: "synthetic-63h".into(),
        command: ["spate", "rr", "127.0.0.1:7443", "--requests", "reqs.txt"]
            .iter()
            .chain(&["--rate", "30/s", "-d", "63h", "--tls", "--per-request"])
            .map(|s| s.to_string())
            .collect(),
        protocol: "rr".into(),
        words: spate::results::UnitWords::before_declared("rr"),
        target: "127.0.0.1:7443".into(),
        started: start,
    };
    let mut s = header.summary(
        &made.totals,
        end,
        true,
        false,
        (Duration::from_secs(3 * 3600), "process"),
    );
    let classes: serde_json::Map<String, serde_json::Value> = CLASSES
        .iter()
        .zip(&made.classes)
        .map(|(name, h)| {
            let v = serde_json::json!({
                "accepted": h.len(), "rejected": 0, "failed": 0, "response_us": latency_json(h),
            });
            (name.to_string(), v)
        })
        .collect();
    s.extra
        .insert("rr".into(), serde_json::json!({ "classes": classes }));
    w.write_summary(&s, true).unwrap();
    w.finish().unwrap();
    made
}

/// The number of points of every series path in the page.
fn path_points(page: &str) -> Vec<usize> {
    page.split("class=\"series\" d=\"")
        .skip(1)
        .map(|d| d[..d.find('"').unwrap()].matches(" L").count() + 1)
        .collect()
}

fn cell(page: &str, name: &str) -> String {
    let at = page.find(&format!("<td>{name}</td>")).expect(name);
    let rest = &page[at..];
    rest[..rest.find("</tr>").unwrap()].to_string()
}

/// The page a browser gets of a 63-hour run is bounded (at most `chart::MAX_POINTS` + 2
/// points a series, under 2 MB), and its figures are the run's: counts, exact whole-run
/// percentiles, the rows of one second and of one minute.
#[test]
fn the_report_of_a_63_hour_run_is_bounded_and_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let t = Instant::now();
    let made = write_run(&dir, HOURS, 5.0, 60.0);
    eprintln!("written in {:.2} s", t.elapsed().as_secs_f64());
    // What `spate report` does (report::render_to), timed in its two parts.
    let t = Instant::now();
    let run = data::Run::read(&dir).unwrap();
    eprintln!("read in {:.2} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let page = html::render_run(&run);
    eprintln!("rendered in {:.2} s", t.elapsed().as_secs_f64());

    // 3600 rows of a second, then 62 hours of minutes.
    let rows = 3600 + 62 * 60;
    assert_eq!(run.intervals.rows.len(), rows);
    assert_eq!(run.monitor.as_ref().unwrap().rows.len(), rows);
    assert_eq!(made.rows, rows);
    for p in &run.phases {
        assert_eq!(p.points.len(), rows, "{}", p.phase);
    }
    assert_eq!(run.classes.len(), 2);

    // What the browser is handed.
    let points = path_points(&page);
    assert!(points.len() >= 20, "{} series", points.len());
    let most = *points.iter().max().unwrap();
    eprintln!(
        "{} bytes, {} series, at most {most} points in one",
        page.len(),
        points.len()
    );
    assert!(most <= chart::MAX_POINTS + 2, "a series of {most} points");
    assert!(page.matches("<circle").count() <= 100);
    assert!(page.len() < 2_000_000, "{} bytes", page.len());

    // The run's figures.
    let s = &run.summary;
    assert_eq!(s.totals.attempted, made.requests);
    assert_eq!(s.totals.failed, made.failed);
    let logged: u64 = run.errors.iter().map(|e| e.count).sum();
    assert_eq!(logged, made.failed, "errors.jsonl");
    assert!(page.contains("errors per second"));
    assert!(page.contains(&format!(
        "<div class=\"v\">{}</div><div class=\"k\">requests accepted</div>",
        made.requests - made.failed
    )));
    let response = made.totals.hist(Phase::RESPONSE).unwrap();
    let read = run.phase("response").unwrap();
    assert_eq!(read.total.len(), response.len());
    for q in [0.5, 0.99, 0.999, 1.0] {
        assert_eq!(
            read.total.value_at_quantile(q),
            response.value_at_quantile(q),
            "q {q}"
        );
    }
    assert!(cell(&page, "response").contains(&format!(
        "<td class=\"n\">{}</td><td class=\"n\">{}</td>",
        response.len(),
        html::ms(s.phase("response").unwrap().mean_us)
    )));
    for (name, h) in CLASSES.iter().zip(&made.classes) {
        let log = run.classes.iter().find(|l| l.phase == *name).unwrap();
        assert_eq!(log.total.len(), h.len(), "{name}");
        assert_eq!(log.total.max(), h.max(), "{name}");
        let row = cell(&page, name);
        assert!(
            row.contains(&format!(
                "<td class=\"n\">{n}</td><td class=\"n\">0</td><td class=\"n\">0</td><td class=\"n\">{n}</td>",
                n = h.len()
            )),
            "{row}"
        );
        assert!(row.contains(&html::ms(h.value_at_quantile(0.99) as f64)));
    }
    assert!(page.contains(">60h</text>") || page.contains(">63h</text>"));
}

/// Makes the 63-hour directory the way a run does, one-second intervals throughout, in
/// $SPATE_LONG_RUN_DIR (bench/report-63h.sh; a release build takes about a minute).
#[test]
#[ignore = "writes a 63-hour results directory: bench/report-63h.sh"]
fn write_63_hour_run() {
    let dir = std::env::var_os("SPATE_LONG_RUN_DIR").expect("set SPATE_LONG_RUN_DIR");
    let dir = Path::new(&dir);
    assert!(
        !dir.join("summary.json").exists(),
        "{} has a run",
        dir.display()
    );
    let t = Instant::now();
    let made = write_run(dir, HOURS, 30.0, 1.0);
    eprintln!(
        "wrote {} requests, {} rows per file, in {:.1} s",
        made.requests,
        made.rows,
        t.elapsed().as_secs_f64()
    );
}
