//! Experiment E2 (Postfix + OpenLDAP, Postal's load) in its short variant against the real
//! test bed with `--ldap`: one minute at 5000/min, 50 sessions, 1-3 messages per
//! connection, with slapd stopped for 15 s inside the minute. Checks each output the
//! experiment asks for against the others: Postal's per-minute lines, the 451s counted
//! inside the outage and nowhere else, delivered beside injected, queue depth and slapd
//! sampled, and every accepted message delivered.

mod common;

use std::path::Path;
use std::process::Command;

use chrono::{DateTime, Utc};
use common::bed::Bed;
use serde_json::Value;

const SPATE: &str = env!("CARGO_BIN_EXE_spate");

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn csv(path: &Path) -> Vec<Vec<String>> {
    read(path)
        .lines()
        .map(|l| l.split(',').map(String::from).collect())
        .collect()
}

fn col(rows: &[Vec<String>], name: &str) -> usize {
    rows[0]
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name}: {:?}", rows[0]))
}

fn num(s: &str) -> f64 {
    s.parse().unwrap_or_else(|_| panic!("not a number: {s:?}"))
}

fn time(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .unwrap_or_else(|e| panic!("{s:?}: {e}"))
        .with_timezone(&Utc)
}

#[test]
fn e2_postfix_ldap_one_minute_with_outage() {
    let tmp = tempfile::tempdir().unwrap();
    let t0 = std::time::Instant::now();
    let Some(bed) = Bed::up(
        &tmp.path().join("bed"),
        &["--ldap", "--users", "2000", "--port-offset", "auto"],
    ) else {
        return;
    };
    // The later --users won over Bed's default 100: the directory has 2000 people.
    assert_eq!(
        read(Path::new(bed.var("SPATE_USERS_FILE"))).lines().count(),
        2000
    );

    eprintln!("test bed with LDAP and 2000 users up in {:?}", t0.elapsed());
    let out = tmp.path().join("e2");
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/e2-postfix-ldap.toml");
    let o = Command::new(SPATE)
        .arg("run")
        .arg(&scenario)
        .args(["--set", "duration=1m", "--set", "recipients=2000"])
        .args(["--set", "sessions=50", "--set", "outage=stop"])
        .args(["--set", "outage_at=20s", "--set", "outage_for=15s"])
        .args(["--set", "verify_wait=1m", "--out"])
        .arg(&out)
        .envs(&bed.env)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    eprintln!("scenario done at {:?}", t0.elapsed());
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let inject = out.join("04-inject");
    let summary: Value = serde_json::from_str(&read(&inject.join("summary.json"))).unwrap();
    let accepted = summary["totals"]["accepted"].as_f64().unwrap();
    let rejected = summary["totals"]["rejected"].as_f64().unwrap();
    // 5000/min for a minute: about 5000 attempts, some of them refused during the outage.
    assert!(
        accepted + rejected > 3000.0 && accepted > 1000.0,
        "{accepted} {rejected}"
    );

    // Postal's per-minute lines, compatible with Postal's own, and printed at the end.
    let postal = csv(&inject.join("postal.csv"));
    assert_eq!(
        postal[0].join(","),
        "time,messages,data(K),errors,connections,SSL connections"
    );
    assert!(postal.len() >= 2 && postal.len() <= 4, "{postal:?}");
    for r in &postal[1..] {
        assert_eq!(r.len(), 6, "{r:?}");
        assert!(r[0].len() == 5 && r[0].as_bytes()[2] == b':', "{r:?}");
        assert_eq!(r[5], "0", "no TLS in this experiment");
    }
    let sum = |i: usize| postal[1..].iter().map(|r| num(&r[i])).sum::<f64>();
    assert_eq!(sum(1), accepted, "{postal:?}");
    assert!(stdout.contains("time,messages,data(K),errors,connections,SSL connections"));

    // The 451s: only while slapd was away (from when the hook began stopping it until a
    // few seconds after it was up again, for smtpd to reconnect), all of them 451 4.3.0.
    let outage = read(&out.join("02-outage/outage.txt"));
    let at = |what: &str| {
        let line = outage.lines().find(|l| l.starts_with(what));
        time(
            line.unwrap_or_else(|| panic!("{outage}"))
                .split(' ')
                .nth(1)
                .unwrap(),
        )
    };
    let (stop, start) = (at("stopping "), at("started "));
    let (stopped, starting) = (at("stopped "), at("starting "));
    assert!((starting - stopped).num_seconds() >= 14, "{outage}");
    let mut n451 = 0.0;
    for line in read(&inject.join("errors.jsonl")).lines() {
        let e: Value = serde_json::from_str(line).unwrap();
        assert_eq!(e["code"], 451, "{line}");
        assert_eq!(e["enhanced"], "4.3.0", "{line}");
        assert_eq!(e["phase"], "rcpt", "{line}");
        assert!(
            e["text"].as_str().unwrap().contains("lookup failure"),
            "{line}"
        );
        // The row's second ends at `time`; it must overlap the outage.
        let t = time(e["time"].as_str().unwrap());
        assert!(
            t > stop && (t - start).num_milliseconds() < 5000,
            "451 outside the outage {stop}..{start}: {line}"
        );
        n451 += e["count"].as_f64().unwrap();
    }
    assert!(n451 > 100.0, "too few 451s for a 15 s outage: {n451}");
    assert_eq!(n451, rejected);
    assert_eq!(sum(3), n451, "Postal's errors column counts the 451s");

    // Delivered beside injected, second by second; nothing injected while slapd was away.
    let del = csv(&inject.join("deliveries.csv"));
    assert_eq!(del[0].join(","), "t_s,time,injected,delivered");
    let (ci, cd, ct) = (
        col(&del, "injected"),
        col(&del, "delivered"),
        col(&del, "time"),
    );
    let total = |c: usize| del[1..].iter().map(|r| num(&r[c])).sum::<f64>();
    assert_eq!(total(ci), accepted);
    assert_eq!(total(cd), accepted);
    let quiet: Vec<f64> = del[1..]
        .iter()
        .filter(|r| {
            let t = time(&r[ct]);
            (t - stopped).num_seconds() >= 3 && (starting - t).num_seconds() >= 1
        })
        .map(|r| num(&r[ci]))
        .collect();
    assert!(quiet.len() >= 3, "{del:?}");
    assert!(quiet.iter().all(|&n| n == 0.0), "{quiet:?}");

    // Queue depth and the server processes, slapd among them, every second.
    let mon = csv(&inject.join("monitor.csv"));
    for c in [
        "queue.postfix.incoming",
        "queue.postfix.active",
        "queue.postfix.deferred",
        "proc.slapd.cpu_pct",
        "proc.slapd.rss_mb",
        "proc.smtpd.cpu_pct",
        "proc.lmtp.count",
    ] {
        col(&mon, c);
    }
    assert!(mon.len() > 50, "{} samples", mon.len() - 1);

    // Every accepted message delivered once and intact (451-refused ones never were).
    let verify: Value = serde_json::from_str(&read(&inject.join("verify.json"))).unwrap();
    assert_eq!(verify["ok"], true, "{verify}");
    assert_eq!(verify["delivered"].as_f64().unwrap(), accepted);
    assert_eq!(verify["missing"], 0);

    // The report row holds the same figures.
    let rep = csv(&out.join("report.csv"));
    let cell = |name: &str| num(&rep[1][col(&rep, name)]);
    assert_eq!(cell("accepted"), accepted);
    assert_eq!(cell("451 errors"), n451);
    assert_eq!(cell("delivered"), accepted);
    assert_eq!(cell("recipients"), 2000.0);
    assert!(cell("max active") + cell("max incoming") >= 1.0);
    // slapd is back and Postfix accepts again.
    assert_eq!(bed.queue_depth(), 0);

    // The minutes side by side: Postal's columns, injected and delivered, the queues.
    let minutes = csv(&inject.join("minutes.csv"));
    assert_eq!(
        minutes[0].join(","),
        "minute,messages,errors,connections,injected,delivered,incoming,active,deferred,max incoming,max active,note"
    );
    let total = |name: &str| {
        let c = col(&minutes, name);
        minutes[1..].iter().map(|r| num(&r[c])).sum::<f64>()
    };
    assert_eq!(total("messages"), accepted);
    assert_eq!(total("injected"), accepted);
    assert_eq!(total("delivered"), accepted);
    assert_eq!(total("errors"), n451);
    let notes: Vec<&str> = minutes[1..].iter().map(|r| r[11].as_str()).collect();
    assert!(
        notes.iter().any(|n| n.contains("LDAP stopping")),
        "{notes:?}"
    );
    assert!(stdout.contains("falls behind: "), "{stdout}");
}

