//! `spate population` against the embedded server: every action counted in one class and
//! timed in its class's phase, the server's own counts agreeing with the sends and logins,
//! the realised mix beside the profile's, the QoS judged (qos.json, summary.json's
//! extra.qos, the exit status), and bad input refused in one line with exit 2.

mod common;

use std::path::Path;
use std::process::Command;

use common::embedded::{self, Embedded};
use common::{phase_count, SPATE};
use serde_json::Value;
use spate::serve::Config;

const USERS: usize = 60;

fn user(i: usize) -> String {
    format!("user{i}@example.test")
}

/// The embedded server with SMTP and IMAP, USERS accounts, and `per_box` messages in
/// every INBOX.
async fn bed(per_box: usize) -> Embedded {
    bed_with(per_box, Config::loopback()).await
}

async fn bed_with(per_box: usize, mut config: Config) -> Embedded {
    let any = Some("127.0.0.1:0".parse().unwrap());
    config.listen.smtp = any;
    config.listen.imap = any;
    let table: String = (0..USERS).map(|i| format!("{} pw\n", user(i))).collect();
    let b = embedded::start(config, &table).await;
    for i in 0..USERS {
        for n in 0..per_box {
            let msg = format!(
                "From: a@example.test\r\nTo: {u}\r\nSubject: spate {n}\r\n\r\nmessage {n} for {u}\r\n",
                u = user(i)
            );
            b.server.store.deliver(&user(i), msg.as_bytes()).unwrap();
        }
    }
    b
}

fn addr(b: &Embedded, which: &str) -> String {
    let a = match which {
        "smtp" => b.server.addrs.smtp,
        _ => b.server.addrs.imap,
    };
    a.expect("listening").to_string()
}

async fn population(b: &Embedded, out: &str, extra: &[&str]) -> common::Output {
    let (smtp, imap) = (addr(b, "smtp"), addr(b, "imap"));
    let mut args = vec![
        "population",
        "--users-file",
        &b.users_file,
        "--smtp",
        &smtp,
        "--imap",
        &imap,
        "-o",
        out,
        "--seed",
        "7",
    ];
    args.extend_from_slice(extra);
    common::spate(&args).await
}

