//! Deterministic results directories for the report tests: every file a run, a verification,
//! the monitor and a sweep write, in their documented formats, from a tiny LCG.
#![allow(dead_code)]

use std::fmt::Write as _;
use std::path::Path;

use base64::Engine as _;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;

pub struct Lcg(pub u64);
impl Lcg {
    pub fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

const INTERVALS: usize = 60;

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).unwrap()
}

fn hlog_line(out: &mut String, t0: f64, h: &Histogram<u64>) {
    let mut buf = Vec::new();
    V2DeflateSerializer::new().serialize(h, &mut buf).unwrap();
    let enc = base64::engine::general_purpose::STANDARD.encode(&buf);
    let _ = writeln!(out, "{t0:.3},1.000,{:.3},{enc}", h.max() as f64 / 1000.0);
}

fn hlog_header(phase: &str) -> String {
    format!(
        "#[spate phase {phase}: values in microseconds, Interval_Max in milliseconds]\n\
         #[StartTime: 1795340000.000 (seconds since epoch), 2026-11-22T09:33:20.000000Z]\n\
         #[BaseTime: 1795340000.000 (seconds since epoch)]\n\
         \"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n"
    )
}

/// A 60-second run: `rate` messages/s (± 5%), latencies around `lat_ms`, two error classes,
/// and (when `extras`) monitor.csv, verify.json, deliveries.csv and delivery.hlog.
pub fn write_run(dir: &Path, seed: u64, rate: f64, lat_ms: f64, extras: bool) {
    std::fs::create_dir_all(dir).unwrap();
    let mut rng = Lcg(seed);
    // An unknown column appended at the end, as other writers may do.
    let mut iv = String::from(
        "t_s,time,attempted,accepted,rejected,failed,rcpt_accepted,rcpt_rejected,bytes,\
         connections,tls_connections,connect_failures,late,dropped,active,errors,\
         response_p50_us,response_p99_us,transaction_p50_us,transaction_p99_us,\
         transaction_max_us,future_column\n",
    );
    let mut tx = hlog_header("transaction");
    let mut resp = hlog_header("response");
    let mut errors = String::new();
    let mut tx_total = hist();
    let mut resp_total = hist();
    let (mut att, mut acc, mut rej, mut bytes, mut errs) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut rcpt_err = 0u64;
    let mut refused = 0u64;
    for i in 0..INTERVALS {
        let t0 = i as f64;
        let accepted = (rate * (0.95 + 0.1 * rng.next())).round() as u64;
        let rejected = if (10..20).contains(&i) { 3 } else { 0 };
        let conn_fail = if (40..45).contains(&i) { 2 } else { 0 };
        let (mut h, mut r) = (hist(), hist());
        for _ in 0..200 {
            let base = lat_ms * 1000.0 * (0.5 + rng.next());
            let tail = if rng.next() < 0.02 { 8.0 } else { 1.0 };
            let v = (base * tail) as u64;
            h.record(v.max(1)).unwrap();
            r.record(v + 300).unwrap();
        }
        hlog_line(&mut tx, t0, &h);
        hlog_line(&mut resp, t0, &r);
        tx_total.add(&h).unwrap();
        resp_total.add(&r).unwrap();
        let b = accepted * 2048;
        let e = rejected + conn_fail;
        let _ = writeln!(
            iv,
            "{:.3},2026-11-22T09:33:{:02}.000000Z,{},{},{},{},{},{},{},{},0,{},0,0,{},{},{},{},{},{},{},7",
            t0 + 1.0,
            (20 + i + 1) % 60,
            accepted + rejected + conn_fail,
            accepted,
            rejected,
            conn_fail,
            accepted,
            rejected,
            b,
            accepted / 10,
            conn_fail,
            if i < 55 { 20 } else { 0 },
            e,
            r.value_at_quantile(0.5),
            r.value_at_quantile(0.99),
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.max()
        );
        if rejected > 0 {
            let _ = writeln!(
                errors,
                r#"{{"code":451,"count":{rejected},"enhanced":"4.3.0","kind":"4xx","phase":"rcpt","sample":"451 4.3.0 Try again later","t_s":{:.3},"text":"Try again later","time":"2026-11-22T09:33:00Z"}}"#,
                t0 + 1.0
            );
            rcpt_err += rejected;
        }
        if conn_fail > 0 {
            let _ = writeln!(
                errors,
                r#"{{"code":0,"count":{conn_fail},"enhanced":null,"kind":"refused","phase":"connect","sample":"connection refused","t_s":{:.3},"text":"connection refused","time":"2026-11-22T09:33:00Z"}}"#,
                t0 + 1.0
            );
            refused += conn_fail;
        }
        att += accepted + rejected + conn_fail;
        acc += accepted;
        rej += rejected;
        bytes += b;
        errs += e;
    }
    let _ = errs;
    let stats = |name: &str, h: &Histogram<u64>| {
        serde_json::json!({
            "phase": name, "count": h.len(), "min_us": h.min(),
            "mean_us": (h.mean() * 10.0).round() / 10.0,
            "p50_us": h.value_at_quantile(0.5), "p90_us": h.value_at_quantile(0.9),
            "p99_us": h.value_at_quantile(0.99), "p999_us": h.value_at_quantile(0.999),
            "max_us": h.max()
        })
    };
    let failed = refused;
    let summary = serde_json::json!({
        "schema_version": 1,
        "spate_version": "0.1.0",
        "run_id": format!("fixture{seed}"),
        "command": ["/usr/bin/spate", "smtp", "127.0.0.1:2525", "--users", "20", "-d", "60s"],
        "protocol": "smtp",
        "target": "127.0.0.1:2525",
        "started_at": "2026-11-22T09:33:20.000000Z",
        "ended_at": "2026-11-22T09:34:20.000000Z",
        "elapsed_s": 60.0,
        "complete": true,
        "interrupted": false,
        "totals": {
            "attempted": att, "accepted": acc, "rejected": rej, "failed": failed,
            "rcpt_accepted": acc, "rcpt_rejected": rej, "bytes": bytes,
            "connections": acc / 10, "tls_connections": 0, "connect_failures": refused,
            "late": 0, "dropped": 0
        },
        "reconciles": true,
        "messages_per_s": (acc as f64 / 60.0 * 10.0).round() / 10.0,
        "kbytes_per_s": (bytes as f64 / 1024.0 / 60.0 * 10.0).round() / 10.0,
        "phases": [stats("transaction", &tx_total), stats("response", &resp_total)],
        "errors": [
            {"phase": "rcpt", "kind": "4xx", "code": 451, "enhanced": "4.3.0",
             "text": "Try again later", "count": rcpt_err, "sample": "451 4.3.0 Try again later"},
            {"phase": "connect", "kind": "refused", "code": 0, "enhanced": null,
             "text": "connection refused", "count": refused, "sample": "connection refused <&>"}
        ],
        "generator_cpu_s": 3.5,
        "generator_cpu_pct": 2.9,
        "cores": 2,
        "warnings": []
    });
    // Through the real type, so the fixture stays a valid summary.json.
    let s: spate::results::Summary = serde_json::from_value(summary).unwrap();
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(&s).unwrap(),
    )
    .unwrap();
    std::fs::write(
        dir.join("plan.json"),
        r#"{"protocol":"smtp","model":{"model":"closed","users":20},"duration_s":60.0}"#,
    )
    .unwrap();
    std::fs::write(dir.join("intervals.csv"), iv).unwrap();
    std::fs::write(dir.join("transaction.hlog"), tx).unwrap();
    std::fs::write(dir.join("response.hlog"), resp).unwrap();
    std::fs::write(dir.join("errors.jsonl"), errors).unwrap();
    if extras {
        write_extras(dir, &mut rng);
    }
}

