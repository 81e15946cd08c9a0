//! `spate imap`'s client mix (APPEND, COPY/MOVE, SEARCH by date and header, BODYSTRUCTURE
//! then a part) against the test bed's Dovecot: the counts spate reports reconcile with
//! what is in the Maildirs afterwards, and its search hits with what was delivered. Bad
//! values of the mix's options: one line, exit 2.

mod common;

use std::path::Path;
use std::process::Command;

use common::bed::Bed;
use common::phase_count;
use serde_json::Value;

const SPATE: &str = env!("CARGO_BIN_EXE_spate");

/// Files in a Maildir folder's new/ and cur/, and how many carry flag `f` (`:2,..f..`).
fn maildir(dir: &Path, f: char) -> (usize, usize) {
    let mut n = (0, 0);
    for sub in ["new", "cur"] {
        for e in std::fs::read_dir(dir.join(sub)).into_iter().flatten() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            n.0 += 1;
            if name.split_once(":2,").is_some_and(|(_, fl)| fl.contains(f)) {
                n.1 += 1;
            }
        }
    }
    n
}

fn run(args: &[&str]) -> (Value, String) {
    common::run_summary(args, true)
}

#[test]
fn client_mix_against_dovecot_reconciles() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = Bed::up(
        &tmp.path().join("bed"),
        &["--users", "10", "--port-offset", "auto"],
    ) else {
        return;
    };
    let users = bed.var("SPATE_USERS_FILE");
    let root = Path::new(bed.var("SPATE_MAILDIR_ROOT"));
    let o = |n: &str| tmp.path().join(n).to_string_lossy().into_owned();
    let attachment = tmp.path().join("a.txt");
    std::fs::write(&attachment, "an attachment\n".repeat(20)).unwrap();
    // Each of the 10 mailboxes: 4 messages from spate (two parts each: text and an
    // attachment) and 1 from someone else, all through Dovecot's LMTP.
    let deliver = |from: &str, count: &str, out: &str| {
        let (s, _) = run(&[
            "smtp",
            "--lmtp",
            bed.var("SPATE_LMTP"),
            "--to-file",
            users,
            "--pick",
            "round-robin",
            "--from",
            from,
            "--count",
            count,
            "--size",
            "200..3k",
            "--attach",
            attachment.to_str().unwrap(),
            "-o",
            out,
            "-q",
        ]);
        assert_eq!(s["totals"]["accepted"], count.parse::<u64>().unwrap());
    };
    deliver("spate@example.test", "40", &o("lmtp-spate"));
    deliver("other@example.test", "10", &o("lmtp-other"));

    // Five visits, one to each of user0..4 (5 messages each): every visit searches by date
    // and by header and appends one message; every message gets its structure and a
    // part; half are copied to Archive, a quarter moved there (MOVE: Dovecot offers it).
    let (s, stdout) = run(&[
        "imap",
        bed.var("SPATE_IMAP"),
        "--users-file",
        users,
        "--users",
        "5",
        "--count",
        "5",
        "--append",
        "100",
        "--copy",
        "50",
        "--move",
        "25",
        "--search-date",
        "100",
        "--search-header",
        "100",
        "--structure",
        "100",
        "-o",
        &o("mix"),
        "-q",
    ]);
    assert_eq!(s["totals"]["accepted"], 5, "{s}");
    assert_eq!(s["errors"], Value::Array(vec![]), "{s}");
    let phases = [
        ("append", 5),
        ("copy", 10), // 2 of 5 per visit (50 % spread: messages 2 and 4)
        ("move", 5),  // message 4 (25 %)
        ("move_emulated", 0),
        ("create", 5), // Archive, once in each mailbox, after [TRYCREATE]
        ("search_date", 5),
        ("search_header", 5),
        ("structure", 25),
        ("part", 25),
        ("fetch", 25),
    ];
    for (p, n) in phases {
        assert_eq!(phase_count(&s, p), n, "{p}: {s}");
    }
    // Date: every message arrived today, 5 a mailbox. Header: Subject (visits 0, 2, 4)
    // finds all 5, From finds spate's 4 and not the other sender's.
    assert_eq!(s["totals"]["search_hits"], 5 * 5 + 3 * 5 + 2 * 4, "{s}");
    assert!(
        stdout.contains("appended 5  copied 10  moved 5 (by MOVE)"),
        "{stdout}"
    );
    for i in 0..5 {
        let mb = root.join(format!("user{i}@example.test"));
        // 5 delivered - 1 moved + 1 appended, the appended one \Seen (nothing else is:
        // every read was a PEEK).
        assert_eq!(maildir(&mb, 'S'), (5, 1), "user{i} INBOX");
        assert_eq!(
            maildir(&mb.join(".Archive"), 'S').0,
            2 + 1,
            "user{i} Archive"
        );
    }
    for i in 5..10 {
        let mb = root.join(format!("user{i}@example.test"));
        assert_eq!(maildir(&mb, 'S'), (5, 0), "user{i} untouched");
    }

    // The same on user5..9 as a client without MOVE and LITERAL+: moves become COPY,
    // STORE \Deleted, EXPUNGE; APPEND waits for the continuation. A quarter deleted too:
    // message 4 (flagged, expunged at the end); the move takes message 2 (half of those
    // not deleted), and its EXPUNGE shifts the numbers the visit goes on with.
    let (s, stdout) = run(&[
        "imap",
        bed.var("SPATE_IMAP"),
        "--users-file",
        users,
        "--users",
        "5",
        "--count",
        "10",
        "--append",
        "50",
        "--append-flags",
        "\\Flagged $Spate",
        "--copy",
        "50",
        "--move",
        "50",
        "--delete",
        "25",
        "--to-mailbox",
        "Old mail",
        "--without",
        "MOVE,literal+",
        "-m",
        "4",
        "-o",
        &o("mix-old"),
        "-q",
    ]);
    assert_eq!(s["totals"]["accepted"], 10, "{s}");
    assert_eq!(s["errors"], Value::Array(vec![]), "{s}");
    for (p, n) in [("append", 5), ("move", 0), ("create", 10)] {
        assert_eq!(phase_count(&s, p), n, "{p}: {s}");
    }
    assert!(
        stdout.contains("(by COPY+STORE+EXPUNGE, no MOVE)"),
        "{stdout}"
    );
    let moved = phase_count(&s, "move_emulated");
    let copied = phase_count(&s, "copy");
    let deleted = s["totals"]["deleted"].as_u64().unwrap();
    // Ten visits over ten mailboxes: user0..9 once each (round-robin over the file).
    let (mut inbox, mut flagged, mut archived) = (0, 0, 0);
    for i in 0..10 {
        let mb = root.join(format!("user{i}@example.test"));
        let (n, f) = maildir(&mb, 'F');
        inbox += n;
        flagged += f;
        archived += maildir(&mb.join(".Old mail"), 'S').0;
    }
    assert_eq!(flagged, 5, "appended with \\Flagged");
    assert_eq!(inbox as u64, 50 + 5 - moved - deleted, "{s}");
    assert_eq!(archived as u64, copied + moved, "{s}");
    assert!(moved >= 10 && deleted >= 10, "{s}");

    // A POP3/IMAP run: half the 8 visits IMAP, and half of those append and search.
    let (s, _) = run(&[
        "pop3",
        bed.var("SPATE_POP3"),
        "--imap-percent",
        "50",
        "--imap-target",
        bed.var("SPATE_IMAP"),
        "--users-file",
        users,
        "--users",
        "2",
        "--count",
        "8",
        "-m",
        "1",
        "--append",
        "50",
        "--search-header",
        "50",
        "-o",
        &o("mixed"),
        "-q",
    ]);
    assert_eq!(s["totals"]["accepted"], 8, "{s}");
    for (p, n) in [
        ("stat", 4),
        ("select", 4),
        ("append", 2),
        ("search_header", 2),
    ] {
        assert_eq!(phase_count(&s, p), n, "{p}: {s}");
    }
}

