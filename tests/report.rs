//! Reports as people read them: snapshot-pinned HTML/SVG/JSON/text from fixture results
//! directories, `spate report` and `spate compare` on real runs against the embedded
//! server, and the real report rendered in headless Chromium (screenshot kept in
//! target/test-artifacts/report.png). Regenerate snapshots with SPATE_BLESS=1.

mod common;

use common::{chromium, spate};
mod report_fixture;

use std::path::Path;
use std::process::Command;

use spate::report::{chart, compare, data, html, sweep};
use spate::serve;

const SPATE: &str = env!("CARGO_BIN_EXE_spate");

/// Compares `actual` to tests/snapshots/NAME; SPATE_BLESS=1 rewrites the file.
fn snapshot(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(name);
    if std::env::var_os("SPATE_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "{} missing: run with SPATE_BLESS=1 to create it",
            path.display()
        )
    });
    if expected != actual {
        let at = expected
            .chars()
            .zip(actual.chars())
            .position(|(a, b)| a != b)
            .unwrap_or(expected.len().min(actual.len()));
        let lo = at.saturating_sub(80);
        panic!(
            "{name} differs from the snapshot at char {at}:\n expected …{}…\n actual   …{}…\n\
             (SPATE_BLESS=1 rewrites it if the change is intended)",
            expected.chars().skip(lo).take(200).collect::<String>(),
            actual.chars().skip(lo).take(200).collect::<String>()
        );
    }
}

/// Every chart in the page: has a series path with drawn data, labelled axes, tick labels.
fn check_charts(page: &str) -> usize {
    let charts: Vec<&str> = page.split("<svg class=\"chart\"").skip(1).collect();
    for (i, c) in charts.iter().enumerate() {
        let c = &c[..c.find("</svg>").expect("closed svg")];
        let d = c
            .split("class=\"series\" d=\"")
            .nth(1)
            .unwrap_or_else(|| panic!("chart {i} has no series path: {c}"));
        let d = &d[..d.find('"').unwrap()];
        assert!(
            d.starts_with('M') && d.contains(" L"),
            "chart {i}: empty path {d}"
        );
        assert_eq!(
            c.matches("class=\"axis-label\"").count(),
            2,
            "chart {i}: axis labels"
        );
        assert!(
            c.matches("class=\"tick\"").count() >= 4,
            "chart {i}: tick labels"
        );
    }
    charts.len()
}

fn no_network(page: &str) {
    for bad in [
        "src=\"http",
        "href=\"http",
        "@import",
        "url(http",
        "<script src",
    ] {
        assert!(!page.contains(bad), "page refers to the network: {bad}");
    }
}

#[test]
fn fixture_report_has_every_section_and_is_pinned() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    report_fixture::write_run(&dir, 1, 1000.0, 5.0, true);
    let run = data::Run::read(&dir).unwrap();
    // The unknown appended column does not disturb reading by name.
    assert_eq!(run.intervals.col("accepted").unwrap().len(), 60);
    assert_eq!(run.phases.len(), 2);
    assert_eq!(run.phases[0].points.len(), 60);
    let page = html::render_run(&run);
    for section in [
        "What ran",
        "Headline",
        "Throughput",
        "Latency distribution",
        "transaction latency over time",
        "Errors over time by class",
        "451 4.3.0 Try again later",
        "connection refused &lt;&amp;&gt;",
        "Injected vs delivered",
        "Delivery latency distribution",
        "every message delivered",
        "Server resources",
        "host — percent (%)",
        "disk — KB per second",
        "queue — count",
        "spate smtp 127.0.0.1:2525 --users 20 -d 60s",
    ] {
        assert!(page.contains(section), "missing {section}");
    }
    let n = check_charts(&page);
    assert!(n >= 14, "{n} charts");
    no_network(&page);
    snapshot("report.html", &page);
    // summary.json as the results writer serializes it: the fields reports read.
    snapshot(
        "summary.json",
        &std::fs::read_to_string(dir.join("summary.json")).unwrap(),
    );
}

#[test]
fn a_missing_optional_file_drops_only_its_section() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    report_fixture::write_run(&dir, 2, 500.0, 2.0, false);
    let page = html::render_run(&data::Run::read(&dir).unwrap());
    assert!(page.contains("Throughput"));
    assert!(!page.contains("Server resources"));
    assert!(!page.contains("<h2>Delivery"));
    check_charts(&page);
}