fn json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_population_counts_every_action_in_its_class_and_judges_its_qos() {
    let b = bed(30).await;
    let out = b.out("heavy");
    // office-heavy: 272.6 actions a user a day, 12.5 % in the busiest hour; 600 simulated
    // seconds to the real one for 8 s (and until the run's next second ends it).
    let o = population(
        &b,
        &out,
        &[
            "--profile",
            "office-heavy",
            "--users",
            "20",
            "--time-scale",
            "600",
            "--duration",
            "8s",
            "--no-populate-check",
        ],
    )
    .await;
    let stdout = o.stdout.clone();
    assert!(o.ok, "{stdout}\n{}", o.stderr.clone());
    let dir = Path::new(&out);
    let s = common::summary(dir);
    let t = &s["totals"];
    let n = |k: &str| t[k].as_u64().unwrap_or(0);
    let classes = ["send", "check", "read", "flag", "move", "delete", "search"];
    let timed: u64 = classes.iter().map(|c| phase_count(&s, c)).sum();
    for c in classes {
        assert!(phase_count(&s, c) > 0, "no {c} action: {stdout}");
    }
    // Every accepted action is timed in its class, or did nothing on an empty INBOX.
    assert_eq!(n("failed") + n("rejected"), 0, "{t}");
    assert_eq!(n("accepted"), timed + n("nothing_to_do"), "{t}");
    // Per action a user does a day: how many the run's time gives 20 users.
    let pace = 20.0 * 0.125 * 600.0 * s["elapsed_s"].as_f64().unwrap() / 3600.0;
    let expected = 272.6 * pace;
    let got = n("attempted") as f64;
    assert!(
        (got / expected - 1.0).abs() < 0.15,
        "{got} actions, the profile's pace gives {expected:.0}"
    );
    // The server saw what the users did: one message accepted per send, one login per
    // desktop user (each logs in once and stays), every sent copy saved.
    let counts = b.server.stats.snapshot();
    assert_eq!(counts.messages_accepted, phase_count(&s, "send"));
    assert_eq!(counts.recipients_delivered, n("rcpt_accepted"));
    assert_eq!(counts.mailbox_logins, phase_count(&s, "login"));
    assert_eq!(
        phase_count(&s, "login"),
        20,
        "each desktop user logs in once, when it starts"
    );
    assert_eq!(phase_count(&s, "save_sent"), phase_count(&s, "send"));
    let sent_boxes: u64 = b
        .server
        .store
        .mailbox_counts()
        .iter()
        .map(|m| m.1 as u64)
        .sum();
    assert!(sent_boxes > 0);
    // The mix: the big classes within 20 % of the profile's pace.
    for (c, per_day) in [("read", 118.9), ("delete", 59.5), ("send", 38.6)] {
        let want = per_day * pace;
        let have = phase_count(&s, c) as f64;
        assert!(
            (have / want - 1.0).abs() < 0.2,
            "{c}: {have} against {want:.0}\n{stdout}"
        );
    }
    assert!(stdout.contains("actions per user per day"), "{stdout}");
    // QoS: the profile's ten criteria, every one measured; deliveries timed as the
    // users' checks found them, at most one per recipient copy accepted.
    let q = json(&dir.join("qos.json"));
    let criteria = q["criteria"].as_array().unwrap();
    assert_eq!(criteria.len(), 10, "{q}");
    assert_eq!(q["held"], true, "{q}");
    assert!(criteria.iter().all(|c| c["measured"] == true), "{q}");
    let delivered = phase_count(&s, "delivery");
    assert!(
        delivered > 0 && delivered <= n("rcpt_accepted"),
        "{delivered}: {t}"
    );
    assert_eq!(json(&dir.join("summary.json"))["extra"]["qos"], q);
    assert!(
        stdout.contains("10 of 10 criteria measured held"),
        "{stdout}"
    );
    let plan = json(&dir.join("plan.json"));
    assert_eq!(plan["model"]["model"], "paced");
    assert_eq!(plan["profile"]["name"], "office-heavy");

    // A criterion no server meets fails the run, and says by how much.
    let out = b.out("strict");
    let o = population(
        &b,
        &out,
        &[
            "--profile",
            "mobile-poll",
            "--users",
            "10",
            "--time-scale",
            "600",
            "--duration",
            "4s",
            "--qos",
            "p95(check) < 1us",
            "--no-populate-check",
        ],
    )
    .await;
    let stdout = o.stdout.clone();
    assert_eq!(o.code, Some(1), "{stdout}");
    assert!(
        stdout.contains("FAILED         p95(check) < 1us"),
        "{stdout}"
    );
    let q = json(&Path::new(&out).join("qos.json"));
    assert_eq!(q["held"], false);
    // The --qos rule replaced the profile's rule on the same figure.
    let texts: Vec<&str> = q["criteria"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["threshold"].as_str().unwrap())
        .collect();
    assert!(texts.contains(&"p95(check) < 1us") && !texts.contains(&"p95(check) < 5s"));
    // Mobile clients log in for every action that touches the mailbox.
    let s = common::summary(Path::new(&out));
    let mailbox_actions: u64 = ["check", "read", "delete"]
        .iter()
        .map(|c| phase_count(&s, c))
        .sum::<u64>()
        + phase_count(&s, "save_sent")
        + s["totals"]["nothing_to_do"].as_u64().unwrap_or(0);
    assert_eq!(phase_count(&s, "login"), mailbox_actions);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_population_input_is_one_line_and_exit_2_with_nothing_written() {
    let b = bed(0).await;
    let dir = b.dir.path();
    let file = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    };
    let medium = String::from_utf8(
        Command::new(SPATE)
            .args(["population", "--dump-profile", "office-medium"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(medium.contains("name = \"office-medium\""), "{medium}");
    let negative = file(
        "negative.toml",
        &medium.replace("check = 12", "check = -12"),
    );
    let rule = file(
        "rule.toml",
        &medium.replace("\"p95(send) < 1s\"", "\"p95(send) <\""),
    );
    let shares = file(
        "shares.toml",
        &medium.replace("\"1k\" = 10.20", "\"1k\" = 20.20"),
    );
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--profile".into(), "office-enormous".into()],
            "unknown profile",
        ),
        (vec!["--profile".into(), negative], "per_day.check = -12"),
        (vec!["--profile".into(), shares], "sum to 110.00 %"),
        (vec!["--profile".into(), rule], "profile office-medium qos"),
        (
            vec![
                "--profile".into(),
                "office-medium".into(),
                "--qos".into(),
                "p95(retr) < 1s".into(),
            ],
            "no action of a population",
        ),
        (
            vec![
                "--profile".into(),
                "office-medium".into(),
                "--users".into(),
                "61".into(),
            ],
            "only 60 accounts",
        ),
        (
            vec![
                "--profile".into(),
                "office-medium".into(),
                "--time-scale".into(),
                "0".into(),
            ],
            "--time-scale 0",
        ),
    ];
    for (i, (extra, says)) in cases.iter().enumerate() {
        let out = b.out(&format!("bad{i}"));
        let mut args: Vec<&str> = extra.iter().map(String::as_str).collect();
        if !extra.contains(&"--users".to_string()) {
            args.extend(["--users", "5"]);
        }
        // Were one of them let through, it would end soon.
        args.extend(["--duration", "2s"]);
        let o = population(&b, &out, &args).await;
        let stderr = o.stderr.clone();
        assert_eq!(o.code, Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(!Path::new(&out).exists(), "{extra:?} wrote {out}");
    }
    let list = Command::new(SPATE)
        .args(["population", "--list-profiles"])
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    for name in [
        "specmail-enterprise",
        "office-light",
        "office-medium",
        "office-heavy",
        "mobile-poll",
    ] {
        assert!(list.contains(name), "{list}");
    }
}

/// A profile of one action: reading a message (one FETCH of it, and a STORE), 100 a day,
/// a tenth of them in the busiest hour, on desktop clients; QoS: 95 % within a second.
const READER: &str = r#"
name = "reader"
about = "reads, and nothing else"
sources = ["a test"]
peak_hour_share = 10
clients = { desktop = 100 }
qos = ["p95(read) < 1s"]
[per_day]
read = 100
[messages]
sizes = { "1k" = 100 }
recipients = { "1" = 100 }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_capacity_found_is_what_a_known_service_cost_implies() {
    // A server that does one FETCH at a time, each 20 ms: at most 50 a second.
    let mut config = Config::loopback();
    config
        .faults
        .delays
        .push(spate::serve::faults::parse_delay("fetch:20ms").unwrap());
    config.faults.serial = Some(spate::serve::faults::Serial::default());
    let b = bed_with(30, config).await;
    let profile = b.dir.path().join("reader.toml");
    std::fs::write(&profile, READER).unwrap();
    let profile = profile.to_string_lossy().into_owned();
    // 720 simulated seconds a second: 100 x 0.1 x 720 / 3600 = 2 reads a user a second,
    // so 25 users keep the server's one FETCH at a time busy all the time.
    let implied = 50.0 / 2.0;
    let (smtp, imap) = (addr(&b, "smtp"), addr(&b, "imap"));
    let out = b.out("capacity");
    let o = common::spate(&[
        "capacity",
        "--profile",
        &profile,
        "--users-file",
        &b.users_file,
        "--smtp",
        &smtp,
        "--imap",
        &imap,
        "--time-scale",
        "720",
        "--min-users",
        "4",
        "--max-users",
        "60",
        "--probe",
        "8s",
        "--pause",
        "0s",
        "--precision",
        "10%",
        "--seed",
        "3",
        "-o",
        &out,
    ])
    .await;
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
    let c = json(&Path::new(&out).join("capacity.json"));
    let found = c["supported_users"].as_f64().unwrap();
    assert!(
        (found / implied - 1.0).abs() <= 0.2,
        "found {found} users, the cost implies {implied}: {}",
        o.stdout
    );
    let fail = c["lowest_failing_users"].as_f64().unwrap();
    assert!(fail > found, "{c}");
    assert!(
        o.stdout
            .contains(&format!("supports {found} users of reader")),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("failed first at"), "{}", o.stdout);
    // Every probe kept its results directory, and its QoS.
    for p in c["probes"].as_array().unwrap() {
        let dir = Path::new(&out).join(p["dir"].as_str().unwrap());
        assert!(dir.join("summary.json").exists(), "{p}");
        assert!(dir.join("qos.json").exists(), "{p}");
        assert_ne!(p["outcome"], "generator", "{p}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn populate_fills_to_the_profile_once_and_a_run_on_an_empty_store_is_refused() {
    let b = bed(3).await;
    let imap = addr(&b, "imap");
    // office-medium's users have 400 messages in INBOX: a store of 3 is refused.
    let out = b.out("empty");
    let o = population(
        &b,
        &out,
        &[
            "--profile",
            "office-medium",
            "--users",
            "20",
            "--duration",
            "2s",
        ],
    )
    .await;
    assert_eq!(o.code, Some(2), "{}", o.stdout);
    assert!(
        o.stderr
            .contains("the store is far from office-medium's: INBOX holds 3 messages"),
        "{}",
        o.stderr
    );
    assert!(
        o.stderr.contains("spate populate --profile office-medium"),
        "{}",
        o.stderr
    );
    assert!(!Path::new(&out).exists());
    let fill = |users: &'static str| {
        let (users_file, imap) = (b.users_file.clone(), imap.clone());
        async move {
            common::spate(&[
                "populate",
                "--profile",
                "office-medium",
                "--users",
                users,
                "--imap",
                &imap,
                "--users-file",
                &users_file,
                "--inbox",
                "250",
                "--archive",
                "7",
                "--seed",
                "1",
            ])
            .await
        }
    };
    let o = fill("20").await;
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
    // 20 mailboxes: 247 more in INBOX and 7 in Archive each.
    assert!(
        o.stdout
            .contains("20 filled, 0 already full, 0 failed; 5080 messages appended"),
        "{}",
        o.stdout
    );
    let held: std::collections::BTreeMap<String, usize> = b
        .server
        .store
        .mailbox_counts()
        .into_iter()
        .map(|(k, n, _)| (k, n))
        .collect();
    for i in 0..USERS {
        let want = if i < 20 { 257 } else { 3 };
        assert_eq!(
            held.get(&user(i)).copied(),
            Some(want),
            "{}: {held:?}",
            user(i)
        );
    }
    // Again: nothing to add.
    let o = fill("20").await;
    assert!(
        o.stdout
            .contains("0 filled, 20 already full, 0 failed; 0 messages appended"),
        "{}",
        o.stdout
    );
    // Now the run goes (400 wanted, 250 held: more than half).
    let out = b.out("filled");
    let o = population(
        &b,
        &out,
        &[
            "--profile",
            "office-medium",
            "--users",
            "20",
            "--time-scale",
            "600",
            "--duration",
            "2s",
        ],
    )
    .await;
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_start_at_the_login_rate_and_the_duration_counts_from_the_last() {
    let b = bed(0).await;
    let out = b.out("paced");
    // 20 desktop users at 10/s: user i starts (and logs in) i/10 s after the start, so
    // the last starts at 1.9 s, and the run lasts at least 1 s beyond it.
    let o = population(
        &b,
        &out,
        &[
            "--profile",
            "office-light",
            "--users",
            "20",
            "--login-rate",
            "10/s",
            "--duration",
            "1s",
            "--no-populate-check",
        ],
    )
    .await;
    assert!(o.code.is_some(), "{}\n{}", o.stdout, o.stderr);
    let dir = Path::new(&out);
    let s = common::summary(dir);
    assert_eq!(phase_count(&s, "login"), 20, "{}", o.stdout);
    let elapsed = s["elapsed_s"].as_f64().unwrap();
    assert!(
        elapsed >= 2.9,
        "the run ended at {elapsed} s, before its last user's start + 1 s"
    );
    // No more than the rate's share of connections in any one second (one more at the
    // edge: user 0 starts at 0 s).
    for row in common::column_rows(dir, &["connections"]) {
        assert!(row[0] <= 11, "{row:?} connections in one second at 10/s");
    }
    // A second of an office-light day does no action: only the logins are judged, and
    // nothing else is said to have held or failed.
    assert_eq!(s["totals"]["attempted"], 0, "{}", o.stdout);
    let q = json(&dir.join("qos.json"));
    let measured: Vec<&Value> = q["criteria"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["measured"] == true)
        .collect();
    assert_eq!(measured.len(), 1, "{q}");
    assert_eq!(measured[0]["threshold"], "p95(login) < 1s");
    assert!(
        o.stdout
            .contains("1 of 1 criteria measured held; 9 not measured"),
        "{}",
        o.stdout
    );
    let o = population(
        &b,
        &b.out("zero"),
        &[
            "--profile",
            "office-light",
            "--users",
            "2",
            "--login-rate",
            "0/s",
            "--duration",
            "1s",
        ],
    )
    .await;
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    assert!(o.stderr.contains("--login-rate 0/s"), "{}", o.stderr);
}
