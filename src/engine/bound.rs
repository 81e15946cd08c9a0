//! Was the generator the limit? Every run's verdict `bound_by` — `server`, `generator` or
//! `undetermined` — with its evidence: how late the generator's own event loop ran (a
//! probe task that sleeps 5 ms and measures how much later it woke, from the end of the
//! sessions' setup: a login storm is not the load), its CPU share, time
//! its cgroup's CPU quota throttled it, and in an open workload arrivals that started late
//! or were dropped. A run whose generator starved reports the generator's limits as the
//! server's; this says so instead.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::metrics::Counters;

/// The probe's sleep.
const TICK: Duration = Duration::from_millis(5);

/// Thresholds of the verdict.
const LOOP_LAG_GENERATOR_US: u64 = 50_000;
const LOOP_LAG_SERVER_US: u64 = 5_000;
const CPU_GENERATOR_PCT: f64 = 90.0;
const CPU_SERVER_PCT: f64 = 70.0;
const LATE_GENERATOR: f64 = 0.01;
/// Fewer late units than this are noise (one late unit of a 90-unit step is 1.1 %).
const LATE_GENERATOR_MIN: u64 = 20;
const THROTTLED_GENERATOR: f64 = 0.10;
/// Time this process's threads spent runnable but waiting for a CPU (the run queue), as a
/// share of the run, past which other processes took the CPU it needed, when it also got
/// less than [`RUNQ_GOT_GENERATOR`] of the CPU time it asked for (ran / (ran + waited)):
/// pinned beside two busy loops it got 30 %; sharing two cores with the server in its own
/// process, half (that is the machine's limit, not spate's alone).
const RUNQ_GENERATOR: f64 = 0.25;
const RUNQ_GOT_GENERATOR: f64 = 0.4;
/// In a closed workload, an event-loop lag p99 up to this share of the response time's
/// median leaves the sessions waiting on the server, not on spate.
const LAG_OF_RESPONSE_SERVER: f64 = 0.25;

/// How late the generator's event loop ran: a task that sleeps [`TICK`] again and again
/// and records how much later than asked it woke (the time tasks waited for a thread).
pub struct LoopProbe {
    lag: Arc<Mutex<Histogram<u64>>>,
    stop: Arc<AtomicBool>,
}

impl LoopProbe {
    /// Starts the probe on the current runtime; it records once `measuring` says so (the
    /// sessions' setup, a login storm, is not the load).
    pub fn start(measuring: impl Fn() -> bool + Send + 'static) -> LoopProbe {
        let lag = Arc::new(Mutex::new(
            Histogram::<u64>::new_with_bounds(1, 60_000_000, 2).expect("valid bounds"),
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s) = (lag.clone(), stop.clone());
        tokio::spawn(async move {
            while !s.load(Ordering::Relaxed) {
                let t = Instant::now();
                tokio::time::sleep(TICK).await;
                let late = t.elapsed().saturating_sub(TICK).as_micros() as u64;
                if !measuring() {
                    continue;
                }
                if let Ok(mut h) = l.lock() {
                    h.saturating_record(late.max(1));
                }
            }
        });
        LoopProbe { lag, stop }
    }

    /// Stops the probe; its p50, p99 and max lag (µs) and sample count.
    pub fn finish(&self) -> (u64, u64, u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let h = self.lag.lock().unwrap_or_else(|e| e.into_inner());
        (
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.max(),
            h.len(),
        )
    }
}

/// Seconds the CPU quota of this process's cgroup has throttled it so far, if the kernel
/// says: cgroup v2's `throttled_usec` (a pure v2 hierarchy, or the `unified` one of a
/// hybrid), else v1's cpu controller's `throttled_time` (ns). None: neither is readable.
pub fn throttled_s() -> Option<f64> {
    let cg = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in cg.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let path = path.trim();
        if controllers.is_empty() {
            for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
                if let Some(us) = stat_field(&format!("{root}{path}/cpu.stat"), "throttled_usec ") {
                    return Some(us as f64 / 1e6);
                }
            }
        } else if controllers.split(',').any(|c| c == "cpu") {
            for root in ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"] {
                if let Some(ns) = stat_field(&format!("{root}{path}/cpu.stat"), "throttled_time ") {
                    return Some(ns as f64 / 1e9);
                }
            }
        }
    }
    None
}

