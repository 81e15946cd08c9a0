//! Server side of POP3 (RFC 1939, RFC 2449 CAPA, RFC 2595 STLS): parsing of client
//! command lines. The caller caps the line length first.

/// One client command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Capa,
    Stls,
    User(String),
    Pass(String),
    /// `APOP name digest` (RFC 1939 7).
    Apop {
        user: String,
        digest: String,
    },
    /// `AUTH PLAIN [initial]` (RFC 5034); other mechanisms are refused by the session.
    Auth {
        mechanism: String,
        initial: Option<String>,
    },
    Stat,
    List(Option<u32>),
    Uidl(Option<u32>),
    Retr(u32),
    Top {
        msg: u32,
        lines: u32,
    },
    Dele(u32),
    Rset,
    Noop,
    Quit,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("unknown command")]
    Unknown,
    #[error("syntax error: {0}")]
    Syntax(&'static str),
}

fn number(s: Option<&str>, what: &'static str) -> Result<u32, Error> {
    let s = s.ok_or(Error::Syntax(what))?;
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::Syntax(what));
    }
    s.parse().map_err(|_| Error::Syntax(what))
}

/// Parses one command line (without CRLF).
pub fn parse(line: &[u8]) -> Result<Command, Error> {
    let line = std::str::from_utf8(line).map_err(|_| Error::Syntax("command is not UTF-8"))?;
    let (verb, rest) = match line.split_once(' ') {
        Some((v, r)) => (v, r),
        None => (line, ""),
    };
    if verb.len() > 8 {
        return Err(Error::Unknown);
    }
    let mut args = rest.split_whitespace();
    let cmd = match verb.to_ascii_uppercase().as_str() {
        "CAPA" => Command::Capa,
        "STLS" => Command::Stls,
        "USER" => {
            let u = rest.trim();
            if u.is_empty() {
                return Err(Error::Syntax("USER needs a name"));
            }
            Command::User(u.to_string())
        }
        // The password is the rest of the line: it may contain spaces (RFC 1939 7).
        "PASS" => Command::Pass(rest.to_string()),
        "AUTH" => Command::Auth {
            mechanism: args
                .next()
                .ok_or(Error::Syntax("AUTH needs a mechanism"))?
                .to_ascii_uppercase(),
            initial: args.next().map(str::to_string),
        },
        "APOP" => match (args.next(), args.next()) {
            (Some(u), Some(d)) => Command::Apop {
                user: u.to_string(),
                digest: d.to_ascii_lowercase(),
            },
            _ => return Err(Error::Syntax("APOP needs a name and a digest")),
        },
        "STAT" => Command::Stat,
        "LIST" => Command::List(
            args.next()
                .map(|a| number(Some(a), "bad message number"))
                .transpose()?,
        ),
        "UIDL" => Command::Uidl(
            args.next()
                .map(|a| number(Some(a), "bad message number"))
                .transpose()?,
        ),
        "RETR" => Command::Retr(number(args.next(), "RETR needs a message number")?),
        "DELE" => Command::Dele(number(args.next(), "DELE needs a message number")?),
        "TOP" => Command::Top {
            msg: number(args.next(), "TOP needs a message number")?,
            lines: number(args.next(), "TOP needs a line count")?,
        },
        "RSET" => Command::Rset,
        "NOOP" => Command::Noop,
        "QUIT" => Command::Quit,
        _ => return Err(Error::Unknown),
    };
    Ok(cmd)
}

/// The first `lines` body lines of a message with its whole header (for TOP).
pub fn top(message: &[u8], lines: u32) -> &[u8] {
    let header_end = message
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4)
        .unwrap_or(message.len());
    let mut end = header_end;
    for _ in 0..lines {
        if end >= message.len() {
            break;
        }
        end = match message[end..].iter().position(|&b| b == b'\n') {
            Some(p) => end + p + 1,
            None => message.len(),
        };
    }
    &message[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answers() {
        assert_eq!(parse(b"user alice"), Ok(Command::User("alice".into())));
        assert_eq!(
            parse(b"PASS two words"),
            Ok(Command::Pass("two words".into()))
        );
        assert_eq!(parse(b"LIST"), Ok(Command::List(None)));
        assert_eq!(parse(b"LIST 3"), Ok(Command::List(Some(3))));
        assert_eq!(parse(b"TOP 1 10"), Ok(Command::Top { msg: 1, lines: 10 }));
        assert_eq!(
            parse(b"RETR x"),
            Err(Error::Syntax("RETR needs a message number"))
        );
        assert_eq!(
            parse(b"RETR"),
            Err(Error::Syntax("RETR needs a message number"))
        );
        assert_eq!(
            parse(b"RETR 99999999999"),
            Err(Error::Syntax("RETR needs a message number"))
        );
        assert_eq!(parse(b"XTND"), Err(Error::Unknown));
        assert_eq!(parse(b"\xff"), Err(Error::Syntax("command is not UTF-8")));
        assert_eq!(
            parse(b"AUTH plain AGEAYg=="),
            Ok(Command::Auth {
                mechanism: "PLAIN".into(),
                initial: Some("AGEAYg==".into())
            })
        );
    }

    #[test]
    fn top_cuts_after_header_and_lines() {
        let m = b"A: 1\r\nB: 2\r\n\r\nl1\r\nl2\r\nl3\r\n";
        assert_eq!(top(m, 0), b"A: 1\r\nB: 2\r\n\r\n");
        assert_eq!(top(m, 2), b"A: 1\r\nB: 2\r\n\r\nl1\r\nl2\r\n");
        assert_eq!(top(m, 99), &m[..]);
        assert_eq!(top(b"no header end", 1), b"no header end");
    }
}
