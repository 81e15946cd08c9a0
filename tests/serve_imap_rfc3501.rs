//! RFC 3501 transcripts against the embedded IMAP server, in `C:`/`S:` form: the RFC's
//! own examples (section 6, with its mailbox names and messages) and the exchanges
//! imaptest checks, replayed line by line. In an `S:` line `...` matches any text.

mod common;

use common::Raw;
use spate::serve::{self, Config, Running, Users};

/// RFC 3501 6.3.11's message (with CRLF line ends).
const FRED: &str = "Date: Mon, 7 Feb 1994 21:52:25 -0800 (PST)\r\n\
From: Fred Foobar <foobar@Blurdybloop.COM>\r\n\
Subject: afternoon meeting\r\n\
To: mooch@owatagu.siam.edu\r\n\
Message-Id: <B27397-0100000@Blurdybloop.COM>\r\n\
MIME-Version: 1.0\r\n\
Content-Type: TEXT/PLAIN; CHARSET=US-ASCII\r\n\
\r\n\
Hello Joe, do you think we can meet at 3:30 tomorrow?\r\n";

const MULTI: &str = "From: Smith <smith@example.test>\r\n\
Date: Tue, 1 Mar 1994 10:00:00 +0000\r\n\
Subject: parts\r\n\
Content-Type: multipart/mixed; boundary=\"b1\"\r\n\
\r\n\
preamble\r\n\
--b1\r\n\
Content-Type: text/plain; charset=utf-8\r\n\
\r\n\
first part\r\n\
--b1\r\n\
Content-Type: message/rfc822\r\n\
\r\n\
Subject: inner\r\n\
\r\n\
inner body\r\n\
--b1--\r\n";

async fn server() -> Running {
    server_with(0).await
}

/// The server with `n` small messages in carol's INBOX.
async fn server_with(n: usize) -> Running {
    let mut config = Config::loopback();
    config.listen.imap = Some("127.0.0.1:0".parse().unwrap());
    config.users = Users::parse("carol@example.test pw\n").unwrap();
    let running = serve::start(config).await.unwrap();
    for i in 0..n {
        let msg = format!("Subject: {i}\r\n\r\nx\r\n");
        running
            .store
            .deliver("carol@example.test", msg.as_bytes())
            .unwrap();
    }
    running
}

/// Does `got` match `want`, where `...` in `want` matches any text?
fn matches(want: &str, got: &str) -> bool {
    let parts: Vec<&str> = want.split("...").collect();
    if parts.len() == 1 {
        return want == got;
    }
    let Some(mut rest) = got.strip_prefix(parts[0]) else {
        return false;
    };
    for (i, p) in parts[1..].iter().enumerate() {
        let last = i == parts.len() - 2;
        if last {
            return rest.ends_with(p);
        }
        match rest.find(p) {
            Some(at) => rest = &rest[at + p.len()..],
            None => return false,
        }
    }
    true
}

/// Replays a transcript on connection `c`: `C:` lines are sent, `S:` lines must come back
/// in order; lines starting with `#` are comments.
fn replay(c: &mut Raw, transcript: &str) {
    let mut seen = Vec::new();
    for line in transcript.lines().map(str::trim_start) {
        if let Some(cmd) = line.strip_prefix("C: ") {
            c.send(format!("{cmd}\r\n").as_bytes());
            seen.push(format!("C: {cmd}"));
        } else if let Some(want) = line.strip_prefix("S: ") {
            let got = c.line();
            seen.push(format!("S: {got}"));
            assert!(
                matches(want, &got),
                "expected  S: {want}\ngot       S: {got}\nafter:\n{}",
                seen.join("\n")
            );
        } else {
            assert!(line.is_empty() || line.starts_with('#'), "bad line {line}");
        }
    }
}

fn login(addr: std::net::SocketAddr) -> Raw {
    let mut c = Raw::connect(addr);
    replay(
        &mut c,
        "S: * OK [CAPABILITY IMAP4rev1 LITERAL+ SASL-IR IDLE NAMESPACE ID ENABLE UIDPLUS MOVE UNSELECT CHILDREN SPECIAL-USE MULTIAPPEND ESEARCH CONDSTORE AUTH=PLAIN STARTTLS] spate IMAP ready
         C: a001 LOGIN carol pw
         S: a001 OK [CAPABILITY IMAP4rev1 LITERAL+ SASL-IR IDLE NAMESPACE ID ENABLE UIDPLUS MOVE UNSELECT CHILDREN SPECIAL-USE MULTIAPPEND ESEARCH CONDSTORE] logged in",
    );
    c
}