/// A class with no timed response: its latency cells say so rather than 0 ms, in the
/// summary's null form and in older summaries' zeros alike; without classes.hlog the
/// table stands alone.
#[test]
fn a_class_without_timed_responses_is_not_measurable() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    report_fixture::write_run(&dir, 3, 500.0, 2.0, false);
    let mut run = data::Run::read(&dir).unwrap();
    let none = serde_json::json!({"count": 0, "mean": null, "p50": null, "p90": null, "p99": null, "max": null});
    let zeros =
        serde_json::json!({"count": 0, "mean": 0.0, "p50": 0, "p90": 0, "p99": 0, "max": 0});
    let timed = serde_json::json!({"count": 7, "mean": 1500.0, "p50": 1000, "p90": 2000, "p99": 3000, "max": 4000});
    run.summary.extra.insert(
        "rr".into(),
        serde_json::json!({"classes": {
            "ok": {"accepted": 7, "rejected": 0, "failed": 0, "response_us": timed},
            "dropped": {"accepted": 0, "rejected": 0, "failed": 5, "response_us": none},
            "old": {"accepted": 0, "rejected": 0, "failed": 2, "response_us": zeros},
        }}),
    );
    run.plan = Some(serde_json::json!({"classes": ["ok", "dropped", "old"]}));
    let page = html::render_run(&run);
    let na = "<td class=\"n\">not measurable</td>".repeat(5);
    for (name, failed) in [("dropped", 5), ("old", 2)] {
        let row = format!("<tr><td>{name}</td><td class=\"n\">0</td><td class=\"n\">0</td><td class=\"n\">{failed}</td><td class=\"n\">0</td>{na}</tr>");
        assert!(page.contains(&row), "no {row}");
    }
    assert!(page.contains("<tr><td>ok</td><td class=\"n\">7</td><td class=\"n\">0</td><td class=\"n\">0</td><td class=\"n\">7</td><td class=\"n\">1.50 ms</td><td class=\"n\">1.00 ms</td><td class=\"n\">2.00 ms</td><td class=\"n\">3.00 ms</td><td class=\"n\">4.00 ms</td></tr>"));
    // In the plan's order, not the summary's alphabetical one.
    assert!(page.find("<td>ok</td>") < page.find("<td>dropped</td>"));
    assert!(page.contains("No classes.hlog"));
    assert!(!page.contains("Latency per class over time"));
}

#[test]
fn chart_svg_is_pinned() {
    let mut c = chart::Chart::time("Throughput", "messages per second");
    c.push(chart::Series::line(
        "accepted",
        (1..=90)
            .map(|i| (i as f64, 100.0 + (i % 7) as f64))
            .collect(),
    ));
    c.push(
        chart::Series::line("max", (1..=90).map(|i| (i as f64, 120.0)).collect())
            .styled(chart::Style::Dashed),
    );
    c.markers.push(chart::Marker {
        x: 45.0,
        label: "knee".into(),
    });
    let svg = chart::render(&c);
    assert!(svg.contains(">1m</text>"), "time ticks: {svg}");
    snapshot("chart.svg", &svg);
    let mut p = chart::Chart::new(
        "dist",
        chart::XKind::LogPercentile,
        "percentile",
        "latency (ms)",
    );
    let mut h = spate::metrics::new_histogram();
    for v in 1..=10_000u64 {
        h.record(v).unwrap();
    }
    p.push(chart::Series::line("x", data::percentile_curve(&h)));
    let svg = chart::render(&p);
    for label in [">0%<", ">90%<", ">99%<", ">99.9%<", ">99.99%<"] {
        assert!(svg.contains(label), "{label}");
    }
    snapshot("percentile.svg", &svg);
}