fn write_extras(dir: &Path, rng: &mut Lcg) {
    let mut m = String::from(
        "t_s,time,host.cpu.user_pct,host.cpu.system_pct,host.mem.used_mb,proc.smtpd.rss_mb,\
         disk.vda.write_kbps,disk.vda.ms_per_io,net.lo.rx_kbps,queue.postfix.active\n",
    );
    let mut d = String::from("t_s,time,injected,delivered\n");
    let mut dl = hlog_header("delivery");
    for i in 0..INTERVALS {
        let t = (i + 1) as f64;
        let _ = writeln!(
            m,
            "{t:.3},2026-11-22T09:33:00Z,{:.1},{:.1},{:.0},{:.1},{:.0},{:.2},{:.0},{}",
            30.0 + 20.0 * rng.next(),
            10.0 + 5.0 * rng.next(),
            1500.0 + t,
            80.0 + t / 10.0,
            2000.0 + 500.0 * rng.next(),
            0.5 + rng.next(),
            4000.0 + 100.0 * rng.next(),
            (10.0 * rng.next()) as u64
        );
        let _ = writeln!(
            d,
            "{t:.0},2026-11-22T09:33:00Z,1000,{}",
            if i == 0 { 600 } else { 1000 }
        );
        let mut h = hist();
        for _ in 0..100 {
            h.record((20_000.0 + 80_000.0 * rng.next()) as u64).unwrap();
        }
        hlog_line(&mut dl, i as f64, &h);
    }
    std::fs::write(dir.join("monitor.csv"), m).unwrap();
    std::fs::write(dir.join("deliveries.csv"), d).unwrap();
    std::fs::write(dir.join("delivery.hlog"), dl).unwrap();
    std::fs::write(
        dir.join("verify.json"),
        r#"{"expected":60000,"delivered":59998,"missing":2,"duplicated":0,"corrupted":0,"foreign":1,
"latency":{"p50_us":61000,"p90_us":92000,"p99_us":99000,"max_us":100100,"count":59998},
"rules":[{"kind":"every message delivered","expected":60000,"found":59998}]}"#,
    )
    .unwrap();
}

