//! The ENVELOPE structure (RFC 3501 7.4.2), with the address lists parsed from the
//! header. The splitter is hand-written and forgiving: it knows quoted strings, comments,
//! angle brackets and groups, which covers what mail clients and load generators write;
//! anything stranger still yields an address rather than an error.

use super::{header_value, nstring};
use crate::proto::imap::quote;

/// One element of an address list: a mailbox, or the start or end of a group.
#[derive(Debug, PartialEq, Eq)]
enum Entry {
    Mailbox {
        name: Option<String>,
        /// An obsolete source route (`@a,@b`), the ENVELOPE's adl.
        route: Option<String>,
        local: String,
        host: String,
    },
    GroupStart(String),
    GroupEnd,
}

pub(super) fn envelope(data: &[u8]) -> String {
    let list = |name: &str| header_value(data, name).map_or_else(Vec::new, |v| parse_list(&v));
    let from = list("From");
    // RFC 3501: an absent or empty Sender or Reply-To is the From list.
    let or_from = |v: Vec<Entry>| {
        if v.is_empty() {
            render(&from)
        } else {
            render(&v)
        }
    };
    format!(
        "ENVELOPE ({} {} {} {} {} {} {} {} {} {})",
        nstring(header_value(data, "Date")),
        nstring(header_value(data, "Subject")),
        render(&from),
        or_from(list("Sender")),
        or_from(list("Reply-To")),
        render(&list("To")),
        render(&list("Cc")),
        render(&list("Bcc")),
        nstring(header_value(data, "In-Reply-To")),
        nstring(header_value(data, "Message-ID")),
    )
}

fn render(list: &[Entry]) -> String {
    if list.is_empty() {
        return "NIL".into();
    }
    let mut out = String::from("(");
    for e in list {
        match e {
            Entry::Mailbox {
                name,
                route,
                local,
                host,
            } => out.push_str(&format!(
                "({} {} {} {})",
                nstring(name.clone()),
                nstring(route.clone()),
                quote(local),
                quote(host)
            )),
            Entry::GroupStart(g) => out.push_str(&format!("(NIL NIL {} NIL)", quote(g))),
            Entry::GroupEnd => out.push_str("(NIL NIL NIL NIL)"),
        }
    }
    out.push(')');
    out
}

/// Splits an (unfolded) address header value at the commas, colons and semicolons that
/// are outside quotes, comments and angle brackets.
fn parse_list(value: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut quoted, mut escaped, mut comment, mut angle) = (false, false, 0u32, false);
    let mut in_group = false;
    for c in value.chars() {
        if escaped {
            escaped = false;
        } else if c == '\\' && (quoted || comment > 0) {
            escaped = true;
        } else if c == '"' && comment == 0 {
            quoted = !quoted;
        } else if !quoted {
            let top = comment == 0 && !angle;
            match c {
                '(' => comment += 1,
                ')' => comment = comment.saturating_sub(1),
                '<' if comment == 0 => angle = true,
                '>' if comment == 0 => angle = false,
                ',' if top => {
                    push_mailbox(&mut out, &std::mem::take(&mut cur));
                    continue;
                }
                ':' if top && !in_group => {
                    out.push(Entry::GroupStart(
                        display(&std::mem::take(&mut cur)).unwrap_or_default(),
                    ));
                    in_group = true;
                    continue;
                }
                ';' if top && in_group => {
                    push_mailbox(&mut out, &std::mem::take(&mut cur));
                    out.push(Entry::GroupEnd);
                    in_group = false;
                    continue;
                }
                _ => {}
            }
        }
        cur.push(c);
    }
    push_mailbox(&mut out, &cur);
    if in_group {
        out.push(Entry::GroupEnd);
    }
    out
}

/// One mailbox: `Name <local@host>`, `local@host`, or `local@host (Name)`.
fn push_mailbox(out: &mut Vec<Entry>, text: &str) {
    let text = text.trim();
    let (name, addr) = match outside_quotes(text, '<') {
        Some(open) => {
            let rest = &text[open + 1..];
            let addr = rest.split('>').next().unwrap_or(rest);
            // Comments and folding space may sit inside the brackets too.
            let addr: String = strip_comments(addr).0.split_whitespace().collect();
            (display(&text[..open]), addr)
        }
        None => {
            // Quotes inside a comment are plain characters.
            let (addr, comment) = strip_comments(text);
            (collapse(&comment), addr)
        }
    };
    // A source route (`@a,@b:local@host`) is obsolete; the mailbox is what follows it.
    let addr = addr.trim();
    let (route, addr) = match addr.strip_prefix('@') {
        Some(_) => match addr.rsplit_once(':') {
            Some((r, a)) => (Some(r.to_string()), a),
            None => (None, addr),
        },
        None => (None, addr),
    };
    if addr.is_empty() {
        return;
    }
    let (local, host) = match addr.rsplit_once('@') {
        Some((l, h)) => (l.to_string(), h.to_string()),
        // Dovecot's placeholder, which clients already know.
        None => (addr.to_string(), "MISSING_DOMAIN".to_string()),
    };
    out.push(Entry::Mailbox {
        name,
        route,
        local,
        host,
    });
}