#[test]
fn sweep_page_marks_saturation_and_is_pinned() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sweep");
    report_fixture::write_sweep(&dir);
    report_fixture::write_run(&dir.join("step-0"), 3, 100.0, 1.0, false);
    let sw = data::Sweep::read(&dir).unwrap();
    let page = sweep::render_sweep(&sw).replace(&dir.display().to_string(), "SWEEPDIR");
    for want in [
        "knee 16",
        "USL peak 21.8",
        "USL fit",
        "each repeat",
        "step-0",
        "knee rule: latency grew faster",
    ] {
        assert!(page.contains(want), "missing {want}");
    }
    assert!(check_charts(&page) >= 6);
    snapshot("sweep.html", &page);
    // The command picks the sweep page for a directory with sweep.csv.
    let o = Command::new(SPATE)
        .arg("report")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let written = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(written.contains("spate sweep over users"));
    assert!(!written.contains("generator-bound"));
    // Steps whose generator was the limit are named on the page.
    let mut sw = sw;
    sw.meta["generator_bound"] = serde_json::json!([32, 64]);
    let page = sweep::render_sweep(&sw);
    assert!(
        page.contains("generator-bound: users = 32, 64"),
        "no generator-bound note"
    );
}

#[test]
fn compare_says_noise_or_winner_and_is_pinned() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("before");
    let b = tmp.path().join("after");
    let c = tmp.path().join("faster");
    report_fixture::write_run(&a, 1, 1000.0, 5.0, false);
    report_fixture::write_run(&b, 2, 1010.0, 5.0, false);
    report_fixture::write_run(&c, 3, 2000.0, 2.0, false);
    let runs: Vec<data::Run> = [&a, &b, &c]
        .iter()
        .map(|d| data::Run::read(d).unwrap())
        .collect();
    let cmp = compare::compare(&runs);
    let thr = &cmp.metrics[0];
    assert_eq!(thr.name, "throughput");
    assert_eq!(thr.verdict, vec!["base", "within noise", "better"]);
    let p50 = &cmp.metrics[2];
    assert_eq!(p50.verdict[2], "better", "{p50:?}");
    // The same 40 errors in twice the messages: half the error rate, not "same".
    let err = cmp.metrics.iter().find(|m| m.name == "error rate").unwrap();
    assert_eq!(err.verdict[2], "better", "{err:?}");
    let norm = |s: String| s.replace(&tmp.path().display().to_string(), "TMP");
    snapshot("compare.txt", &norm(compare::render_text(&cmp)));
    snapshot(
        "compare.json",
        &norm(serde_json::to_string_pretty(&cmp).unwrap()),
    );
    let page = compare::render_html(&cmp, &runs);
    assert!(check_charts(&page) >= 4);
    assert!(page.contains("within noise"));
}

