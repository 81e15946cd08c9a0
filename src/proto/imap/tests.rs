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
            changed_since: None,
            set: vec![
                (SeqNum::Num(1), SeqNum::Star),
                (SeqNum::Num(4), SeqNum::Num(4))
            ],
            items: vec![
                FetchItem::Uid,
                FetchItem::Section {
                    peek: true,
                    section: Section {
                        part: vec![],
                        text: Some(SectionText::HeaderFields {
                            not: false,
                            fields: vec!["SUBJECT".into(), "FROM".into()]
                        })
                    },
                    partial: None
                },
                FetchItem::Section {
                    peek: false,
                    section: Section::default(),
                    partial: Some((0, 10))
                },
            ]
        }
    );
    assert_eq!(
        cmd("x FETCH 2 FAST"),
        Command::Fetch {
            uid: false,
            changed_since: None,
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
            unchanged_since: None,
            set: vec![(SeqNum::Num(1), SeqNum::Num(3))],
            mode: StoreMode::Add,
            silent: true,
            flags: vec!["\\Seen".into(), "\\Deleted".into()]
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
            ],
            ret: None
        }
    );
    assert_eq!(
        cmd("x LIST \"\" *"),
        Command::List {
            reference: String::new(),
            pattern: "*".into()
        }
    );
    assert_eq!(
        cmd("x select inbox"),
        Command::Select("inbox".into(), false)
    );
    assert_eq!(
        cmd("x EXAMINE a (CONDSTORE)"),
        Command::Examine("a".into(), true)
    );
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
fn rfc3501_commands() {
    assert_eq!(
        cmd(
            "a FETCH 1 (BODY BODYSTRUCTURE BODY.PEEK[1.2.MIME] BODY[2.HEADER.FIELDS.NOT (A)]<5.7>)"
        ),
        Command::Fetch {
            uid: false,
            changed_since: None,
            set: vec![(SeqNum::Num(1), SeqNum::Num(1))],
            items: vec![
                FetchItem::Body,
                FetchItem::BodyStructure,
                FetchItem::Section {
                    peek: true,
                    section: Section {
                        part: vec![1, 2],
                        text: Some(SectionText::Mime)
                    },
                    partial: None
                },
                FetchItem::Section {
                    peek: false,
                    section: Section {
                        part: vec![2],
                        text: Some(SectionText::HeaderFields {
                            not: true,
                            fields: vec!["A".into()]
                        })
                    },
                    partial: Some((5, 7))
                },
            ]
        }
    );
    assert_eq!(
        cmd("a APPEND Drafts (\\Seen $Label) \" 7-Feb-1994 21:52:25 -0800\" {3+}\r\na\r\n"),
        Command::Append {
            mailbox: "Drafts".into(),
            messages: vec![Appended {
                flags: vec!["\\Seen".into(), "$Label".into()],
                date: Some(760_686_745),
                message: b"a\r\n".to_vec()
            }]
        }
    );
    assert_eq!(
        cmd("a SEARCH OR (FLAGGED SINCE 1-Feb-1994) NOT FROM \"Smith\" 2:4"),
        Command::Search {
            uid: false,
            criteria: vec![
                Search::Or(
                    Box::new(Search::And(vec![
                        Search::Flag {
                            flag: "FLAGGED".into(),
                            set: true
                        },
                        Search::Date {
                            sent: false,
                            cmp: DateCmp::Since,
                            day: 8797
                        }
                    ])),
                    Box::new(Search::Not(Box::new(Search::Header(
                        "FROM".into(),
                        "Smith".into()
                    ))))
                ),
                Search::Seq(vec![(SeqNum::Num(2), SeqNum::Num(4))])
            ],
            ret: None
        }
    );
    assert_eq!(
        cmd("a UID MOVE 1:* Trash"),
        Command::Move {
            uid: true,
            set: vec![(SeqNum::Num(1), SeqNum::Star)],
            mailbox: "Trash".into()
        }
    );
    assert_eq!(
        cmd("a UID EXPUNGE 3,5"),
        Command::Expunge(Some(vec![
            (SeqNum::Num(3), SeqNum::Num(3)),
            (SeqNum::Num(5), SeqNum::Num(5))
        ]))
    );
    assert_eq!(
        cmd("a RENAME blurdybloop sarasoop"),
        Command::Rename {
            from: "blurdybloop".into(),
            to: "sarasoop".into()
        }
    );
    assert_eq!(cmd("a ID (\"name\" \"x\" \"os\" NIL)"), Command::Id);
    assert_eq!(
        cmd("a ENABLE CONDSTORE"),
        Command::Enable(vec!["CONDSTORE".into()])
    );
    assert_eq!(
        parse(b"a SEARCH CHARSET KOI8-R ALL").unwrap_err().msg,
        BADCHARSET
    );
}

#[test]
fn errors() {
    for bad in [
        &b""[..],
        b"x",
        b"x FOO",
        b"x FETCH 0 UID",
        b"x FETCH 1 (UID",
        b"x FETCH 1 BODY[1.2.FOO]",
        b"x FETCH 1 BODY[MIME]",
        b"x FETCH 1 BODY[0]",
        b"x FETCH 1 ()",
        b"x SEARCH OR SEEN",
        b"x SEARCH (SEEN",
        b"x SEARCH BEFORE 31-Foo-2020",
        b"x APPEND INBOX (\\Seen) \"bad date\" {1}\r\nx",
        b"x STATUS INBOX MESSAGES",
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
