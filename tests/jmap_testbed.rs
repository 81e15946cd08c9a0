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
    cyrus_counts_of(bed, accounts, "INBOX")
}

/// The same of `mailbox`.
fn cyrus_counts_of(bed: &Bed, accounts: &[(String, String)], mailbox: &str) -> Vec<Counts> {
    let script = r#"
import imaplib, re, sys
host, port = sys.argv[1].rsplit(":", 1)
mailbox = sys.argv[2]
for pair in sys.argv[3:]:
    user, password = pair.split(" ", 1)
    c = imaplib.IMAP4(host, int(port), timeout=60)
    c.login(user, password)
    typ, data = c.status(mailbox, "(MESSAGES UNSEEN)")
    assert typ == "OK", (typ, data)
    m = re.search(rb"MESSAGES (\d+) UNSEEN (\d+)", data[0])
    print(m.group(1).decode(), m.group(2).decode())
    c.logout()
"#;
    let o = Command::new("python3")
        .args(["-c", script, bed.var("SPATE_CYRUS_IMAP"), mailbox])
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

/// A users file of `accounts` in `dir`.
fn users_file(dir: &Path, accounts: &[(String, String)]) -> std::path::PathBuf {
    let all = dir.join("all.txt");
    let lines: String = accounts.iter().map(|(u, p)| format!("{u} {p}\n")).collect();
    std::fs::write(&all, lines).unwrap();
    all
}

/// Runs `spate ARGS... -q -o out`: its exit code, the run's summary (every unit accounted
/// for: common::summary checks attempted = accepted + rejected + failed + unfinished), and
/// what it printed.
fn run(args: &[&str], out: &Path) -> (Option<i32>, serde_json::Value, String) {
    let o = Command::new(SPATE)
        .args(args)
        .args(["-q", "-o", out.to_str().unwrap()])
        .output()
        .unwrap();
    let said = format!(
        "spate {args:?}:\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code(), common::summary(out), said)
}

/// [`run`], which must exit 0: the run's summary.
fn spate(args: &[&str], out: &Path) -> serde_json::Value {
    let (code, s, said) = run(args, out);
    assert_eq!(code, Some(0), "{said}");
    s
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

/// A bed with Cyrus alone and USERS accounts (None when it cannot run here: said why).
fn cyrus_bed(dir: &Path) -> Option<Bed> {
    // Cyrus comes as Debian packages the bed downloads (once) and extracts itself.
    let cached = Path::new("/var/cache/spate-testbed/cyrus/.extracted").exists();
    let fetch = ["/usr/bin/apt-get", "/usr/bin/dpkg-deb"]
        .iter()
        .all(|t| Path::new(t).exists());
    if !(cached || fetch) {
        common::cannot_run("the Cyrus test bed needs apt-get and dpkg-deb (Debian)");
        return None;
    }
    let users = USERS.to_string();
    Bed::up(
        &dir.join("bed"),
        &[
            "--no-mail",
            "--jmap",
            "cyrus",
            "--users",
            &users,
            "--port-offset",
            "auto",
        ],
    )
}

#[test]
fn cyrus_counts_what_spate_jmap_says_it_read_marked_and_destroyed() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = cyrus_bed(tmp.path()) else {
        return;
    };
    let users = USERS.to_string();
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
    let all = users_file(tmp.path(), &accounts);
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

/// An SMTP server that is not spate (Python, one thread per connection) on `addr`: it
/// takes every message and writes each to `dir` as N.eml, after a first line
/// `MAIL FROM RCPT...` with the envelope.
const SINK: &str = r#"
import os, socket, sys, threading
host, port = sys.argv[1].rsplit(":", 1)
out = sys.argv[2]
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((host, int(port)))
srv.listen(16)
lock = threading.Lock()
count = [0]
def serve(c):
    f = c.makefile("rb")
    say = lambda *lines: c.sendall(b"".join(l.encode() + b"\r\n" for l in lines))
    say("220 sink ESMTP")
    env = []
    while True:
        line = f.readline()
        if not line:
            return
        cmd = line.decode("latin-1").rstrip("\r\n")
        verb = cmd[:4].upper()
        if verb in ("EHLO", "HELO"):
            say("250-sink", "250-8BITMIME", "250 SIZE 52428800")
        elif verb == "MAIL":
            env = [cmd[10:].split(">")[0].strip("<")]
            say("250 ok")
        elif verb == "RCPT":
            env.append(cmd[8:].split(">")[0].strip("<"))
            say("250 ok")
        elif verb == "DATA":
            say("354 go on")
            body = []
            while True:
                l = f.readline()
                if not l or l in (b".\r\n", b".\n"):
                    break
                body.append(l[1:] if l.startswith(b"..") else l)
            with lock:
                count[0] += 1
                n = count[0]
            tmp = os.path.join(out, f".{n}")
            with open(tmp, "wb") as w:
                w.write(" ".join(env).encode() + b"\n" + b"".join(body))
            os.rename(tmp, os.path.join(out, f"{n}.eml"))
            say("250 queued")
        elif verb == "QUIT":
            say("221 bye")
            return
        elif verb in ("RSET", "NOOP"):
            say("250 ok")
        else:
            say("502 not here")
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// What Cyrus sends for JMAP's EmailSubmission goes by SMTP to the bed's relay port (never
/// to this machine's sendmail). With nothing listening there Cyrus offers no submission:
/// every visit of a run that sends is refused at its login (and only there: a login that
/// failed is made again by the next visit, which never asks for a mailbox it did not
/// find). With an SMTP server there, every message spate says it submitted is one that
/// server took, from the visiting account to another of the run, with spate's trace
/// header, and every draft is destroyed.
#[test]
fn cyrus_relays_what_spate_jmap_submits() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = cyrus_bed(tmp.path()) else {
        return;
    };
    let accounts = accounts(&bed, USERS);
    let relay = bed.var("SPATE_CYRUS_RELAY");
    let all = users_file(tmp.path(), &accounts);

    // Nothing listens on the relay: Cyrus lists no submission for the account, and
    // Identity/get at the login says so.
    let (code, s, said) = run(
        &[
            "jmap",
            bed.var("SPATE_JMAP"),
            "--users-file",
            all.to_str().unwrap(),
            "--users",
            "1",
            "-n",
            "3",
            "--submit",
            "100",
        ],
        &tmp.path().join("refused"),
    );
    assert_eq!(code, Some(1), "{said}");
    let t = &s["totals"];
    assert_eq!(
        (
            t["attempted"].as_u64(),
            t["rejected"].as_u64(),
            t["submitted"].as_u64()
        ),
        (Some(3), Some(3), Some(0)),
        "{t}"
    );
    let refusals = s["errors"].as_array().unwrap();
    assert!(
        refusals
            .iter()
            .all(|e| e["phase"] == "mailbox" && e["text"] == "accountNotSupportedByMethod"),
        "every visit refused at its login, and only there: {}",
        s["errors"]
    );
    // The session's login before its first visit, then one by each visit.
    assert_eq!(common::errors_of(&s, "mailbox", 0), 4, "{}", s["errors"]);

    // An SMTP server on the relay: every submission goes through it.
    let got = tmp.path().join("relayed");
    std::fs::create_dir(&got).unwrap();
    let _sink = common::Kill(
        Command::new("python3")
            .args(["-c", SINK, relay])
            .arg(&got)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("python3"),
    );
    common::wait_listen(relay, std::time::Duration::from_secs(10));
    let visits = 2 * USERS;
    let s = jmap(
        &bed,
        &all,
        USERS,
        visits,
        &[
            "--download",
            "0",
            "--submit",
            "100",
            "--message-size",
            "1k..4k",
        ],
        &tmp.path().join("submit"),
    );
    assert_eq!(total(&s, "submitted"), visits as u64, "{}", s["totals"]);
    let users: Vec<&str> = accounts.iter().map(|(u, _)| u.as_str()).collect();
    let relayed: Vec<String> = std::fs::read_dir(&got)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "eml"))
        .map(|p| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned())
        .collect();
    assert_eq!(relayed.len(), visits, "messages the relay took");
    for m in &relayed {
        let (envelope, message) = m.split_once('\n').unwrap();
        let parts: Vec<&str> = envelope.split(' ').collect();
        assert_eq!(parts.len(), 2, "one sender, one recipient: {envelope}");
        assert!(
            users.contains(&parts[0]) && users.contains(&parts[1]) && parts[0] != parts[1],
            "from one account of the run to another: {envelope}"
        );
        assert!(
            message.contains("X-Spate-Trace:"),
            "spate's trace header went out: {}",
            &message[..message.len().min(400)]
        );
    }
    // The drafts were destroyed with their submission; nothing reached an inbox (the
    // relay delivers nowhere).
    let none = Counts {
        messages: 0,
        unseen: 0,
    };
    assert_eq!(
        cyrus_counts_of(&bed, &accounts, "Drafts"),
        vec![none; USERS]
    );
    assert_eq!(cyrus_counts(&bed, &accounts), vec![none; USERS]);
    eprintln!(
        "refused without a relay: {}; submitted {} and the relay took {}",
        t["rejected"],
        total(&s, "submitted"),
        relayed.len()
    );
}
