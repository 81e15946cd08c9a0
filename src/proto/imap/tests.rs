//! Known answers, errors and literal framing of the server-side IMAP parser.

use super::*;

fn cmd(s: &str) -> Command {
    parse(s.as_bytes()).unwrap().command
}

#[test]
fn known_answers() {
    assert_eq!(parse(b"a1 CAPABILITY").unwrap().tag, "a1");
    assert_eq!(
        cmd("x LOGIN \"al ice\" {3}\r\np\"w"),
        Command::Login {
            user: "al ice".into(),
            pass: "p\"w".into()
        }
    );
    assert_eq!(
        cmd("x UID FETCH 1:*,4 (UID BODY.PEEK[HEADER.FIELDS (Subject From)] BODY[]<0.10>)"),
        Command::Fetch {
            uid: true,
            set: vec![
                (SeqNum::Num(1), SeqNum::Star),
                (SeqNum::Num(4), SeqNum::Num(4))
            ],
            items: vec![
                FetchItem::Uid,
                FetchItem::Body {
                    peek: true,
                    section: Section::HeaderFields {
                        not: false,
                        fields: vec!["SUBJECT".into(), "FROM".into()]
                    },
                    partial: None
                },
                FetchItem::Body {
                    peek: false,
                    section: Section::Full,
                    partial: Some((0, 10))
                },
            ]
        }
    );
    assert_eq!(
        cmd("x FETCH 2 FAST"),
        Command::Fetch {
            uid: false,
            set: vec![(SeqNum::Num(2), SeqNum::Num(2))],
            items: vec![
                FetchItem::Flags,
                FetchItem::InternalDate,
                FetchItem::Rfc822Size
            ]
        }
    );
    assert_eq!(
        cmd("x STORE 1:3 +FLAGS.SILENT (\\Seen \\Deleted)"),
        Command::Store {
            uid: false,
            set: vec![(SeqNum::Num(1), SeqNum::Num(3))],
            mode: StoreMode::Add,
            silent: true,
            flags: vec!["SEEN".into(), "DELETED".into()]
        }
    );
    assert_eq!(
        cmd("x UID SEARCH CHARSET UTF-8 HEADER X-Spate-Id \"abc\" UNSEEN"),
        Command::Search {
            uid: true,
            criteria: vec![
                Search::Header("X-Spate-Id".into(), "abc".into()),
                Search::Flag {
                    flag: "SEEN".into(),
                    set: false
                }
            ]
        }
    );
    assert_eq!(
        cmd("x LIST \"\" *"),
        Command::List {
            reference: String::new(),
            pattern: "*".into()
        }
    );
    assert_eq!(cmd("x select inbox"), Command::Select("inbox".into()));
    assert_eq!(
        cmd("x LSUB \"\" %"),
        Command::Lsub {
            reference: String::new(),
            pattern: "%".into()
        }
    );
    assert_eq!(tag_of(b"a1 NOOP xxx"), Some("a1"));
    assert_eq!(tag_of(b"xxxxxxxx"), None);
    assert_eq!(tag_of(b"* NOOP"), None);
}

#[test]
fn errors() {
    for bad in [
        &b""[..],
        b"x",
        b"x FOO",
        b"x FETCH 0 UID",
        b"x FETCH 1 (UID",
        b"x FETCH 1 BODY[1.2]",
        b"x LOGIN {5}\r\nab",
        b"x LOGIN \"unterminated",
        b"x SEARCH",
        b"x NOOP extra",
        b"x LOGIN {99999999999999999999}\r\n",
    ] {
        assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
    }
    assert_eq!(parse(b"t9 FOO").unwrap_err().tag.as_deref(), Some("t9"));
}

#[test]
fn literal_framing() {
    assert_eq!(literal_at_end(b"a LOGIN {5}"), Some((5, true)));
    assert_eq!(literal_at_end(b"a LOGIN {5+}"), Some((5, false)));
    assert_eq!(literal_at_end(b"a LOGIN {}"), None);
    assert_eq!(literal_at_end(b"a LOGIN x}"), None);
    assert_eq!(quote("a\"b"), "\"a\\\"b\"");
}

proptest::proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
        let _ = parse(&bytes);
        let _ = literal_at_end(&bytes);
    }
}