#[test]
fn user_errors_are_one_line() {
    let o = Command::new(SPATE)
        .args(["report", "/nonexistent/spate-dir"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    let tmp = tempfile::tempdir().unwrap();
    let o = Command::new(SPATE)
        .args(["report", tmp.path().to_str().unwrap()])
        .output()
        .unwrap();
    // Bad input like a directory that does not exist: exit 2.
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no summary.json"));
    let o = Command::new(SPATE)
        .args(["compare", tmp.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    // --tui without a terminal: a usage error before any load is sent.
    let o = Command::new(SPATE)
        .args(["smtp", "127.0.0.1:9", "--tui", "-d", "1s", "-o"])
        .arg(tmp.path().join("t"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--tui needs a terminal"));
}

async fn load_run(addr: &str, out: &Path, users: &str) {
    let o = spate(&[
        "smtp",
        addr,
        "--users",
        users,
        "-d",
        "4s",
        "-m",
        "5",
        "--size",
        "1k..4k",
        "-q",
        "-o",
        out.to_str().unwrap(),
        "--seed",
        "7",
    ])
    .await;
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
    assert!(
        !o.stderr.contains("no HTML report"),
        "report failed: {}",
        o.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_runs_report_compare_and_render_in_chromium() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    load_run(&addr, &a, "4").await;
    load_run(&addr, &b, "8").await;
    server.shutdown().await;

    // intervals.csv keeps the pinned columns in order (columns may be appended).
    let header = std::fs::read_to_string(a.join("intervals.csv")).unwrap();
    let header = header.lines().next().unwrap().to_string();
    let pinned_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/intervals.csv");
    if std::env::var_os("SPATE_BLESS").is_some() {
        std::fs::write(&pinned_path, format!("{header}\n")).unwrap();
    }
    let pinned = std::fs::read_to_string(&pinned_path).unwrap();
    assert!(
        header.starts_with(pinned.trim_end()),
        "intervals.csv header changed:\n pinned {pinned}\n actual {header}"
    );

    // A directory of runs: a report in each.
    let o = spate(&["report", tmp.path().to_str().unwrap()]).await;
    assert!(o.ok, "{}", o.stderr);
    assert_eq!(o.stdout.lines().count(), 2, "{}", o.stdout);

    // Written at the end of the run.
    let auto = std::fs::read_to_string(a.join("report.html")).expect("report.html of the run");
    assert!(auto.contains("Throughput"));

    let out = tmp.path().join("x.html");
    let o = spate(&[
        "report",
        a.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    assert_eq!(o.stdout.trim(), out.display().to_string());
    let page = std::fs::read_to_string(&out).unwrap();
    assert!(check_charts(&page) >= 6);
    no_network(&page);
    for want in [
        "bdat latency over time",
        "Units in flight",
        "Latency distribution",
    ] {
        assert!(page.contains(want), "missing {want}");
    }

    let cmp_html = tmp.path().join("cmp.html");
    let o = spate(&[
        "compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        &format!("--html={}", cmp_html.display()),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    assert!(o.stdout.contains("throughput (messages/s)"), "{}", o.stdout);
    assert!(o.stdout.contains("B b"), "{}", o.stdout);
    let cmp = std::fs::read_to_string(&cmp_html).unwrap();
    assert!(check_charts(&cmp) >= 4);

    if !common::have("chromium") {
        return;
    }
    let profile = tempfile::tempdir().unwrap();
    let (dom, log) = chromium(&["--dump-dom"], &out, profile.path());
    let console: Vec<&str> = log.lines().filter(|l| l.contains("CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:?}");
    // The DOM the browser built: every chart drawn, axes labelled.
    let n = check_charts(&dom);
    assert!(n >= 6, "{n} charts in the DOM");
    assert!(dom.contains("elapsed time") && dom.contains("latency (ms)"));
    let png = common::artifacts().join("report.png");
    let _ = std::fs::remove_file(&png);
    let (_, log) = chromium(
        &[
            &format!("--screenshot={}", png.display()),
            "--window-size=1280,4000",
        ],
        &out,
        profile.path(),
    );
    let meta = std::fs::metadata(&png).unwrap_or_else(|_| panic!("no screenshot: {log}"));
    assert!(meta.len() > 20_000, "screenshot too small: {}", meta.len());
    let (_, log) = chromium(
        &[
            &format!(
                "--screenshot={}",
                common::artifacts().join("compare.png").display()
            ),
            "--window-size=1280,2400",
        ],
        &cmp_html,
        profile.path(),
    );
    assert!(!log.contains("CONSOLE"), "{log}");
    eprintln!("screenshots in {}", common::artifacts().display());
}

/// `spate smtp --verify`: the report written at the end includes the delivery section drawn
/// from the real verify.json, deliveries.csv and delivery.hlog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_verification_shows_in_the_report() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mail");
    let run = tmp.path().join("run");
    let mut cfg = serve::Config::loopback();
    cfg.store.maildir = Some(root.clone());
    let server = serve::start(cfg).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let src = format!("maildir:{}", root.display());
    let o = spate(&[
        "smtp",
        &addr,
        "-n",
        "200",
        "-u",
        "4",
        "--to",
        "user{0..9}@example.test",
        "-q",
        "-o",
        run.to_str().unwrap(),
        "--verify",
        &src,
        "--verify-wait",
        "5s",
    ])
    .await;
    server.shutdown().await;
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
    assert!(run.join("verify.json").is_file());
    let page = std::fs::read_to_string(run.join("report.html")).unwrap();
    for want in [
        "<h2>Delivery",
        "Injected vs delivered",
        // The embedded server writes the file before its 250: the Maildir's times cannot
        // give latencies, and the report says so rather than drawing zeros.
        "Delivery latency is not measurable from this source",
    ] {
        assert!(page.contains(want), "missing {want}");
    }
    assert!(!page.contains("Delivery latency distribution"));
    assert!(!page.contains("delivery p99"));
    check_charts(&page);
}
