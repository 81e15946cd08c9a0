//! `spate jmap` against a real JMAP server: the bed's Cyrus IMAP 3.6 (scripts/testbed up
//! --jmap cyrus, a private loopback instance). Mail delivered with `spate smtp --lmtp` is
//! read, marked and destroyed over JMAP, and every count in spate's summaries equals what
//! Cyrus's own IMAP says its mailboxes hold (STATUS MESSAGES and UNSEEN) before and after.

mod common;

use std::path::Path;
use std::process::Command;

use common::bed::Bed;

const SPATE: &str = env!("CARGO_BIN_EXE_spate");
/// Accounts of the bed, and messages delivered to each.
const USERS: usize = 3;
const EACH: u64 = 20;

/// What Cyrus says a user's INBOX holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counts {
    messages: u64,
    unseen: u64,
}

/// STATUS INBOX (MESSAGES UNSEEN) of every account, asked of Cyrus's imapd with Python's
/// imaplib (a client that is not spate).
fn cyrus_counts(bed: &Bed, accounts: &[(String, String)]) -> Vec<Counts> {
    let script = r#"
import imaplib, re, sys
host, port = sys.argv[1].rsplit(":", 1)
for pair in sys.argv[2:]:
    user, password = pair.split(" ", 1)
    c = imaplib.IMAP4(host, int(port), timeout=60)
    c.login(user, password)
    typ, data = c.status("INBOX", "(MESSAGES UNSEEN)")
    assert typ == "OK", (typ, data)
    m = re.search(rb"MESSAGES (\d+) UNSEEN (\d+)", data[0])
    print(m.group(1).decode(), m.group(2).decode())
    c.logout()
"#;
    let o = Command::new("python3")
        .args(["-c", script, bed.var("SPATE_CYRUS_IMAP")])
        .args(accounts.iter().map(|(u, p)| format!("{u} {p}")))
        .output()
        .expect("python3");
    assert!(
        o.status.success(),
        "imaplib STATUS: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let counts: Vec<Counts> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            let (m, u) = l.split_once(' ').unwrap();
            Counts {
                messages: m.parse().unwrap(),
                unseen: u.parse().unwrap(),
            }
        })
        .collect();
    assert_eq!(counts.len(), accounts.len());
    counts
}

/// The first `n` lines of the bed's users file: (address, password).
fn accounts(bed: &Bed, n: usize) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(bed.var("SPATE_USERS_FILE")).unwrap();
    text.lines()
        .take(n)
        .map(|l| {
            let (u, p) = l.split_once(' ').unwrap();
            (u.to_string(), p.to_string())
        })
        .collect()
}