/// Seconds the generator's threads have waited on the run queue so far (runnable, no CPU
/// free for them): the second field of each `/proc/self/task/*/schedstat`, summed, the
/// embedded server's threads left out. None where the kernel keeps no schedstat.
pub fn runq_wait_s() -> Option<f64> {
    let mut ns = 0u64;
    let mut any = false;
    for e in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let server = std::fs::read_to_string(e.path().join("comm"))
            .is_ok_and(|c| c.trim_end().starts_with(crate::engine::cpu::SERVER_THREAD));
        if server {
            continue;
        }
        let Ok(t) = std::fs::read_to_string(e.path().join("schedstat")) else {
            continue;
        };
        if let Some(w) = t
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse::<u64>().ok())
        {
            ns += w;
            any = true;
        }
    }
    any.then(|| ns as f64 / 1e9)
}

fn stat_field(file: &str, key: &str) -> Option<u64> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().parse().ok())
}

/// What the verdict is made from.
pub struct Evidence {
    pub open: bool,
    pub counters: Counters,
    pub elapsed_s: f64,
    pub cpu_pct: f64,
    pub cores: usize,
    /// Loop lag p50, p99, max (µs) and samples.
    pub loop_lag: (u64, u64, u64, u64),
    /// Throttled during the run (s), when known.
    pub throttled_s: Option<f64>,
    /// Waited on the run queue during the run (s, summed over threads), when known.
    pub runq_wait_s: Option<f64>,
    /// The median of the units' response time (µs), when timed.
    pub response_p50_us: Option<u64>,
    /// An open workload's cap on units in flight (--max-in-flight), and the most that
    /// were: at the cap, arrivals wait for a session that waits on the server.
    pub in_flight_cap: Option<u64>,
    pub in_flight_max: u64,
}

/// The verdict and its evidence, for summary.json's `extra.bound_by`.
pub fn verdict(e: &Evidence) -> Value {
    let c = &e.counters;
    let (lag50, lag99, lagmax, samples) = e.loop_lag;
    let late_share = if c.attempted > 0 {
        c.late as f64 / c.attempted as f64
    } else {
        0.0
    };
    // Every session busy with the server: arrivals late or dropped for want of one are
    // the server's doing (or the cap's), not a starved generator's.
    let capped = e.open && e.in_flight_cap.is_some_and(|cap| e.in_flight_max >= cap);
    let generator = starved(e, late_share, capped);
    // A closed workload's sessions each wait on the server between units: the event
    // loop's lag matters only against how long they waited on it.
    let lag_ok = lag99 <= LOOP_LAG_SERVER_US
        || !e.open
            && e.response_p50_us
                .is_some_and(|r| lag99 as f64 <= LAG_OF_RESPONSE_SERVER * r as f64);
    let calm = samples > 0
        && lag_ok
        && e.cpu_pct <= CPU_SERVER_PCT
        && (!e.open || capped || late_share <= LATE_GENERATOR / 10.0);
    let (bound, why) = if c.attempted == 0 {
        ("undetermined", "no unit of work ran".to_string())
    } else if !generator.is_empty() {
        (
            "generator",
            format!(
                "spate itself was the limit: {}; the figures say more about this generator than about the server (run it with more CPU, fewer sessions per process, or --shard over several)",
                generator.join("; ")
            ),
        )
    } else if calm {
        (
            "server",
            format!(
                "the generator kept up: its event loop ran on time (lag p99 {}{}), CPU {:.0}% of {} cores{}",
                ms(lag99),
                match e.response_p50_us {
                    Some(r) if !e.open && lag99 > LOOP_LAG_SERVER_US => format!(
                        ", small beside the {} the sessions waited on the server's replies (response p50)",
                        ms(r)
                    ),
                    _ => String::new(),
                },
                e.cpu_pct,
                e.cores,
                match (e.open, capped) {
                    (true, true) => format!(
                        "; all {} units in flight (--max-in-flight) waited on the server, so {} arrivals started late and {} were dropped: the server did not keep up with the offered rate",
                        e.in_flight_max, c.late, c.dropped
                    ),
                    (true, false) => ", arrivals on schedule".to_string(),
                    (false, _) => String::new(),
                }
            ),
        )
    } else {
        (
            "undetermined",
            format!(
                "neither clearly: event-loop lag p99 {}, CPU {:.0}% of {} cores{}",
                ms(lag99),
                e.cpu_pct,
                e.cores,
                if e.open {
                    format!(", {:.2}% of units late", late_share * 100.0)
                } else {
                    String::new()
                }
            ),
        )
    };
    json!({
        "bound_by": bound,
        "why": why,
        "evidence": {
            "loop_lag_p50_us": lag50,
            "loop_lag_p99_us": lag99,
            "loop_lag_max_us": lagmax,
            "loop_lag_samples": samples,
            "cpu_pct": e.cpu_pct,
            "cores": e.cores,
            "throttled_s": e.throttled_s,
            "runq_wait_s": e.runq_wait_s.map(|s| (s * 1000.0).round() / 1000.0),
            "response_p50_us": e.response_p50_us,
            "late": c.late,
            "dropped": c.dropped,
            "open_workload": e.open,
            "in_flight_max": e.in_flight_max,
            "in_flight_cap": e.in_flight_cap,
        },
    })
}

