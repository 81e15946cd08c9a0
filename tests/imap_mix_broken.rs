//! `spate imap`'s client mix against a scripted IMAP server that breaks one promise at a
//! time: a refusal is counted as a rejection by command and response code; an answer
//! that contradicts the protocol (a search hit beyond the mailbox, a part of another size
//! than its BODYSTRUCTURE said, a structure that does not parse, a MOVE without its
//! EXPUNGE) fails the visit as a protocol error of that command. Nothing hangs.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

mod common;

const SPATE: &str = env!("CARGO_BIN_EXE_spate");

/// What the scripted server gets wrong.
#[derive(Clone, Copy)]
enum Fault {
    SearchBeyondMailbox,
    PartSize,
    BadStructure,
    CopyRefused,
    MoveWithoutExpunge,
    /// Nothing broken: a plain IMAP4rev1 server without LITERAL+ and MOVE, whose LOGIN
    /// reply lists no capabilities; it refuses a non-synchronizing literal.
    Plain,
}

/// The answer to one command line (tag and the rest).
fn answer(fault: Fault, tag: &str, cmd: &str) -> String {
    let up = cmd.to_ascii_uppercase();
    let ok = format!("{tag} OK done\r\n");
    if up.starts_with("LOGIN") {
        return match fault {
            Fault::Plain => format!("{tag} OK logged in\r\n"),
            _ => format!("{tag} OK [CAPABILITY IMAP4rev1 LITERAL+ MOVE] logged in\r\n"),
        };
    }
    if up.starts_with("CAPABILITY") {
        return format!("* CAPABILITY IMAP4rev1\r\n{tag} OK done\r\n");
    }
    if up.starts_with("APPEND") {
        return format!("{tag} OK [APPENDUID 1 3] appended\r\n");
    }
    if up.starts_with("STORE") {
        return ok;
    }
    if up.starts_with("SELECT") {
        return format!(
            "* 2 EXISTS\r\n* OK [UIDNEXT 3] next\r\n{tag} OK [READ-WRITE] selected\r\n"
        );
    }
    if up.starts_with("SEARCH") {
        let hits = match fault {
            Fault::SearchBeyondMailbox => "1 9",
            _ => "1 2",
        };
        return format!("* SEARCH {hits}\r\n{ok}");
    }
    if let Some(rest) = up.strip_prefix("FETCH ") {
        let n = rest.split(' ').next().unwrap_or("1");
        if up.contains("BODYSTRUCTURE") {
            let s = match fault {
                Fault::BadStructure => "(\"TEXT\")".to_string(),
                _ => "(\"TEXT\" \"PLAIN\" NIL NIL NIL \"7BIT\" 10 1 NIL NIL NIL)".to_string(),
            };
            return format!("* {n} FETCH (BODYSTRUCTURE {s})\r\n{ok}");
        }
        if up.contains("BODY.PEEK[1]") {
            let body = match fault {
                Fault::PartSize => "hello",
                _ => "0123456789",
            };
            return format!("* {n} FETCH (BODY[1] {{{}}}\r\n{body})\r\n{ok}", body.len());
        }
        return format!("* {n} FETCH (BODY[HEADER] {{6}}\r\nA: b\r\n)\r\n{ok}");
    }
    if up.starts_with("COPY") {
        return match fault {
            Fault::CopyRefused => {
                format!("{tag} NO [OVERQUOTA] Quota exceeded (mailbox for user is full)\r\n")
            }
            _ => ok,
        };
    }
    if let Some(rest) = up.strip_prefix("MOVE ") {
        let n = rest.split(' ').next().unwrap_or("1");
        return match fault {
            Fault::MoveWithoutExpunge => ok,
            _ => format!("* {n} EXPUNGE\r\n{ok}"),
        };
    }
    if up.starts_with("LOGOUT") {
        return format!("* BYE bye\r\n{ok}");
    }
    format!("{tag} BAD unknown command\r\n")
}