/// Runs `spate ARGS... -q -o out`, which must exit 0: the run's summary (every unit
/// accounted for: common::summary checks attempted = accepted + rejected + failed +
/// unfinished).
fn spate(args: &[&str], out: &Path) -> serde_json::Value {
    let o = Command::new(SPATE)
        .args(args)
        .args(["-q", "-o", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "spate {args:?}:\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    common::summary(out)
}

/// `spate jmap` on the bed's session URL (Cyrus redirects it to /jmap and names its API
/// with a relative URL) for the accounts of `users_file`, one visit per session, `units`
/// visits in all, reading up to 100 messages each: its totals.
fn jmap(
    bed: &Bed,
    users_file: &Path,
    sessions: usize,
    units: usize,
    visit: &[&str],
    out: &Path,
) -> serde_json::Value {
    let (sessions, units) = (sessions.to_string(), units.to_string());
    let s = spate(
        &[
            &[
                "jmap",
                bed.var("SPATE_JMAP"),
                "--users-file",
                users_file.to_str().unwrap(),
                "--users",
                &sessions,
                "-n",
                &units,
                "--messages",
                "100",
            ],
            visit,
        ]
        .concat(),
        out,
    );
    let t = &s["totals"];
    assert_eq!(t["accepted"], t["attempted"], "{t}");
    assert_eq!(
        (t["rejected"].as_u64(), t["failed"].as_u64()),
        (Some(0), Some(0)),
        "{t}"
    );
    // Each login followed the 301 from /.well-known/jmap: two session requests.
    let logins = common::phase_count(&s, "mailbox");
    assert_eq!(
        common::phase_count(&s, "session"),
        2 * logins,
        "{}",
        s["phases"]
    );
    s
}

fn total(s: &serde_json::Value, counter: &str) -> u64 {
    s["totals"][counter]
        .as_u64()
        .unwrap_or_else(|| panic!("no {counter}: {}", s["totals"]))
}

/// The per-account runs: one session of account i, one visit (so that each account's
/// counts can be set beside Cyrus's for that account alone).
fn per_account(bed: &Bed, dir: &Path, name: &str, visit: &[&str]) -> Vec<serde_json::Value> {
    accounts(bed, USERS)
        .iter()
        .enumerate()
        .map(|(i, (u, p))| {
            let file = dir.join(format!("user{i}.txt"));
            std::fs::write(&file, format!("{u} {p}\n")).unwrap();
            jmap(bed, &file, 1, 1, visit, &dir.join(format!("{name}{i}")))
        })
        .collect()
}

#[test]
fn cyrus_counts_what_spate_jmap_says_it_read_marked_and_destroyed() {
    let tmp = tempfile::tempdir().unwrap();
    // Cyrus comes as Debian packages the bed downloads (once) and extracts itself.
    let cached = Path::new("/var/cache/spate-testbed/cyrus/.extracted").exists();
    let fetch = ["/usr/bin/apt-get", "/usr/bin/dpkg-deb"]
        .iter()
        .all(|t| Path::new(t).exists());
    if !(cached || fetch) {
        common::cannot_run("the Cyrus test bed needs apt-get and dpkg-deb (Debian)");
        return;
    }
    let users = USERS.to_string();
    let Some(bed) = Bed::up(
        &tmp.path().join("bed"),
        &[
            "--no-mail",
            "--jmap",
            "cyrus",
            "--users",
            &users,
            "--port-offset",
            "auto",
        ],
    ) else {
        return;
    };
    let accounts = accounts(&bed, USERS);
    let empty = Counts {
        messages: 0,
        unseen: 0,
    };
    assert_eq!(cyrus_counts(&bed, &accounts), vec![empty; USERS]);

    // Delivery: EACH messages to every account through Cyrus's LMTP, round robin.
    let n = (EACH * USERS as u64).to_string();
    let s = spate(
        &[
            "smtp",
            bed.var("SPATE_CYRUS_LMTP"),
            "--lmtp",
            "--to-file",
            bed.var("SPATE_USERS_FILE"),
            "--pick",
            "round-robin",
            "-n",
            &n,
            "-u",
            &users,
            "--size",
            "0..4k",
        ],
        &tmp.path().join("lmtp"),
    );
    let t = &s["totals"];
    assert_eq!(t["accepted"].as_u64(), Some(EACH * USERS as u64), "{t}");
    assert_eq!(t["rcpt_accepted"], t["accepted"], "{t}");
    let delivered = cyrus_counts(&bed, &accounts);
    let unread = Counts {
        messages: EACH,
        unseen: EACH,
    };
    assert_eq!(delivered, vec![unread; USERS], "Cyrus after the delivery");

    // Reading: every message's body retrieved, nothing marked (Email/get sets no $seen).
    let read = per_account(&bed, tmp.path(), "read", &["--download", "100"]);
    for (i, s) in read.iter().enumerate() {
        assert_eq!(total(s, "retrieved"), delivered[i].messages, "account {i}");
        assert_eq!(
            (total(s, "flagged"), total(s, "deleted")),
            (0, 0),
            "account {i}"
        );
    }
    assert_eq!(
        cyrus_counts(&bed, &accounts),
        delivered,
        "Cyrus after reading"
    );

    // Marking and destroying: a quarter destroyed, half of the rest marked $seen.
    let before = cyrus_counts(&bed, &accounts);
    let set = per_account(
        &bed,
        tmp.path(),
        "set",
        &["--download", "0", "--delete", "25", "--flag", "50"],
    );
    let after = cyrus_counts(&bed, &accounts);
    let (mut flagged, mut deleted) = (0, 0);
    for (i, s) in set.iter().enumerate() {
        let (f, d) = (total(s, "flagged"), total(s, "deleted"));
        assert_eq!(total(s, "retrieved"), 0, "account {i}");
        assert_eq!(
            d,
            before[i].messages - after[i].messages,
            "account {i}: destroyed"
        );
        // Every message was unread before: the destroyed ones were, the marked ones
        // are no longer.
        assert_eq!(before[i].unseen, before[i].messages, "account {i}");
        assert_eq!(
            f,
            before[i].unseen - after[i].unseen - d,
            "account {i}: marked"
        );
        (flagged, deleted) = (flagged + f, deleted + d);
    }
    // The evenly spread percentages of 20 messages: 5 destroyed, 7 of the 15 others marked.
    assert_eq!((flagged, deleted), (7 * USERS as u64, 5 * USERS as u64));

    // Emptying, all sessions at once (how the visits fall on the accounts is the
    // scheduler's business; what was destroyed is what Cyrus no longer has).
    let all = tmp.path().join("all.txt");
    std::fs::write(
        &all,
        accounts
            .iter()
            .map(|(u, p)| format!("{u} {p}\n"))
            .collect::<String>(),
    )
    .unwrap();
    let before = after;
    let s = jmap(
        &bed,
        &all,
        USERS,
        2 * USERS,
        &["--download", "0", "--delete", "100"],
        &tmp.path().join("empty"),
    );
    let after = cyrus_counts(&bed, &accounts);
    let gone: u64 = before
        .iter()
        .zip(&after)
        .map(|(b, a)| b.messages - a.messages)
        .sum();
    assert_eq!(total(&s, "deleted"), gone, "{:?} -> {:?}", before, after);
    assert_eq!(total(&s, "flagged"), 0);
    eprintln!(
        "delivered {} (Cyrus {:?}); read: retrieved {} (Cyrus {} messages); set: flagged {flagged} deleted {deleted} (Cyrus {:?}); empty: deleted {} (Cyrus {:?})",
        t["accepted"],
        delivered,
        read.iter().map(|s| total(s, "retrieved")).sum::<u64>(),
        delivered.iter().map(|c| c.messages).sum::<u64>(),
        before,
        total(&s, "deleted"),
        after
    );
}
