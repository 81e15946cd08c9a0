//! `spate capacity`: the largest population of a profile's users whose busiest hour the
//! server serves within the profile's quality of service. Each probe is a population run
//! (`cmd::population`) of a number of users; the number doubles until a probe fails its
//! QoS, then the gap is halved to the precision (`sweep::search`). A probe whose generator
//! was the limit is run again, and if it is again, it is the most this generator can
//! test, never the server's failure. The answer names the criterion that failed first and
//! what ran out, from the monitor's evidence.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

use super::population::{self, Judged, Probed};
use crate::ctx::Ctx;
use crate::sweep::search::{Outcome, Search};
use crate::units;
use crate::usage;

const ABOUT: &str = "Each probe runs the population (see spate population --help) for --probe \
with a number of users, and passes when every QoS criterion measured held. The number \
doubles from --min-users until a probe fails, then the gap between the highest pass and \
the lowest failure is halved until it is within --precision. A probe that was \
generator-bound (spate, not the server, was the limit) is run once more; bound again, it \
is the most this generator can test and never counts as the server's failure. The answer \
is printed with its margin, the criterion that failed first and by how much, and what ran \
out: the monitor's evidence (--monitor, --monitor-process, --monitor-queue) at the first \
failing probe. Every probe's results directory is kept under the run's directory, with \
capacity.json beside them. Exit status 0 with an answer, 1 without one, 2 for bad input.";

const EXAMPLES: &str = "EXAMPLES:
  spate capacity --profile office-medium --max-users 50000 --probe 10m --time-scale 6 \\
      --smtp submission://mail.example.test --imap imaps://mail.example.test \\
      --users-file accounts.txt --monitor-process master,smtpd,dovecot,imap
  # Against the embedded server with a known cost: 20 ms per FETCH, one at a time.
  spate serve --smtp 2525 --imap 1143 --delay fetch:20ms --serial-delays &
  spate capacity --profile office-heavy --max-users 200 --probe 20s --time-scale 600 \\
      --smtp 127.0.0.1:2525 --imap 127.0.0.1:1143 --users-file users.txt";

#[derive(Debug, Clone, clap::Args, Serialize)]
#[command(after_long_help = format!("{ABOUT} --users and --duration are a probe's own, chosen by the search: capacity refuses them.\n\n{EXAMPLES}\n\n{}", population::TARGETS))]
#[group(id = "capacity_args")]
pub struct Args {
    #[command(flatten)]
    pub population: population::Args,
    /// The largest population probed.
    #[arg(long, value_name = "N", help_heading = "Search")]
    pub max_users: Option<u32>,
    /// The first population probed [default: --max-users / 64, at least 1].
    #[arg(long, value_name = "N", help_heading = "Search")]
    pub min_users: Option<u32>,
    /// How long each probe runs, real time [default: a simulated hour].
    #[arg(long, value_name = "DUR", help_heading = "Search")]
    pub probe: Option<String>,
    /// Stop halving when the lowest failure is within this share above the highest pass.
    #[arg(
        long,
        default_value = "10%",
        value_name = "PCT",
        help_heading = "Search"
    )]
    pub precision: String,
    /// At most this many probes (retries included).
    #[arg(long, default_value_t = 16, value_name = "N", help_heading = "Search")]
    pub max_probes: u32,
    /// Wait this long between probes, for the server to finish what the last one left
    /// (a mail queue, deferred work).
    #[arg(
        long,
        default_value = "5s",
        value_name = "DUR",
        help_heading = "Search"
    )]
    pub pause: String,
}

/// One probe, as capacity.json lists it.
#[derive(Debug, Serialize)]
struct ProbeRow {
    n: u32,
    users: u32,
    /// "probe", or "retry" after a generator-bound one.
    kind: &'static str,
    outcome: Outcome,
    bound_by: String,
    actions_per_s: f64,
    dir: String,
    qos: Vec<Judged>,
    /// What ran out, when the probe failed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ran_out: Vec<String>,
}

fn pct(text: &str, what: &str) -> anyhow::Result<f64> {
    text.trim()
        .strip_suffix('%')
        .and_then(|n| n.trim().parse::<f64>().ok())
        .filter(|n| *n > 0.0 && *n < 100.0)
        .map(|n| n / 100.0)
        .ok_or_else(|| {
            crate::UsageError(format!(
                "{what} {text}: expected a share above 0 and below 100%, e.g. 10%"
            ))
            .into()
        })
}