fn session(fault: Fault, s: TcpStream) {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let _ = w.write_all(b"* OK [CAPABILITY IMAP4rev1 LITERAL+] scripted\r\n");
    let mut line = String::new();
    // Messages flagged \Deleted, for EXPUNGE to announce.
    let mut deleted = Vec::new();
    for _ in 0..100 {
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let Some((tag, cmd)) = line.trim_end().split_once(' ') else {
            return;
        };
        // A literal (APPEND's message) is read, after a continuation unless it is {n+}.
        if let Some((_, size)) = cmd.strip_suffix('}').and_then(|l| l.rsplit_once('{')) {
            let non_sync = size.ends_with('+');
            let n: usize = size.trim_end_matches('+').parse().unwrap();
            if non_sync && matches!(fault, Fault::Plain) {
                let _ = w.write_all(format!("{tag} BAD LITERAL+ was not offered\r\n").as_bytes());
                return;
            }
            if !non_sync {
                let _ = w.write_all(b"+ go ahead\r\n");
            }
            let mut lit = vec![0u8; n + 2];
            let _ = r.read_exact(&mut lit);
        }
        let up = cmd.to_ascii_uppercase();
        if up.starts_with("STORE") && up.contains("\\DELETED") {
            deleted.push(up.split(' ').nth(1).unwrap_or("1").to_string());
        }
        let reply = if up == "EXPUNGE" {
            let gone: String = deleted
                .drain(..)
                .map(|n| format!("* {n} EXPUNGE\r\n"))
                .collect();
            format!("{gone}{tag} OK expunged\r\n")
        } else {
            answer(fault, tag, cmd)
        };
        if w.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// Runs `spate imap` with `mix` (one visit) against a server with `fault`.
fn run(fault: Fault, mix: &[&str]) -> serde_json::Value {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = std::thread::spawn(move || {
        // One visit: the preflight's connection, then the visit's.
        // Bounded: a spate that never comes leaves the thread after 60 s, not forever.
        listener.set_nonblocking(true).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut served = 0;
        while served < 2 && std::time::Instant::now() < deadline {
            match listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    session(fault, s);
                    served += 1;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut args = vec![
        "imap",
        &addr,
        "--user-pattern",
        "u@x.test",
        "--count",
        "1",
        "--timeout",
        "5s",
        "-o",
        out.to_str().unwrap(),
        "-q",
    ];
    args.extend_from_slice(mix);
    let mut child = Command::new(SPATE)
        .args(&args)
        .env("SPATE_PASSWORD", "pw")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let status = common::wait_bounded(&mut child, Duration::from_secs(60));
    assert!(status.is_some(), "spate imap did not finish");
    server.join().unwrap();
    common::summary(Path::new(&out))
}

fn the_error(s: &serde_json::Value) -> (&str, &str, &str, &str) {
    let e = &s["errors"][0];
    assert_eq!(s["errors"].as_array().unwrap().len(), 1, "{s}");
    (
        e["phase"].as_str().unwrap(),
        e["kind"].as_str().unwrap(),
        e["text"].as_str().unwrap(),
        e["sample"].as_str().unwrap(),
    )
}

#[test]
fn broken_answers_are_protocol_errors_of_their_command() {
    let cases: &[(Fault, &[&str], &str, &str)] = &[
        (
            Fault::SearchBeyondMailbox,
            &["--search-date", "100"],
            "search_date",
            "up to message 9 in a mailbox of 2",
        ),
        (
            Fault::PartSize,
            &["--structure", "100", "-m", "1"],
            "part",
            "BODY[1] of message 1 is 5 bytes; its BODYSTRUCTURE said 10",
        ),
        (
            Fault::BadStructure,
            &["--structure", "100", "-m", "1"],
            "structure",
            "BODYSTRUCTURE",
        ),
        (
            Fault::MoveWithoutExpunge,
            &["--move", "100", "-m", "1"],
            "move",
            "no EXPUNGE",
        ),
    ];
    for (fault, mix, phase, sample) in cases {
        let s = run(*fault, mix);
        assert_eq!(s["totals"]["failed"], 1, "{s}");
        let (p, kind, _, got) = the_error(&s);
        assert_eq!((p, kind), (*phase, "protocol"), "{s}");
        assert!(got.contains(sample), "want {sample:?} in {got:?}");
    }
}

#[test]
fn a_refusal_is_counted_by_command_and_code() {
    let s = run(Fault::CopyRefused, &["--copy", "100", "-m", "2"]);
    assert_eq!(s["totals"]["rejected"], 1, "{s}");
    let (phase, kind, text, _) = the_error(&s);
    assert_eq!((phase, kind), ("copy", "NO"), "{s}");
    assert!(text.starts_with("[OVERQUOTA] Quota exceeded"), "{text}");
    // The visit logged out politely after the refusal: the server saw no failure.
    assert_eq!(s["totals"]["failed"], 0);
}

/// A server without LITERAL+ and MOVE that lists no capabilities at login: spate asks for
/// them (phase capability), APPENDs with a synchronizing literal after the continuation
/// and moves with COPY, STORE \Deleted and EXPUNGE, whose EXPUNGE it expects.
#[test]
fn a_plain_server_gets_the_fallbacks() {
    let s = run(
        Fault::Plain,
        &["--append", "100", "--move", "100", "-m", "1"],
    );
    assert_eq!(s["totals"]["accepted"], 1, "{s}");
    assert_eq!(s["errors"], serde_json::json!([]), "{s}");
    for (p, n) in [
        ("capability", 1),
        ("append", 1),
        ("move_emulated", 1),
        ("move", 0),
    ] {
        assert_eq!(common::phase_count(&s, p), n, "{p}: {s}");
    }
}