/// Sends an APPEND with a synchronizing literal, as RFC 3501 6.3.11 shows it.
fn append(c: &mut Raw, tag: &str, mailbox: &str, extra: &str, msg: &str) {
    c.send(format!("{tag} APPEND {mailbox} {extra}{{{}}}\r\n", msg.len()).as_bytes());
    assert!(c.line().starts_with("+ "));
    c.send(format!("{msg}\r\n").as_bytes());
    let done = c.line();
    assert!(
        matches(&format!("{tag} OK [APPENDUID ...] APPEND completed"), &done),
        "{done}"
    );
}

async fn blocking(f: impl FnOnce() + Send + 'static) {
    tokio::task::spawn_blocking(f).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mailbox_commands_as_in_rfc3501_section_6_3() {
    let running = server().await;
    let addr = running.addrs.imap.unwrap();
    blocking(move || {
        let mut c = login(addr);
        replay(
            &mut c,
            r#"# 6.3.3 CREATE: a trailing delimiter is dropped; superiors are created.
            C: A003 CREATE owatagusiam/
            S: A003 OK CREATE completed
            C: A004 CREATE owatagusiam/blurdybloop
            S: A004 OK CREATE completed
            C: A005 CREATE owatagusiam
            S: A005 NO [ALREADYEXISTS] mailbox exists
            C: A006 CREATE inbox
            S: A006 NO [ALREADYEXISTS] INBOX always exists
            # 6.3.4 DELETE: a name with inferiors keeps existing as \Noselect.
            C: A680 CREATE blurdybloop
            S: A680 OK CREATE completed
            C: A681 CREATE foo/bar
            S: A681 OK CREATE completed
            C: A682 DELETE foo
            S: A682 OK DELETE completed
            C: A683 LIST "" *
            S: * LIST (\HasNoChildren) "/" INBOX
            S: * LIST (\HasNoChildren) "/" blurdybloop
            S: * LIST (\Noselect \HasChildren) "/" foo
            S: * LIST (\HasNoChildren) "/" foo/bar
            S: * LIST (\HasChildren) "/" owatagusiam
            S: * LIST (\HasNoChildren) "/" owatagusiam/blurdybloop
            S: A683 OK LIST completed
            C: A684 DELETE foo
            S: A684 NO [INUSE] mailbox has children
            C: A685 DELETE foo/bar
            S: A685 OK DELETE completed
            C: A686 LIST "" %
            S: * LIST (\HasNoChildren) "/" INBOX
            S: * LIST (\HasNoChildren) "/" blurdybloop
            S: * LIST (\Noselect \HasNoChildren) "/" foo
            S: * LIST (\HasChildren) "/" owatagusiam
            S: A686 OK LIST completed
            C: A687 DELETE foo
            S: A687 OK DELETE completed
            C: A688 DELETE INBOX
            S: A688 NO [CANNOT] INBOX cannot be deleted
            C: A689 DELETE nosuch
            S: A689 NO [NONEXISTENT] no such mailbox
            # 6.3.5 RENAME, with inferiors; and RENAME INBOX moves its messages.
            C: A682 LIST "" *
            S: * LIST (\HasNoChildren) "/" INBOX
            S: * LIST (\HasNoChildren) "/" blurdybloop
            S: * LIST (\HasChildren) "/" owatagusiam
            S: * LIST (\HasNoChildren) "/" owatagusiam/blurdybloop
            S: A682 OK LIST completed
            C: A683 RENAME blurdybloop sarasoop
            S: A683 OK RENAME completed
            C: A684 RENAME owatagusiam zowie
            S: A684 OK RENAME completed
            C: A685 LIST "" *
            S: * LIST (\HasNoChildren) "/" INBOX
            S: * LIST (\HasNoChildren) "/" sarasoop
            S: * LIST (\HasChildren) "/" zowie
            S: * LIST (\HasNoChildren) "/" zowie/blurdybloop
            S: A685 OK LIST completed
            C: A686 RENAME nosuch x
            S: A686 NO [NONEXISTENT] no such mailbox
            C: A687 RENAME sarasoop zowie
            S: A687 NO [ALREADYEXISTS] target mailbox exists
            # 6.3.6/6.3.7/6.3.9 SUBSCRIBE, UNSUBSCRIBE, LSUB (a subscribed child under %).
            C: A002 SUBSCRIBE zowie/blurdybloop
            S: A002 OK SUBSCRIBE completed
            C: A003 LSUB "" *
            S: * LSUB () "/" INBOX
            S: * LSUB () "/" zowie/blurdybloop
            S: A003 OK LSUB completed
            C: A004 LSUB "" %
            S: * LSUB () "/" INBOX
            S: * LSUB (\Noselect) "/" zowie
            S: A004 OK LSUB completed
            C: A005 UNSUBSCRIBE zowie/blurdybloop
            S: A005 OK UNSUBSCRIBE completed
            C: A006 LSUB "zowie/" *
            S: A006 OK LSUB completed
            # 6.3.8 LIST: the delimiter, a reference, INBOX in any case.
            C: A101 LIST "" ""
            S: * LIST (\Noselect) "/" ""
            S: A101 OK LIST completed
            C: A102 LIST zowie/ %
            S: * LIST (\HasNoChildren) "/" zowie/blurdybloop
            S: A102 OK LIST completed
            C: A103 LIST "" inBox
            S: * LIST (\HasNoChildren) "/" INBOX
            S: A103 OK LIST completed
            # SPECIAL-USE attributes by name.
            C: A104 CREATE Trash
            S: A104 OK CREATE completed
            C: A105 LIST "" Trash
            S: * LIST (\HasNoChildren \Trash) "/" Trash
            S: A105 OK LIST completed
            C: A106 LOGOUT
            S: * BYE logging out
            S: A106 OK LOGOUT completed"#,
        );
    })
    .await;
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_status_select_fetch_store_copy_expunge() {
    let running = server().await;
    let addr = running.addrs.imap.unwrap();
    let store = running.store.clone();
    blocking(move || {
        let mut c = login(addr);
        replay(&mut c, "C: A001 CREATE saved\nS: A001 OK CREATE completed");
        // 6.3.11 APPEND, as in the RFC, then with flags and a date.
        append(&mut c, "A003", "saved", "", FRED);
        append(
            &mut c,
            "A004",
            "saved",
            "(\\Flagged $Label1) \" 7-Feb-1994 21:52:25 -0800\" ",
            MULTI,
        );
        append(&mut c, "A005", "saved", "(\\Seen) ", FRED);
        replay(
            &mut c,
            r#"C: A006 APPEND nosuch {1+}
            C: x
            S: A006 NO [TRYCREATE] no such mailbox
            # 6.3.10 STATUS
            C: A042 STATUS saved (UIDNEXT MESSAGES UNSEEN RECENT)
            S: * STATUS saved (UIDNEXT 4 MESSAGES 3 UNSEEN 2 RECENT 3)
            S: A042 OK STATUS completed
            C: A043 STATUS saved (BOGUS)
            S: A043 BAD unknown STATUS item BOGUS
            # 6.3.1 SELECT
            C: A142 SELECT saved
            S: * FLAGS (\Answered \Flagged \Deleted \Seen \Draft $Label1)
            S: * OK [PERMANENTFLAGS (\Answered \Flagged \Deleted \Seen \Draft $Label1 \*)] Flags permitted
            S: * 3 EXISTS
            S: * 3 RECENT
            S: * OK [UNSEEN 1] First unseen
            S: * OK [UIDVALIDITY ...] UIDs valid
            S: * OK [UIDNEXT 4] Predicted next UID
            S: A142 OK [READ-WRITE] completed
            # 6.4.5 FETCH: every data item.
            C: A654 FETCH 2 (FLAGS INTERNALDATE RFC822.SIZE UID)
            S: * 2 FETCH (FLAGS (\Flagged $Label1 \Recent) INTERNALDATE "08-Feb-1994 05:52:25 +0000" RFC822.SIZE 283 UID 2)
            S: A654 OK FETCH completed
            C: A655 FETCH 1 ENVELOPE
            S: * 1 FETCH (ENVELOPE ("Mon, 7 Feb 1994 21:52:25 -0800 (PST)" "afternoon meeting" (("Fred Foobar" NIL "foobar" "Blurdybloop.COM")) (("Fred Foobar" NIL "foobar" "Blurdybloop.COM")) (("Fred Foobar" NIL "foobar" "Blurdybloop.COM")) ((NIL NIL "mooch" "owatagu.siam.edu")) NIL NIL NIL "<B27397-0100000@Blurdybloop.COM>"))
            S: A655 OK FETCH completed
            C: A656 FETCH 1 BODYSTRUCTURE
            S: * 1 FETCH (BODYSTRUCTURE ("TEXT" "PLAIN" ("CHARSET" "US-ASCII") NIL NIL "7BIT" 55 1 NIL NIL NIL NIL))
            S: A656 OK FETCH completed
            C: A657 FETCH 2 BODY
            S: * 2 FETCH (BODY (("TEXT" "PLAIN" ("CHARSET" "utf-8") NIL NIL "7BIT" 10 1)("MESSAGE" "RFC822" NIL NIL NIL "7BIT" 28 (NIL "inner" NIL NIL NIL NIL NIL NIL NIL NIL) ("TEXT" "PLAIN" ("CHARSET" "us-ascii") NIL NIL "7BIT" 10 1) 3) "MIXED"))
            S: A657 OK FETCH completed
            C: A658 FETCH 2 (BODY.PEEK[1] BODY.PEEK[2.TEXT] BODY.PEEK[2.1] BODY.PEEK[9])
            S: * 2 FETCH (BODY[1] {10}
            S: first part BODY[2.TEXT] {10}
            S: inner body BODY[2.1] {10}
            S: inner body BODY[9] NIL)
            S: A658 OK FETCH completed
            C: A659 FETCH 2 (BODY.PEEK[1.MIME] BODY.PEEK[HEADER.FIELDS (SUBJECT)] BODY.PEEK[TEXT]<0.8>)
            S: * 2 FETCH (BODY[1.MIME] {43}
            S: Content-Type: text/plain; charset=utf-8
            S: 
            S:  BODY[HEADER.FIELDS (SUBJECT)] {18}
            S: Subject: parts
            S: 
            S:  BODY[TEXT]<0> {8}
            S: preamble)
            S: A659 OK FETCH completed
            # A body fetch without PEEK sets \Seen, and says so.
            C: A660 FETCH 1 (RFC822.HEADER BODY[TEXT])
            S: * 1 FETCH (RFC822.HEADER {255}
            S: Date: Mon, 7 Feb 1994 21:52:25 -0800 (PST)
            S: From: Fred Foobar <foobar@Blurdybloop.COM>
            S: Subject: afternoon meeting
            S: To: mooch@owatagu.siam.edu
            S: Message-Id: <B27397-0100000@Blurdybloop.COM>
            S: MIME-Version: 1.0
            S: Content-Type: TEXT/PLAIN; CHARSET=US-ASCII
            S: 
            S:  BODY[TEXT] {55}
            S: Hello Joe, do you think we can meet at 3:30 tomorrow?
            S:  FLAGS (\Seen \Recent))
            S: A660 OK FETCH completed
            # 6.4.6 STORE in every mode.
            C: A003 STORE 2:3 +FLAGS (\Deleted)
            S: * 2 FETCH (FLAGS (\Flagged \Deleted $Label1 \Recent))
            S: * 3 FETCH (FLAGS (\Deleted \Seen \Recent))
            S: A003 OK STORE completed
            C: A004 STORE 2 -FLAGS.SILENT ($Label1)
            S: A004 OK STORE completed
            C: A005 UID STORE 1 FLAGS (\Answered $New)
            S: * FLAGS (\Answered \Flagged \Deleted \Seen \Draft $Label1 $New)
            S: * OK [PERMANENTFLAGS (\Answered \Flagged \Deleted \Seen \Draft $Label1 $New \*)] Flags permitted
            S: * 1 FETCH (FLAGS (\Answered $New \Recent) UID 1)
            S: A005 OK STORE completed
            # 6.4.4 SEARCH, the RFC's examples and more keys.
            C: A282 SEARCH FLAGGED SINCE 1-Feb-1994 NOT FROM "Smith"
            S: * SEARCH
            S: A282 OK SEARCH completed
            C: A283 SEARCH OR (KEYWORD $New) (FROM "Smith" SENTON 1-Mar-1994) UNDELETED
            S: * SEARCH 1
            S: A283 OK SEARCH completed
            C: A284 SEARCH TEXT "string not in mailbox"
            S: * SEARCH
            S: A284 OK SEARCH completed
            C: A285 UID SEARCH CHARSET UTF-8 BODY "inner" LARGER 100 SENTBEFORE 2-Mar-1994 RECENT
            S: * SEARCH 2
            S: A285 OK SEARCH completed
            C: A286 SEARCH CHARSET KOI8-R ALL
            S: A286 NO [BADCHARSET (US-ASCII UTF-8)] unknown charset
            C: A287 SEARCH HEADER Message-Id "B27397" NOT DELETED 1:*
            S: * SEARCH 1
            S: A287 OK SEARCH completed
            # 6.4.7 COPY with COPYUID (RFC 4315), to a missing mailbox: TRYCREATE.
            C: A003 COPY 1:2 INBOX
            S: A003 OK [COPYUID ... 1:2 1:2] COPY completed
            C: A004 COPY 1 nosuch
            S: A004 NO [TRYCREATE] no such mailbox
            # 6.4.3 EXPUNGE, then RFC 4315 UID EXPUNGE, RFC 6851 MOVE.
            C: A202 EXPUNGE
            S: * 2 EXPUNGE
            S: * 2 EXPUNGE
            S: A202 OK EXPUNGE completed
            C: A203 MOVE 1 INBOX
            S: * OK [COPYUID ... 1 3] moved
            S: * 1 EXPUNGE
            S: A203 OK MOVE completed
            C: A204 EXAMINE INBOX
            S: * FLAGS (\Answered \Flagged \Deleted \Seen \Draft $New)
            S: * OK [PERMANENTFLAGS ()] Flags permitted
            S: * 3 EXISTS
            S: * 3 RECENT
            S: * OK [UNSEEN 1] First unseen
            S: * OK [UIDVALIDITY ...] UIDs valid
            S: * OK [UIDNEXT 4] Predicted next UID
            S: A204 OK [READ-ONLY] completed
            C: A205 STORE 1 +FLAGS (\Seen)
            S: A205 NO [READ-ONLY] mailbox is read-only
            C: A206 UID FETCH 2:* (FLAGS)
            S: * 2 FETCH (UID 2 FLAGS (\Flagged \Deleted \Recent))
            S: * 3 FETCH (UID 3 FLAGS (\Answered $New \Recent))
            S: A206 OK FETCH completed
            C: A207 UNSELECT
            S: A207 OK UNSELECT completed
            C: A208 SELECT INBOX
            S: * FLAGS ...
            S: * OK [PERMANENTFLAGS ...
            S: * 3 EXISTS
            S: * 3 RECENT
            S: * OK [UNSEEN 1] First unseen
            S: * OK [UIDVALIDITY ...] UIDs valid
            S: * OK [UIDNEXT 4] Predicted next UID
            S: A208 OK [READ-WRITE] completed
            C: A209 UID EXPUNGE 1:2
            S: * 2 EXPUNGE
            S: A209 OK EXPUNGE completed
            C: A210 CLOSE
            S: A210 OK CLOSE completed
            C: A211 FETCH 1 FLAGS
            S: A211 BAD select a mailbox first"#,
        );
        let left = store.with_mailbox("carol@example.test", |mb| {
            mb.messages.iter().map(|m| m.uid).collect::<Vec<_>>()
        });
        assert_eq!(left, vec![1, 3]);
    })
    .await;
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_sessions_see_changes_at_the_right_moments() {
    let running = server_with(3).await;
    let addr = running.addrs.imap.unwrap();
    let store = running.store.clone();
    blocking(move || {
        let mut a = login(addr);
        let mut b = login(addr);
        let select = "C: s SELECT INBOX
            S: * FLAGS ...
            S: * OK [PERMANENTFLAGS ...
            S: * 3 EXISTS
            S: * ... RECENT
            S: * OK [UNSEEN 1] First unseen
            S: * OK [UIDVALIDITY ...] UIDs valid
            S: * OK [UIDNEXT 4] Predicted next UID
            S: s OK [READ-WRITE] completed";
        replay(&mut a, select);
        replay(&mut b, select);
        replay(
            &mut b,
            r#"C: b1 STORE 2 +FLAGS.SILENT (\Deleted \Flagged)
            S: b1 OK STORE completed
            C: b2 EXPUNGE
            S: * 2 EXPUNGE
            S: b2 OK EXPUNGE completed"#,
        );
        store
            .deliver("carol@example.test", b"Subject: new\r\n\r\ny\r\n")
            .unwrap();
        // RFC 3501 7.4.1: no EXPUNGE during FETCH (new mail may show); NOOP delivers it.
        replay(
            &mut a,
            r#"C: a1 FETCH 1:* (FLAGS)
            S: * 1 FETCH (FLAGS (\Recent))
            S: * 3 FETCH (FLAGS (\Recent))
            S: * 4 EXISTS
            S: * 4 RECENT
            S: a1 NO [EXPUNGEISSUED] some of the requested messages no longer exist
            C: a2 NOOP
            S: * 2 EXPUNGE
            S: a2 OK completed
            C: a3 IDLE
            S: + idling"#,
        );
        replay(
            &mut b,
            r#"C: b3 STORE 1 +FLAGS (\Answered)
            S: * 1 FETCH (FLAGS (\Answered))
            S: * 3 EXISTS
            S: * 0 RECENT
            S: b3 OK STORE completed"#,
        );
        replay(
            &mut a,
            r#"S: * 1 FETCH (FLAGS (\Answered \Recent))
            C: DONE
            S: a3 OK IDLE terminated
            C: a4 LOGOUT
            S: * BYE logging out
            S: a4 OK LOGOUT completed"#,
        );
    })
    .await;
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_append_gets_a_clear_no_and_standard_commands_are_no_errors() {
    let running = server().await;
    let addr = running.addrs.imap.unwrap();
    blocking(move || {
        let mut c = login(addr);
        replay(
            &mut c,
            "C: t1 APPEND INBOX {67108865}
            S: t1 NO [TOOBIG] message too large (at most 67108864 bytes)
            C: t2 NOOP
            S: t2 OK completed",
        );
        // Thirty standard commands in a row (some refused for the state they come in)
        // do not end the session: only unparsable commands count towards the limit.
        for i in 0..30 {
            c.send(format!("n{i} EXPUNGE\r\nm{i} NAMESPACE\r\n").as_bytes());
            assert_eq!(c.line(), format!("n{i} BAD select a mailbox first"));
            assert_eq!(c.line(), "* NAMESPACE ((\"\" \"/\")) NIL NIL");
            assert_eq!(c.line(), format!("m{i} OK NAMESPACE completed"));
        }
        replay(
            &mut c,
            r#"C: i1 ID ("name" "test")
            S: * ID ("name" "spate" "vendor" "spate")
            S: i1 OK ID completed
            C: e1 ENABLE CONDSTORE
            S: * ENABLED CONDSTORE
            S: e1 OK ENABLE completed
            C: c1 CAPABILITY
            S: * CAPABILITY IMAP4rev1 LITERAL+ SASL-IR IDLE NAMESPACE ID ENABLE UIDPLUS MOVE UNSELECT CHILDREN SPECIAL-USE MULTIAPPEND ESEARCH CONDSTORE
            S: c1 OK CAPABILITY completed"#,
        );
    })
    .await;
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn condstore_as_in_rfc7162() {
    let running = server_with(3).await;
    let addr = running.addrs.imap.unwrap();
    blocking(move || {
        let mut c = login(addr);
        // Each delivery took the next mod-sequence: 2, 3, 4.
        replay(
            &mut c,
            r#"C: c1 SELECT INBOX (CONDSTORE)
            S: * FLAGS ...
            S: * OK [PERMANENTFLAGS ...
            S: * 3 EXISTS
            S: * 3 RECENT
            S: * OK [UNSEEN 1] First unseen
            S: * OK [UIDVALIDITY ...] UIDs valid
            S: * OK [UIDNEXT 4] Predicted next UID
            S: * OK [HIGHESTMODSEQ 4] Highest
            S: c1 OK [READ-WRITE] completed
            C: c2 STORE 1:2 (UNCHANGEDSINCE 2) +FLAGS (\Seen)
            S: * 1 FETCH (FLAGS (\Seen \Recent) MODSEQ (5))
            S: c2 OK [MODIFIED 2] conditional STORE completed
            C: c3 UID FETCH 1:* (FLAGS) (CHANGEDSINCE 4)
            S: * 1 FETCH (UID 1 FLAGS (\Seen \Recent) MODSEQ (5))
            S: c3 OK FETCH completed
            C: c4 SEARCH MODSEQ 4
            S: * SEARCH 1 3 (MODSEQ 5)
            S: c4 OK SEARCH completed
            C: c5 SEARCH RETURN (MIN COUNT) MODSEQ "/flags/\\seen" all 3
            S: * ESEARCH (TAG "c5") MIN 1 COUNT 3 MODSEQ 5
            S: c5 OK SEARCH completed
            C: c6 STATUS INBOX (HIGHESTMODSEQ MESSAGES)
            S: * STATUS INBOX (HIGHESTMODSEQ 5 MESSAGES 3)
            S: c6 OK STATUS completed
            C: c7 FETCH 2 (BODY[TEXT])
            S: * 2 FETCH (BODY[TEXT] {3}
            S: x
            S:  FLAGS (\Seen \Recent) MODSEQ (6))
            S: c7 OK FETCH completed"#,
        );
    })
    .await;
    running.shutdown().await;
}