/// `spate capacity`.
pub async fn run(args: Args, ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let p = &args.population;
    if p.list_profiles || p.dump_profile.is_some() {
        return population::run(p.clone(), ctx).await;
    }
    if p.users.is_some() {
        return usage("spate capacity chooses the number of users itself: give --max-users (and --min-users) instead of --users");
    }
    if p.duration.is_some() {
        return usage(
            "spate capacity runs each probe for --probe: give that instead of --duration",
        );
    }
    let Some(max) = args.max_users.filter(|m| *m > 0) else {
        return usage("give the largest population to probe: --max-users N");
    };
    let min = args.min_users.unwrap_or((max / 64).max(1));
    if min == 0 || min > max {
        return usage(format!(
            "--min-users {min} --max-users {max}: expected 1 <= min <= max"
        ));
    }
    if args.max_probes < 2 {
        return usage("--max-probes: at least 2");
    }
    let precision = pct(&args.precision, "--precision")?;
    let pause = units::parse_duration(&args.pause)?;
    let probe_len = match &args.probe {
        Some(d) => Some(units::parse_duration(d)?.as_secs_f64()),
        None => None,
    };
    // Everything a probe checks, checked once before anything runs: a bad profile, rule,
    // target or accounts file ends here with nothing written.
    let mut first = p.clone();
    first.users = Some(max);
    first.duration = probe_len.map(|s| format!("{s}s"));
    population::check(&first)?;
    if !first.no_populate_check {
        // Once, over the largest population: the probes then skip it.
        population::check_store(&first).await?;
        first.no_populate_check = true;
    }
    let name = crate::session::population::profile::Profile::load(
        p.profile.as_deref().unwrap_or_default(),
    )?
    .name;
    let root =
        crate::opts::output::results_dir(p.output.out.as_deref(), p.output.overwrite, "capacity")?;
    let mut search = Search::new(u64::from(min), u64::from(max), precision);
    let mut rows: Vec<ProbeRow> = Vec::new();
    let mut interrupted = false;
    println!(
        "capacity of {name} for {max} users at most, {} probes at most",
        args.max_probes
    );
    while let Some(users) = search.next() {
        if rows.len() as u32 >= args.max_probes {
            break;
        }
        let users = users as u32;
        let mut kind = "probe";
        let outcome = loop {
            let n = rows.len() as u32 + 1;
            let dir = root.join(format!("probe-{n:02}-{users}-users"));
            let mut a = first.clone();
            a.users = Some(users);
            a.output.out = None;
            a.output.overwrite = false;
            let probed = population::probe(a, ctx.command_line.clone(), Some(&dir), false).await?;
            let bound = probed.summary.extra["bound_by"]["bound_by"]
                .as_str()
                .unwrap_or("undetermined")
                .to_string();
            let outcome = if probed.summary.interrupted_by.is_some() {
                interrupted = true;
                Outcome::Fail
            } else if bound == "generator" {
                Outcome::Generator
            } else if probed.failed() || probed.summary.totals.accepted == 0 {
                Outcome::Fail
            } else {
                Outcome::Pass
            };
            let row = row(n, users, kind, outcome, &bound, &probed, &root);
            println!("{}", line(&row));
            rows.push(row);
            if interrupted || outcome != Outcome::Generator || kind == "retry" {
                break outcome;
            }
            if rows.len() as u32 >= args.max_probes {
                break outcome;
            }
            kind = "retry";
            between(pause).await;
        };
        if interrupted {
            break;
        }
        search.record(u64::from(users), outcome);
        if search.next().is_some() {
            between(pause).await;
        }
    }
    let (text, answer) = answer(&search, &rows, &name, interrupted);
    print!("{text}");
    let doc = json!({
        "profile": name,
        "profile_given": p.profile,
        "time_scale": p.time_scale,
        "probe_s": probe_len,
        "min_users": min,
        "max_users": max,
        "precision_pct": precision * 100.0,
        "supported_users": answer,
        "lowest_failing_users": search.fail,
        "generator_limit_users": search.generator,
        "interrupted": interrupted,
        "answer": text.trim_end(),
        "probes": rows,
    });
    crate::results::write_atomic(&root.join("capacity.json"), format!("{doc:#}\n").as_bytes())?;
    println!("results: {}", root.display());
    Ok(if answer.is_some() && !interrupted {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

async fn between(pause: Duration) {
    if !pause.is_zero() {
        tokio::time::sleep(pause).await;
    }
}

fn row(
    n: u32,
    users: u32,
    kind: &'static str,
    outcome: Outcome,
    bound: &str,
    probed: &Probed,
    root: &Path,
) -> ProbeRow {
    let s = &probed.summary;
    ProbeRow {
        n,
        users,
        kind,
        outcome,
        bound_by: bound.to_string(),
        actions_per_s: s.messages_per_s,
        dir: probed
            .dir
            .strip_prefix(root)
            .unwrap_or(&probed.dir)
            .display()
            .to_string(),
        ran_out: if outcome == Outcome::Fail {
            ran_out(&serde_json::to_value(s).unwrap_or(Value::Null))
        } else {
            Vec::new()
        },
        qos: probed.qos.clone(),
    }
}

/// A probe in one line: its users, outcome, pace and the criteria that failed.
fn line(r: &ProbeRow) -> String {
    let failed: Vec<&str> = r
        .qos
        .iter()
        .filter(|q| q.measured && !q.verdict.pass)
        .map(|q| q.verdict.message.as_str())
        .collect();
    let mut s = format!(
        "  probe {:>2}{} {:>7} users  {:<15} {:>8.1} actions/s  bound by {}",
        r.n,
        if r.kind == "retry" { " (again)" } else { "" },
        r.users,
        r.outcome.word(),
        r.actions_per_s,
        r.bound_by
    );
    if !failed.is_empty() {
        let _ = write!(s, "\n      failed: {}", failed.join("; "));
    }
    s
}

/// How far past its limit a failed criterion was (value / limit, or limit / value for
/// a floor), for naming the one that failed first.
fn overshoot(q: &Judged) -> f64 {
    let limit = crate::scenario::threshold::Check::parse(&q.verdict.threshold)
        .map(|c| c.limit())
        .unwrap_or(0.0);
    match q.verdict.value {
        Some(v) if limit > 0.0 && v > 0.0 => (v / limit).max(limit / v),
        _ => 0.0,
    }
}

/// The host's CPU counts as used up from this share busy (user + system, of all cores):
/// past it, runnable work queues.
const BUSY: f64 = 80.0;

/// What ran out at a failing probe, from its summary: the generator, the monitor's
/// figures near their limits, or that none of what was watched did.
fn ran_out(s: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let bound = &s["extra"]["bound_by"];
    if bound["bound_by"] == "generator" {
        out.push(format!(
            "spate itself: {}",
            bound["why"].as_str().unwrap_or("")
        ));
    }
    let m = &s["extra"]["monitor"];
    let (mean, max) = (&m["mean"], &m["max"]);
    let Some(means) = mean.as_object() else {
        out.push("not known: no monitor ran (give --monitor, --monitor-process NAMES or --monitor-queue DIR to see what ran out)".into());
        return out;
    };
    let cores = s["cores"].as_f64().unwrap_or(1.0).max(1.0);
    let at = |map: &Value, col: &str| map[col].as_f64().unwrap_or(0.0);
    let mut seen = Vec::new();
    // The host's CPU, in % of all its cores.
    let busy = at(mean, "host.cpu.user_pct") + at(mean, "host.cpu.system_pct");
    if busy >= BUSY {
        // How much of it the watched processes account for (their CPU is in % of one
        // core): the rest went to processes not watched, or too short-lived to be sampled.
        let watched: f64 = means
            .iter()
            .filter(|(c, _)| c.starts_with("proc.") && c.ends_with(".cpu_pct"))
            .map(|(_, v)| v.as_f64().unwrap_or(0.0))
            .sum::<f64>()
            / cores;
        let spate = at(mean, "self.spate.cpu_pct") / cores;
        seen.push(format!(
            "the host's CPU: {busy:.0} % busy on average (user + system, of {cores} cores); the processes watched used {watched:.0} % of it and spate {spate:.0} %{}",
            if busy - watched - spate > 20.0 {
                ": the rest went to processes not watched or too short-lived to be sampled (a server that starts a process per login)"
            } else {
                ""
            }
        ));
    }
    let iowait = at(mean, "host.cpu.iowait_pct");
    if iowait >= 20.0 {
        seen.push(format!(
            "the disks: the CPUs waited on I/O {iowait:.0} % of the time"
        ));
    }
    for (col, v) in means {
        let v = v.as_f64().unwrap_or(0.0);
        let peak = at(max, col);
        if let Some(group) = col
            .strip_prefix("proc.")
            .and_then(|c| c.strip_suffix(".cpu_pct"))
        {
            // A group's CPU in % of one core, its processes together.
            let count = at(mean, &format!("proc.{group}.count"));
            if v >= 85.0 * cores {
                seen.push(format!(
                    "the CPU, to {group}: {v:.0} % of a core on average, every core of {cores}"
                ));
            } else if v >= 85.0 && count <= 1.0 {
                seen.push(format!(
                    "{group}: one process at {v:.0} % of a core on average (a single thread of it would be saturated)"
                ));
            }
        } else if col.starts_with("queue.") && peak >= 2.0 * v.max(1.0) && peak >= 100.0 {
            seen.push(format!("{col}: grew to {peak:.0} (mean {v:.0})"));
        } else if col.ends_with("ms_per_io") && v >= 50.0 {
            seen.push(format!("{col}: {v:.0} ms per I/O on average"));
        }
    }
    if seen.is_empty() && out.is_empty() {
        out.push(format!(
            "nothing this run watched was near its limit (the host's CPU {busy:.0} % busy, I/O wait {iowait:.0} %): the limit is elsewhere (a lock, a single thread, a configured limit, a disk or host not watched)"
        ));
    }
    out.extend(seen);
    out
}

/// The answer in words, and the number.
fn answer(
    search: &Search,
    rows: &[ProbeRow],
    name: &str,
    interrupted: bool,
) -> (String, Option<u64>) {
    let mut t = String::from("\n");
    let best = search.best();
    match (best, search.fail, search.generator) {
        (Some(n), Some(f), _) => {
            let _ = writeln!(
                t,
                "supports {n} users of {name} at its QoS: {n} held it, {f} did not (margin {:.0} %)",
                (f as f64 / n as f64 - 1.0) * 100.0
            );
        }
        (Some(n), None, Some(g)) => {
            let _ = writeln!(
                t,
                "supports at least {n} users of {name} at its QoS: at {g} users spate itself was the limit, twice; test more with shards on more hosts"
            );
        }
        (Some(n), None, None) if n >= search.up_to => {
            let _ = writeln!(
                t,
                "supports at least {n} users of {name} at its QoS: every probe up to --max-users held it"
            );
        }
        (Some(n), None, None) => {
            let _ = writeln!(
                t,
                "supports at least {n} users of {name} at its QoS; the search ended (--max-probes or a stop) before a probe failed"
            );
        }
        (None, Some(f), _) => {
            let _ = writeln!(
                t,
                "no answer: the smallest population probed, {f} users, did not hold the QoS; probe fewer with --min-users"
            );
        }
        (None, None, Some(_)) => {
            let _ = writeln!(
                t,
                "no answer: every probe was generator-bound: spate could not make the load on this host, so nothing is known of the server; run shards on more hosts"
            );
        }
        (None, None, None) => {
            let _ = writeln!(t, "no answer: no probe ran to its end");
        }
    }
    if interrupted {
        let _ = writeln!(t, "the search was stopped before its end");
    }
    // At the lowest failing probe: which criteria failed, the worst first, and what ran out.
    if let Some(r) = search.fail.and_then(|f| {
        rows.iter()
            .find(|r| u64::from(r.users) == f && r.outcome == Outcome::Fail)
    }) {
        let mut failed: Vec<&Judged> = r
            .qos
            .iter()
            .filter(|q| q.measured && !q.verdict.pass)
            .collect();
        failed.sort_by(|a, b| overshoot(b).total_cmp(&overshoot(a)));
        if let Some(q) = failed.first() {
            let over = overshoot(q);
            let _ = writeln!(
                t,
                "failed first at {} users: {}{}",
                r.users,
                q.verdict.message,
                if over > 0.0 {
                    format!(" ({over:.1} x the limit)")
                } else {
                    String::new()
                }
            );
        }
        for q in failed.iter().skip(1) {
            let _ = writeln!(t, "  also: {}", q.verdict.message);
        }
        for x in &r.ran_out {
            let _ = writeln!(t, "ran out: {x}");
        }
    }
    (t, best)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::threshold::Verdict;

    fn row(users: u32, outcome: Outcome, failed: Option<(&str, f64)>) -> ProbeRow {
        ProbeRow {
            n: 1,
            users,
            kind: "probe",
            outcome,
            bound_by: "server".into(),
            actions_per_s: 1.0,
            dir: String::new(),
            qos: failed
                .map(|(rule, value)| Judged {
                    verdict: Verdict {
                        threshold: rule.into(),
                        value: Some(value),
                        shown: String::new(),
                        pass: false,
                        message: format!("{rule}: {value}"),
                    },
                    measured: true,
                    not_measured: None,
                })
                .into_iter()
                .collect(),
            ran_out: vec!["the host's CPU".into()],
        }
    }

    #[test]
    fn a_search_whose_probes_were_all_generator_bound_gives_no_number() {
        let mut s = Search::new(10, 1000, 0.1);
        s.record(10, Outcome::Generator);
        assert_eq!(s.next(), Some(5));
        s.record(5, Outcome::Generator);
        s.record(2, Outcome::Generator);
        s.record(1, Outcome::Generator);
        let (text, n) = answer(&s, &[], "office-medium", false);
        assert_eq!(n, None);
        assert!(text.contains("every probe was generator-bound"), "{text}");
        assert!(!text.contains("supports"), "{text}");
    }

    #[test]
    fn the_answer_names_the_worst_criterion_at_the_first_failure_and_what_ran_out() {
        let mut s = Search::new(10, 1000, 0.1);
        s.record(10, Outcome::Pass);
        s.record(20, Outcome::Fail);
        let rows = [
            row(10, Outcome::Pass, None),
            row(20, Outcome::Fail, Some(("p95(read) < 1s", 3_000_000.0))),
        ];
        let (text, n) = answer(&s, &rows, "office-medium", false);
        assert_eq!(n, Some(10));
        assert!(
            text.contains("supports 10 users of office-medium at its QoS: 10 held it, 20 did not"),
            "{text}"
        );
        assert!(
            text.contains("failed first at 20 users: p95(read) < 1s: 3000000 (3.0 x the limit)"),
            "{text}"
        );
        assert!(text.contains("ran out: the host's CPU"), "{text}");
    }

    #[test]
    fn what_ran_out_is_read_from_the_monitor_or_said_unknown() {
        let s = json!({"cores": 2, "extra": {"bound_by": {"bound_by": "server"}}});
        assert!(ran_out(&s)[0].contains("no monitor ran"));
        let s = json!({"cores": 2, "extra": {"bound_by": {"bound_by": "server"}, "monitor": {
            "mean": {"host.cpu.user_pct": 80.0, "host.cpu.system_pct": 17.0, "self.spate.cpu_pct": 20.0, "proc.imap.cpu_pct": 40.0,
                     "proc.qmgr.cpu_pct": 95.0, "proc.qmgr.count": 1.0, "queue.postfix.active": 40.0},
            "max": {"proc.imap.cpu_pct": 60.0, "queue.postfix.active": 900.0}}}});
        let said = ran_out(&s);
        assert_eq!(said.len(), 3, "{said:?}");
        assert!(said[0].starts_with("the host's CPU: 97 % busy"), "{said:?}");
        assert!(said[1].starts_with("qmgr: one process at 95 %"), "{said:?}");
        assert!(
            said[2].starts_with("queue.postfix.active: grew to 900"),
            "{said:?}"
        );
        let s = json!({"cores": 2, "extra": {"bound_by": {"bound_by": "server"}, "monitor": {
            "mean": {"host.cpu.user_pct": 30.0}, "max": {"host.cpu.user_pct": 35.0}}}});
        assert!(ran_out(&s)[0].contains("nothing this run watched was near its limit"));
    }
}