/// Each sign that the generator was starved, in words (none: it kept up). `capped`: every
/// session of an open workload was busy with the server, so late and dropped arrivals
/// are the server's doing.
fn starved(e: &Evidence, late_share: f64, capped: bool) -> Vec<String> {
    let c = &e.counters;
    let (_, lag99, lagmax, samples) = e.loop_lag;
    let mut generator = Vec::new();
    if e.open && !capped && c.dropped > 0 {
        generator.push(format!(
            "{} arrivals were dropped (every session busy, the backlog full)",
            c.dropped
        ));
    }
    if e.open && !capped && late_share > LATE_GENERATOR && c.late >= LATE_GENERATOR_MIN {
        generator.push(format!(
            "{:.1}% of the units started more than 10 ms behind schedule",
            late_share * 100.0
        ));
    }
    if samples > 0 && lag99 > LOOP_LAG_GENERATOR_US {
        generator.push(format!(
            "its event loop ran late: p99 {}, max {} (tasks waited that long for a thread)",
            ms(lag99),
            ms(lagmax)
        ));
    }
    if e.cpu_pct > CPU_GENERATOR_PCT {
        generator.push(format!(
            "it used {:.0}% of its {} cores",
            e.cpu_pct, e.cores
        ));
    }
    let ran_s = e.cpu_pct / 100.0 * e.cores as f64 * e.elapsed_s;
    if let Some(w) = e
        .runq_wait_s
        .filter(|w| *w > RUNQ_GENERATOR * e.elapsed_s && ran_s < RUNQ_GOT_GENERATOR * (ran_s + *w))
    {
        generator.push(format!(
            "it waited {w:.1} s on the run queue (runnable, no CPU free for it) in a {:.1} s run and ran {ran_s:.1} s: other processes took the CPU it needed",
            e.elapsed_s
        ));
    }
    if let Some(t) = e
        .throttled_s
        .filter(|t| *t > THROTTLED_GENERATOR * e.elapsed_s)
    {
        generator.push(format!(
            "its cgroup's CPU quota held it back: throttled {t:.1} s (summed over CPUs) in a {:.1} s run",
            e.elapsed_s
        ));
    }
    generator
}