fn one_line_exit_2(args: &[&str], want: &str) {
    let o = Command::new(SPATE)
        .args(args)
        .env("SPATE_PASSWORD", "pw")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    assert!(err.contains(want), "{args:?}: want {want:?} in {err}");
}

#[test]
fn bad_mix_options_are_one_line_and_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("never");
    let o_ = out.to_str().unwrap();
    let base = [
        "imap",
        "127.0.0.1:1143",
        "--user-pattern",
        "u{0..1}@x.test",
        "-o",
        o_,
    ];
    let cases: &[(&[&str], &str)] = &[
        (&["--append", "101"], "--append"),
        (&["--structure", "-1"], "--structure"),
        (&["--copy", "5", "--to-mailbox", "a\"b"], "--to-mailbox"),
        (&["--move", "5", "--to-mailbox", "inbox"], "--to-mailbox"),
        (
            &["--to-mailbox", "Archive"],
            "--to-mailbox needs --copy or --move",
        ),
        (
            &["--search-text", "x"],
            "--search-text needs --search-header",
        ),
        (
            &["--search-header", "5", "--search-text", ""],
            "--search-text",
        ),
        (
            &["--search-date", "5", "--search-days", "40000"],
            "--search-days",
        ),
        (&["--append", "5", "--append-size", "10x"], "size"),
        (&["--append", "5", "--append-size", "65M"], "64 MiB"),
        (
            &["--append", "5", "--append-flags", "\\Recent"],
            "--append-flags",
        ),
        (
            &["--append", "5", "--append-flags", "(x)"],
            "--append-flags",
        ),
        (
            &["--append", "5", "--append-from", "/nonexistent"],
            "/nonexistent",
        ),
        (&["--move", "5", "--without", "IDLE"], "--without 'IDLE'"),
        (&["--without", "MOVE"], "--without MOVE needs --move"),
    ];
    for (extra, want) in cases {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        one_line_exit_2(&args, want);
    }
    one_line_exit_2(
        &[
            "pop3",
            "127.0.0.1:1110",
            "--user-pattern",
            "u{0..1}@x.test",
            "--copy",
            "5",
            "-o",
            o_,
        ],
        "is an IMAP option",
    );
    assert!(!out.exists(), "a refused run writes nothing");
}