/// The directory slowed down instead of stopped (a delaying proxy in front of slapd):
/// answers later than Postfix's 5 s lookup timeout bring 451s while the delay lasts, and
/// none before or after; every accepted message still arrives. The same run on a bed
/// whose store costs 100 ms a message, one at a time (`--delivery-cost`, E2's queue
/// variant): delivery cannot keep up with 20 messages a second, so the queue grows while
/// the load runs, fewer are delivered than injected when it ends, and the rest arrive
/// during the drain — the two causes (a slow directory, a slow store) in one report.
#[test]
fn e2_postfix_ldap_slow_directory_and_slow_store() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = Bed::up(
        &tmp.path().join("bed"),
        &[
            "--ldap",
            "--users",
            "500",
            "--port-offset",
            "auto",
            "--delivery-cost",
            "100ms",
            "--in-flow-delay",
            "1s",
        ],
    ) else {
        return;
    };
    let out = tmp.path().join("e2");
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/e2-postfix-ldap.toml");
    let o = Command::new(SPATE)
        .arg("run")
        .arg(&scenario)
        .args(["--set", "duration=35s", "--set", "recipients=500"])
        .args(["--set", "sessions=20", "--set", "rate=1200/min"])
        .args(["--set", "outage=slow", "--set", "slow_delay=6s"])
        .args(["--set", "outage_at=8s", "--set", "outage_for=12s"])
        .args(["--set", "queue_every=1s"])
        .args(["--set", "verify_wait=2m", "--out"])
        .arg(&out)
        .envs(&bed.env)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let outage = read(&out.join("02-outage/outage.txt"));
    let at = |what: &str| {
        let line = outage.lines().find(|l| l.starts_with(what));
        time(
            line.unwrap_or_else(|| panic!("{outage}"))
                .split(' ')
                .nth(1)
                .unwrap(),
        )
    };
    let (slowing, fast) = (at("slowing "), at("fast "));
    let inject = out.join("04-inject");
    let mut n451 = 0.0;
    for line in read(&inject.join("errors.jsonl")).lines() {
        let e: Value = serde_json::from_str(line).unwrap();
        assert_eq!(e["code"], 451, "{line}");
        assert_eq!(e["phase"], "rcpt", "{line}");
        // A lookup that began while the proxy was there may fail up to 5 s after it left.
        let t = time(e["time"].as_str().unwrap());
        assert!(
            t > slowing && (t - fast).num_milliseconds() < 7000,
            "451 outside the slow spell {slowing}..{fast}: {line}"
        );
        n451 += e["count"].as_f64().unwrap();
    }
    // 20 sessions, each lookup failing after 5 s, for about 12 s.
    assert!(n451 >= 10.0, "too few 451s for a 12 s slow spell: {n451}");
    let summary: Value = serde_json::from_str(&read(&inject.join("summary.json"))).unwrap();
    assert_eq!(summary["totals"]["rejected"].as_f64().unwrap(), n451);
    let verify: Value = serde_json::from_str(&read(&inject.join("verify.json"))).unwrap();
    assert_eq!(verify["ok"], true, "{verify}");
    // The proxy stayed in Postfix's path with no delay: the spell changed only its delay,
    // and Postfix was never reloaded during the load (a reload restarts the queue manager,
    // and the deliveries it had in flight stay in the queue, already delivered, until the
    // next queue manager's 300 s wakeup, which it logs as "skipped, still being delivered").
    let cf = read(&bed.dir.join("postfix/ldap-vmailbox.cf"));
    assert!(cf.contains(bed.var("SPATE_LDAP_PROXY")), "{cf}");
    assert_eq!(read(&bed.dir.join("ldap/proxy.delay")).trim(), "0");
    let log = read(Path::new(bed.var("SPATE_POSTFIX_LOG")));
    assert!(
        !log.contains("still being delivered"),
        "the queue manager restarted"
    );

    // The slow store. Every delivery went through its relay and paid the cost: the relay
    // counted exactly the accepted messages (one recipient each).
    let accepted = summary["totals"]["accepted"].as_f64().unwrap();
    assert!(accepted >= 200.0, "{accepted}");
    let stats = read(Path::new(bed.var("SPATE_STORE_STATS")));
    assert!(
        stats.starts_with(&format!("messages={accepted} ")),
        "{stats} vs {accepted} accepted"
    );
    // Fewer delivered than injected when the load ended; the rest during the drain.
    let deliveries = csv(&inject.join("deliveries.csv"));
    let (ti, tdl) = (col(&deliveries, "injected"), col(&deliveries, "delivered"));
    let end = deliveries
        .iter()
        .rposition(|r| r[ti] != "injected" && num(&r[ti]) > 0.0)
        .expect("something was injected");
    let sum = |rows: &[Vec<String>], c: usize| rows.iter().map(|r| num(&r[c])).sum::<f64>();
    let (injected, delivered_in_load) = (
        sum(&deliveries[1..=end], ti),
        sum(&deliveries[1..=end], tdl),
    );
    assert_eq!(injected, accepted);
    assert!(
        delivered_in_load < injected,
        "{delivered_in_load} delivered of {injected} at the end of the load"
    );
    let after = sum(&deliveries[end + 1..], tdl);
    assert_eq!(delivered_in_load + after, accepted);
    assert_eq!(verify["delivered"].as_f64().unwrap(), accepted, "{verify}");
    // The queue's depth, sampled through the whole scenario: it rose over the run (its
    // deepest point is deeper than the first sample) and was empty at the end.
    let queue = csv(&out.join("03-queue/queue.csv"));
    assert_eq!(
        queue[0].join(","),
        "time,incoming,active,deferred,hold,store_messages"
    );
    let depth: Vec<f64> = queue[1..]
        .iter()
        .map(|r| num(&r[1]) + num(&r[2]) + num(&r[3]))
        .collect();
    let deepest = depth.iter().cloned().fold(0.0, f64::max);
    assert!(
        depth.len() >= 3 && deepest >= 20.0 && deepest > depth[0],
        "{depth:?}"
    );
    // e2-minutes' figures, in the report: the backlog when the load ended, the drain.
    let m: Value = serde_json::from_str(&read(&out.join("06-postal/minutes.json"))).unwrap();
    assert_eq!(m["injected"].as_f64().unwrap(), accepted, "{m}");
    assert_eq!(
        m["backlog_at_load_end"].as_f64().unwrap(),
        injected - delivered_in_load,
        "{m}"
    );
    assert!(m["drain_s"].as_f64().is_some(), "{m}");
    let minutes = csv(&inject.join("minutes.csv"));
    let notes: Vec<&str> = minutes[1..].iter().map(|r| r[11].as_str()).collect();
    assert!(notes.iter().any(|n| n.contains("load ends")), "{notes:?}");
    assert!(
        notes.iter().any(|n| n.contains("LDAP slowing")),
        "{notes:?}"
    );
    assert!(stdout.contains("backlog at end of load"), "{stdout}");
}