/// A sweep over `users` 1..32 (two repeats each) that saturates at 16.
pub fn write_sweep(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let mut s = String::from(
        "step,param,value,repeat,test_time_s,latency_mean_ms,latency_p50_ms,latency_p99_ms,\
         throughput_per_s,errors,net_kbps,disk_kbps,disk_ms,cpu_pct\n",
    );
    let mut rng = Lcg(5);
    for (step, n) in [1.0f64, 2.0, 4.0, 8.0, 16.0, 32.0].iter().enumerate() {
        for rep in 0..2 {
            let x = 120.0 * n / (1.0 + 0.05 * (n - 1.0) + 0.002 * n * (n - 1.0));
            let x = x * (0.97 + 0.06 * rng.next());
            let lat = n / x * 1000.0;
            let _ = writeln!(
                s,
                "{step},users,{n},{rep},10,{lat:.2},{:.2},{:.2},{x:.1},{},{:.0},{:.0},{:.2},{:.1}",
                lat * 0.9,
                lat * 3.0,
                if *n > 16.0 { 12 } else { 0 },
                x * 20.0,
                x * 8.0,
                0.3 + n / 20.0,
                (x / 15.0).min(100.0)
            );
        }
    }
    std::fs::write(dir.join("sweep.csv"), s).unwrap();
    std::fs::write(
        dir.join("sweep.json"),
        r#"{"param":"users","usl":{"sigma":0.05,"kappa":0.002,"lambda":120.0,"peak_x":21.8,"peak_throughput":1062.0,"r2":0.98},"knee_value":16,"knee_rule":"latency grew faster than throughput","cpu_basis":"host"}"#,
    )
    .unwrap();
}