fn ms(us: u64) -> String {
    crate::units::fmt_duration(Duration::from_micros(us))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(lag99: u64, cpu: f64, late: u64, dropped: u64) -> Evidence {
        let counters = Counters {
            attempted: 1000,
            accepted: 1000,
            late,
            dropped,
            ..Counters::default()
        };
        Evidence {
            open: true,
            counters,
            elapsed_s: 10.0,
            cpu_pct: cpu,
            cores: 2,
            loop_lag: (100, lag99, lag99, 2000),
            throttled_s: None,
            runq_wait_s: None,
            response_p50_us: None,
            in_flight_cap: Some(200),
            in_flight_max: 10,
        }
    }

    #[test]
    fn a_generator_kept_off_the_cpu_by_others_is_named() {
        // At 20 % CPU with a calm-looking loop, but 5 s of a 10 s run on the run queue (a
        // core shared with busy loops, as under taskset): the generator was the limit.
        let mut t = ev(3_000, 10.0, 0, 0);
        t.runq_wait_s = Some(5.0);
        let v = verdict(&t);
        assert_eq!(v["bound_by"], "generator", "{v}");
        assert!(v["why"].as_str().unwrap().contains("run queue"), "{v}");
        assert_eq!(v["evidence"]["runq_wait_s"], 5.0);
        t.runq_wait_s = Some(0.2);
        assert_eq!(verdict(&t)["bound_by"], "server");
        // Waiting a quarter of the run while running 8 s of it (a machine shared with a
        // server in the same process): it got most of what it asked for.
        let mut t = ev(3_000, 40.0, 0, 0);
        t.runq_wait_s = Some(3.0);
        assert_ne!(verdict(&t)["bound_by"], "generator");
    }

    #[test]
    fn closed_sessions_waiting_on_a_slow_server_are_the_servers() {
        // 10 closed sessions at 3 % CPU, loop lag p99 12 ms: beside a 200 ms response the
        // sessions waited on the server, not on spate.
        let mut t = ev(12_000, 3.0, 0, 0);
        t.open = false;
        t.in_flight_cap = None;
        assert_eq!(verdict(&t)["bound_by"], "undetermined", "no response time");
        t.response_p50_us = Some(200_000);
        let v = verdict(&t);
        assert_eq!(v["bound_by"], "server", "{v}");
        assert!(v["why"].as_str().unwrap().contains("response p50"), "{v}");
        // Against a 20 ms response, a 12 ms lag is not small: still undetermined.
        t.response_p50_us = Some(20_000);
        assert_eq!(verdict(&t)["bound_by"], "undetermined");
        // An open workload is judged on the lag alone.
        t.open = true;
        t.response_p50_us = Some(200_000);
        assert_eq!(verdict(&t)["bound_by"], "undetermined");
    }

    #[test]
    fn each_sign_of_a_starved_generator_is_named() {
        assert_eq!(verdict(&ev(300, 20.0, 0, 0))["bound_by"], "server");
        let v = verdict(&ev(60_000, 20.0, 0, 0));
        assert_eq!(v["bound_by"], "generator");
        assert!(
            v["why"].as_str().unwrap().contains("event loop ran late"),
            "{v}"
        );
        assert_eq!(verdict(&ev(300, 95.0, 0, 0))["bound_by"], "generator");
        assert_eq!(verdict(&ev(300, 20.0, 50, 0))["bound_by"], "generator");
        // A few late units of a short step are noise.
        assert_ne!(verdict(&ev(300, 20.0, 12, 0))["bound_by"], "generator");
        assert_eq!(verdict(&ev(300, 20.0, 0, 3))["bound_by"], "generator");
        // Between the two: said as such, with the figures.
        let v = verdict(&ev(10_000, 20.0, 0, 0));
        assert_eq!(v["bound_by"], "undetermined");
        assert!(v["why"].as_str().unwrap().contains("lag p99 10.0ms"), "{v}");
        let mut t = ev(300, 20.0, 0, 0);
        t.throttled_s = Some(4.0);
        let v = verdict(&t);
        assert_eq!(v["bound_by"], "generator");
        assert!(
            v["why"].as_str().unwrap().contains("throttled 4.0 s"),
            "{v}"
        );
    }

    #[test]
    fn arrivals_waiting_for_sessions_busy_with_the_server_are_the_servers_doing() {
        // Every one of --max-in-flight's sessions busy: late and dropped arrivals are
        // the server's (a slow reply holds each session), when the generator was calm.
        let mut capped = ev(300, 20.0, 400, 30);
        capped.in_flight_max = 200;
        let v = verdict(&capped);
        assert_eq!(v["bound_by"], "server", "{v}");
        let why = v["why"].as_str().unwrap();
        assert!(why.contains("all 200 units in flight"), "{v}");
        assert!(
            why.contains("400 arrivals started late and 30 were dropped"),
            "{v}"
        );
        // A starved generator at the cap is still the generator.
        capped.loop_lag = (100, 80_000, 90_000, 2000);
        assert_eq!(verdict(&capped)["bound_by"], "generator");
        // Below the cap, late arrivals are the generator's.
        let below = ev(300, 20.0, 400, 0);
        assert_eq!(verdict(&below)["bound_by"], "generator");
    }
}