/// The mailboxes of an address header as SEARCH compares them: `Name <local@host>`,
/// without comments, quotes or routes.
pub(super) fn addresses(value: &str) -> Vec<String> {
    parse_list(value)
        .into_iter()
        .filter_map(|e| match e {
            Entry::Mailbox {
                name, local, host, ..
            } => Some(match name {
                Some(n) => format!("{n} <{local}@{host}>"),
                None => format!("{local}@{host}"),
            }),
            Entry::GroupStart(g) => Some(g),
            Entry::GroupEnd => None,
        })
        .collect()
}

/// The byte position of the first `c` that is not inside a quoted string.
fn outside_quotes(text: &str, c: char) -> Option<usize> {
    let (mut quoted, mut escaped) = (false, false);
    for (i, ch) in text.char_indices() {
        match ch {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            _ if ch == c && !quoted => return Some(i),
            _ => {}
        }
    }
    None
}

/// The text without its comments, and the text of the first comment.
fn strip_comments(text: &str) -> (String, String) {
    let (mut plain, mut first, mut depth, mut comments) =
        (String::new(), String::new(), 0u32, 0u32);
    for c in text.chars() {
        match c {
            '(' => {
                depth += 1;
                if depth == 1 {
                    comments += 1;
                    continue;
                }
            }
            ')' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    continue;
                }
            }
            _ => {}
        }
        if depth == 0 {
            plain.push(c);
        } else if comments == 1 {
            first.push(c);
        }
    }
    (plain, first)
}

/// A display name with its quotes and escapes taken off and its spaces collapsed.
fn display(text: &str) -> Option<String> {
    let mut out = String::new();
    let (mut quoted, mut escaped) = (false, false);
    for c in text.chars() {
        match c {
            _ if escaped => {
                escaped = false;
                out.push(c);
            }
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            _ => out.push(c),
        }
    }
    collapse(&out)
}

fn collapse(text: &str) -> Option<String> {
    let out = text.split_whitespace().collect::<Vec<_>>().join(" ");
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mb(name: Option<&str>, local: &str, host: &str) -> Entry {
        Entry::Mailbox {
            name: name.map(str::to_string),
            route: None,
            local: local.into(),
            host: host.into(),
        }
    }

    #[test]
    fn usual_forms() {
        assert_eq!(parse_list("a@b.test"), vec![mb(None, "a", "b.test")]);
        assert_eq!(
            parse_list("\"Doe, John\" <jd@x.test>, Ann <ann@y.test>,c@z"),
            vec![
                mb(Some("Doe, John"), "jd", "x.test"),
                mb(Some("Ann"), "ann", "y.test"),
                mb(None, "c", "z"),
            ]
        );
        assert_eq!(
            parse_list("jd@x.test (John \"J\" Doe), <q@r>"),
            vec![
                mb(Some("John \"J\" Doe"), "jd", "x.test"),
                mb(None, "q", "r")
            ]
        );
        assert_eq!(
            parse_list("\"a \\\"b\\\" c\" <a@b>"),
            vec![mb(Some("a \"b\" c"), "a", "b")]
        );
        assert_eq!(
            parse_list("<@relay.test:u@h.test>"),
            vec![Entry::Mailbox {
                name: None,
                route: Some("@relay.test".into()),
                local: "u".into(),
                host: "h.test".into()
            }]
        );
        assert_eq!(
            parse_list("<u (c)@ (d) h.test>"),
            vec![mb(None, "u", "h.test")]
        );
        assert_eq!(parse_list(""), vec![]);
        assert_eq!(parse_list(" , "), vec![]);
    }

    #[test]
    fn groups() {
        assert_eq!(
            parse_list("undisclosed-recipients:;"),
            vec![
                Entry::GroupStart("undisclosed-recipients".into()),
                Entry::GroupEnd
            ]
        );
        assert_eq!(
            parse_list("Team: a@b, \"X: y\" <c@d>; e@f"),
            vec![
                Entry::GroupStart("Team".into()),
                mb(None, "a", "b"),
                mb(Some("X: y"), "c", "d"),
                Entry::GroupEnd,
                mb(None, "e", "f"),
            ]
        );
    }

    #[test]
    fn envelope_defaults_sender_and_reply_to_to_from() {
        let m = b"Date: Mon, 1 Jan 2024 00:00:00 +0000\r\nFrom: \"Al\" <al@x.test>\r\n\
To: b@y.test, C <c@y.test>\r\nSubject: hi\r\n\r\nbody\r\n";
        assert_eq!(
            envelope(m),
            "ENVELOPE (\"Mon, 1 Jan 2024 00:00:00 +0000\" \"hi\" \
((\"Al\" NIL \"al\" \"x.test\")) ((\"Al\" NIL \"al\" \"x.test\")) \
((\"Al\" NIL \"al\" \"x.test\")) ((NIL NIL \"b\" \"y.test\")(\"C\" NIL \"c\" \"y.test\")) \
NIL NIL NIL NIL)"
        );
    }
}