/// scripts/e2-minutes on made-up minutes: the first of two minutes with more injected
/// than delivered and a growing active queue is marked, a single such minute is not.
#[test]
fn e2_minutes_marks_the_minute_the_server_falls_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // Minutes 10:00..10:05 (local time): behind for one minute at 10:01, from 10:03 on.
    let per_min = [
        (5000, 5000, 10),
        (5000, 4000, 900),
        (5000, 5400, 100),
        (5000, 3000, 2100),
        (3000, 2500, 4600),
        (3000, 2400, 7200),
    ];
    let base = chrono::Local::now()
        .date_naive()
        .and_hms_opt(10, 0, 0)
        .unwrap()
        .and_local_timezone(chrono::Local)
        .unwrap();
    let mut postal = String::from("time,messages,data(K),errors,connections,SSL connections\n");
    let mut del = String::from("t_s,time,injected,delivered\n");
    let mut mon = String::from(
        "t_s,time,queue.postfix.incoming,queue.postfix.active,queue.postfix.deferred\n",
    );
    for (m, (inj, dl, active)) in per_min.iter().enumerate() {
        let t = base + chrono::Duration::minutes(m as i64);
        postal.push_str(&format!("{},{inj},1,0,1,0\n", t.format("%H:%M")));
        for s in [10, 40] {
            let ts = (t + chrono::Duration::seconds(s)).with_timezone(&Utc);
            let stamp = ts.to_rfc3339();
            del.push_str(&format!("{s},{stamp},{},{}\n", inj / 2, dl / 2));
            mon.push_str(&format!("{s},{stamp},3,{active},0\n"));
        }
    }
    std::fs::write(d.join("postal.csv"), postal).unwrap();
    std::fs::write(d.join("deliveries.csv"), del).unwrap();
    std::fs::write(d.join("monitor.csv"), mon).unwrap();
    let o = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/e2-minutes"))
        .arg(d)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{text}");
    assert!(text.contains("falls behind: from 10:03"), "{text}");
    // And the injection fell in 10:04, below 90 % of the best whole minute before it.
    assert!(
        text.contains("injection falls: from 10:04 (minute 5): 5000 a minute before, 3000 after"),
        "{text}"
    );
    let rows = csv(&d.join("minutes.csv"));
    let marked: Vec<&str> = rows[1..]
        .iter()
        .filter(|r| r[11].contains("falls behind"))
        .map(|r| r[0].as_str())
        .collect();
    assert_eq!(marked, ["10:03"], "{text}");
    assert_eq!(rows[2][col(&rows, "active")], "900");
    // Across midnight the minutes stay in time order (23:59 before 00:00).
    let late = base + chrono::Duration::minutes(13 * 60 + 59);
    let mut postal = String::from("time,messages,data(K),errors,connections,SSL connections\n");
    let mut del = String::from("t_s,time,injected,delivered\n");
    let mut mon = String::from(
        "t_s,time,queue.postfix.incoming,queue.postfix.active,queue.postfix.deferred\n",
    );
    for m in 0..3 {
        let t = late + chrono::Duration::minutes(m);
        postal.push_str(&format!("{},10,1,0,1,0\n", t.format("%H:%M")));
        let stamp = (t + chrono::Duration::seconds(30))
            .with_timezone(&Utc)
            .to_rfc3339();
        del.push_str(&format!("30,{stamp},10,10\n"));
        mon.push_str(&format!("30,{stamp},0,0,0\n"));
    }
    std::fs::write(d.join("postal.csv"), postal).unwrap();
    std::fs::write(d.join("deliveries.csv"), del).unwrap();
    std::fs::write(d.join("monitor.csv"), mon).unwrap();
    let o = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/e2-minutes"))
        .arg(d)
        .output()
        .unwrap();
    assert!(o.status.success());
    let order: Vec<String> = csv(&d.join("minutes.csv"))[1..]
        .iter()
        .map(|r| r[0].clone())
        .collect();
    assert_eq!(order, ["23:59", "00:00", "00:01"]);

    // No such directory: one line, exit 2.
    let o = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/e2-minutes"))
        .arg(d.join("nothing"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&o.stderr).lines().count(), 1);
}
