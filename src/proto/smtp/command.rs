//! Server side: parsing of client SMTP/LMTP commands (RFC 5321, RFC 2033 LHLO, RFC 3030
//! BDAT, RFC 1870 SIZE, RFC 6152 8BITMIME, RFC 4954 AUTH, RFC 3461 DSN parameters).
//!
//! `parse` takes one command line without its CRLF (the caller has already capped the
//! line length) and returns a typed [`Command`] or a [`CommandError`] that maps onto the
//! reply the server must send. `Command::encode` writes the canonical form back, so the
//! two can be checked against each other.

use std::fmt::Write as _;

/// One client command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Ehlo(String),
    Helo(String),
    Lhlo(String),
    Mail {
        from: String,
        params: MailParams,
    },
    Rcpt {
        to: String,
        params: RcptParams,
    },
    Data,
    Bdat {
        size: u64,
        last: bool,
    },
    Rset,
    Noop,
    Quit,
    Vrfy(String),
    Starttls,
    Auth {
        mechanism: String,
        initial: Option<String>,
    },
}

/// `BODY=` values (RFC 6152, RFC 3030).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    SevenBit,
    EightBitMime,
    BinaryMime,
}

/// `RET=` values (RFC 3461).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ret {
    Full,
    Hdrs,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MailParams {
    pub size: Option<u64>,
    pub body: Option<Body>,
    pub auth: Option<String>,
    pub ret: Option<Ret>,
    pub envid: Option<String>,
}

/// `NOTIFY=` values (RFC 3461); `NEVER` stands alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notify {
    Never,
    Success,
    Failure,
    Delay,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RcptParams {
    pub notify: Option<Vec<Notify>>,
    pub orcpt: Option<String>,
}

/// Why a line is not an acceptable command. `code()` gives the reply to send.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("unrecognized command")]
    Unknown,
    #[error("syntax error: {0}")]
    Syntax(&'static str),
    #[error("unsupported parameter {0}")]
    UnsupportedParam(String),
}

impl CommandError {
    /// (basic code, enhanced code) of the reply this error calls for.
    pub fn code(&self) -> (u16, &'static str) {
        match self {
            CommandError::Unknown => (500, "5.5.2"),
            CommandError::Syntax(_) => (501, "5.5.4"),
            CommandError::UnsupportedParam(_) => (555, "5.5.4"),
        }
    }
}

fn syntax(what: &'static str) -> CommandError {
    CommandError::Syntax(what)
}

/// Parses one command line (without CRLF).
pub fn parse(line: &[u8]) -> Result<Command, CommandError> {
    let line = std::str::from_utf8(line).map_err(|_| syntax("command is not UTF-8"))?;
    let line = line.trim_end_matches([' ', '\t']);
    let (verb, rest) = match line.find(' ') {
        Some(i) => (&line[..i], line[i + 1..].trim_start()),
        None => (line, ""),
    };
    if verb.len() > 10 {
        return Err(CommandError::Unknown);
    }
    // Upper-cased on the stack: no allocation per command.
    let mut upper = [0u8; 10];
    let upper = &mut upper[..verb.len()];
    upper.copy_from_slice(verb.as_bytes());
    upper.make_ascii_uppercase();
    let verb = std::str::from_utf8(upper).map_err(|_| CommandError::Unknown)?;
    match verb {
        "EHLO" | "HELO" | "LHLO" => {
            let name = rest.split_whitespace().next().unwrap_or("");
            if name.is_empty() {
                return Err(syntax("a domain name or address literal is required"));
            }
            let name = name.to_string();
            Ok(match verb {
                "EHLO" => Command::Ehlo(name),
                "HELO" => Command::Helo(name),
                _ => Command::Lhlo(name),
            })
        }
        "MAIL" => {
            let rest =
                strip_keyword(rest, "FROM:").ok_or(syntax("expected MAIL FROM:<address>"))?;
            let (from, params) = split_path(rest, true)?;
            Ok(Command::Mail {
                from,
                params: mail_params(params)?,
            })
        }
        "RCPT" => {
            let rest = strip_keyword(rest, "TO:").ok_or(syntax("expected RCPT TO:<address>"))?;
            let (to, params) = split_path(rest, false)?;
            Ok(Command::Rcpt {
                to,
                params: rcpt_params(params)?,
            })
        }
        "DATA" => no_args(rest, Command::Data),
        "RSET" => no_args(rest, Command::Rset),
        "QUIT" => no_args(rest, Command::Quit),
        "STARTTLS" => no_args(rest, Command::Starttls),
        // NOOP may carry a string, which is ignored (RFC 5321 4.1.1.9).
        "NOOP" => Ok(Command::Noop),
        "VRFY" => {
            if rest.is_empty() {
                return Err(syntax("VRFY needs an argument"));
            }
            Ok(Command::Vrfy(rest.to_string()))
        }
        "BDAT" => {
            let mut it = rest.split_whitespace();
            let size = it
                .next()
                .and_then(|s| {
                    if s.bytes().all(|b| b.is_ascii_digit()) {
                        s.parse::<u64>().ok()
                    } else {
                        None
                    }
                })
                .ok_or(syntax("expected BDAT <size> [LAST]"))?;
            let last = match it.next() {
                None => false,
                Some(w) if w.eq_ignore_ascii_case("LAST") => true,
                Some(_) => return Err(syntax("expected BDAT <size> [LAST]")),
            };
            if it.next().is_some() {
                return Err(syntax("expected BDAT <size> [LAST]"));
            }
            Ok(Command::Bdat { size, last })
        }
        "AUTH" => {
            let mut it = rest.split_whitespace();
            let mechanism = it
                .next()
                .ok_or(syntax("expected AUTH <mechanism> [initial-response]"))?
                .to_ascii_uppercase();
            if !mechanism
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return Err(syntax("bad SASL mechanism name"));
            }
            let initial = it.next().map(str::to_string);
            if it.next().is_some() {
                return Err(syntax("expected AUTH <mechanism> [initial-response]"));
            }
            Ok(Command::Auth { mechanism, initial })
        }
        _ => Err(CommandError::Unknown),
    }
}

fn no_args(rest: &str, c: Command) -> Result<Command, CommandError> {
    if rest.is_empty() {
        Ok(c)
    } else {
        Err(syntax("this command takes no arguments"))
    }
}

/// Strips `FROM:` / `TO:` case-insensitively, allowing spaces after the colon (common).
fn strip_keyword<'a>(rest: &'a str, kw: &str) -> Option<&'a str> {
    let head = rest.get(..kw.len())?;
    if head.eq_ignore_ascii_case(kw) {
        Some(rest[kw.len()..].trim_start())
    } else {
        None
    }
}

/// Splits `<path> params...` into the address (brackets and source route removed) and the
/// parameter text.
fn split_path(rest: &str, allow_null: bool) -> Result<(String, &str), CommandError> {
    let (path, params) = if let Some(inner) = rest.strip_prefix('<') {
        let end = path_end(inner).ok_or(syntax("missing '>' after the address"))?;
        (&inner[..end], &inner[end + 1..])
    } else {
        // Lenient: a bare address up to the first space.
        let (path, params) = match rest.find(' ') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if path.is_empty() {
            return Err(syntax("expected <address>"));
        }
        (path, params)
    };
    if !params.is_empty() && !params.starts_with(' ') {
        return Err(syntax("expected a space after the address"));
    }
    // Drop an obsolete source route: <@a,@b:user@d>.
    let path = match path.strip_prefix('@') {
        Some(_) => path
            .split_once(':')
            .map(|(_, p)| p)
            .ok_or(syntax("bad source route"))?,
        None => path,
    };
    // The address must be what `<address>` holds, so that it reads back the same: no
    // second source route, and no `>` or quote left open outside a quoted local part
    // (a bare address, or a route cut through a quoted string).
    if path.starts_with('@') || scan_path(path) != Err(false) {
        return Err(syntax("malformed address"));
    }
    if path
        .chars()
        .any(|c| c.is_control() || c == ' ' && !path.contains('"'))
    {
        return Err(syntax("bad character in address"));
    }
    if path.is_empty() && !allow_null {
        return Err(syntax("an address is required"));
    }
    if !path.is_empty() && !path.contains('@') && !path.eq_ignore_ascii_case("postmaster") {
        return Err(syntax("address must be user@domain"));
    }
    Ok((path.to_string(), params.trim()))
}

/// Where the `>` closing a path is in `inner` (the text after `<`): the first one outside
/// a quoted local part.
fn path_end(inner: &str) -> Option<usize> {
    scan_path(inner).ok()
}

/// [`path_end`], or at the end of `inner` without one: `Err(open)`, `open` when a quoted
/// part or an escape is still open there (a `>` put after it would not close the path).
fn scan_path(inner: &str) -> Result<usize, bool> {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in inner.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '>' if !quoted => return Ok(i),
            _ => {}
        }
    }
    Err(quoted || escaped)
}

fn params_iter(text: &str) -> impl Iterator<Item = (String, Option<&str>)> {
    text.split_whitespace().map(|p| match p.split_once('=') {
        Some((k, v)) => (k.to_ascii_uppercase(), Some(v)),
        None => (p.to_ascii_uppercase(), None),
    })
}

fn mail_params(text: &str) -> Result<MailParams, CommandError> {
    let mut p = MailParams::default();
    for (key, value) in params_iter(text) {
        let v = || value.ok_or(syntax("parameter needs a value"));
        match key.as_str() {
            "SIZE" => {
                let v = v()?;
                if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(syntax("SIZE must be a number"));
                }
                p.size = Some(v.parse().map_err(|_| syntax("SIZE too large"))?);
            }
            "BODY" => {
                p.body = Some(match v()?.to_ascii_uppercase().as_str() {
                    "7BIT" => Body::SevenBit,
                    "8BITMIME" => Body::EightBitMime,
                    "BINARYMIME" => Body::BinaryMime,
                    _ => return Err(syntax("BODY must be 7BIT, 8BITMIME or BINARYMIME")),
                })
            }
            "AUTH" => p.auth = Some(v()?.to_string()),
            "RET" => {
                p.ret = Some(match v()?.to_ascii_uppercase().as_str() {
                    "FULL" => Ret::Full,
                    "HDRS" => Ret::Hdrs,
                    _ => return Err(syntax("RET must be FULL or HDRS")),
                })
            }
            "ENVID" => p.envid = Some(v()?.to_string()),
            _ => return Err(CommandError::UnsupportedParam(key)),
        }
    }
    Ok(p)
}

fn rcpt_params(text: &str) -> Result<RcptParams, CommandError> {
    let mut p = RcptParams::default();
    for (key, value) in params_iter(text) {
        let v = value.ok_or(syntax("parameter needs a value"));
        match key.as_str() {
            "NOTIFY" => {
                let mut list = Vec::new();
                for item in v?.split(',') {
                    list.push(match item.to_ascii_uppercase().as_str() {
                        "NEVER" => Notify::Never,
                        "SUCCESS" => Notify::Success,
                        "FAILURE" => Notify::Failure,
                        "DELAY" => Notify::Delay,
                        _ => return Err(syntax("NOTIFY must be NEVER or SUCCESS,FAILURE,DELAY")),
                    });
                }
                if list.contains(&Notify::Never) && list.len() > 1 {
                    return Err(syntax("NOTIFY=NEVER stands alone"));
                }
                p.notify = Some(list);
            }
            "ORCPT" => p.orcpt = Some(v?.to_string()),
            _ => return Err(CommandError::UnsupportedParam(key)),
        }
    }
    Ok(p)
}

impl Command {
    /// The canonical wire form, CRLF included.
    pub fn encode(&self) -> Vec<u8> {
        let mut s = String::new();
        match self {
            Command::Ehlo(d) => s = format!("EHLO {d}"),
            Command::Helo(d) => s = format!("HELO {d}"),
            Command::Lhlo(d) => s = format!("LHLO {d}"),
            Command::Mail { from, params } => {
                s = format!("MAIL FROM:<{from}>");
                if let Some(n) = params.size {
                    let _ = write!(s, " SIZE={n}");
                }
                if let Some(b) = params.body {
                    s.push_str(match b {
                        Body::SevenBit => " BODY=7BIT",
                        Body::EightBitMime => " BODY=8BITMIME",
                        Body::BinaryMime => " BODY=BINARYMIME",
                    });
                }
                if let Some(a) = &params.auth {
                    let _ = write!(s, " AUTH={a}");
                }
                if let Some(r) = params.ret {
                    s.push_str(match r {
                        Ret::Full => " RET=FULL",
                        Ret::Hdrs => " RET=HDRS",
                    });
                }
                if let Some(e) = &params.envid {
                    let _ = write!(s, " ENVID={e}");
                }
            }
            Command::Rcpt { to, params } => {
                s = format!("RCPT TO:<{to}>");
                if let Some(list) = &params.notify {
                    let names: Vec<&str> = list
                        .iter()
                        .map(|n| match n {
                            Notify::Never => "NEVER",
                            Notify::Success => "SUCCESS",
                            Notify::Failure => "FAILURE",
                            Notify::Delay => "DELAY",
                        })
                        .collect();
                    let _ = write!(s, " NOTIFY={}", names.join(","));
                }
                if let Some(o) = &params.orcpt {
                    let _ = write!(s, " ORCPT={o}");
                }
            }
            Command::Data => s.push_str("DATA"),
            Command::Bdat { size, last } => {
                s = format!("BDAT {size}{}", if *last { " LAST" } else { "" })
            }
            Command::Rset => s.push_str("RSET"),
            Command::Noop => s.push_str("NOOP"),
            Command::Quit => s.push_str("QUIT"),
            Command::Vrfy(a) => s = format!("VRFY {a}"),
            Command::Starttls => s.push_str("STARTTLS"),
            Command::Auth { mechanism, initial } => {
                s = format!("AUTH {mechanism}");
                if let Some(i) = initial {
                    let _ = write!(s, " {i}");
                }
            }
        }
        s.push_str("\r\n");
        s.into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Command, CommandError> {
        parse(s.as_bytes())
    }

    #[test]
    fn known_answers() {
        assert_eq!(
            p("EHLO client.test"),
            Ok(Command::Ehlo("client.test".into()))
        );
        assert_eq!(
            p("helo [127.0.0.1]"),
            Ok(Command::Helo("[127.0.0.1]".into()))
        );
        assert_eq!(p("LHLO x"), Ok(Command::Lhlo("x".into())));
        assert_eq!(
            p("MAIL FROM:<a@b.test> SIZE=1000 BODY=8BITMIME"),
            Ok(Command::Mail {
                from: "a@b.test".into(),
                params: MailParams {
                    size: Some(1000),
                    body: Some(Body::EightBitMime),
                    ..Default::default()
                }
            })
        );
        assert_eq!(
            p("mail from: <>"),
            Ok(Command::Mail {
                from: String::new(),
                params: MailParams::default()
            })
        );
        assert_eq!(
            p("RCPT TO:<@relay.test:u@d.test> NOTIFY=SUCCESS,FAILURE ORCPT=rfc822;u@d.test"),
            Ok(Command::Rcpt {
                to: "u@d.test".into(),
                params: RcptParams {
                    notify: Some(vec![Notify::Success, Notify::Failure]),
                    orcpt: Some("rfc822;u@d.test".into()),
                }
            })
        );
        assert_eq!(
            p("RCPT TO:<\"odd >name\"@d.test>"),
            Ok(Command::Rcpt {
                to: "\"odd >name\"@d.test".into(),
                params: RcptParams::default()
            })
        );
        assert_eq!(
            p("BDAT 100 LAST"),
            Ok(Command::Bdat {
                size: 100,
                last: true
            })
        );
        assert_eq!(
            p("bdat 0"),
            Ok(Command::Bdat {
                size: 0,
                last: false
            })
        );
        assert_eq!(
            p("AUTH plain AGEAYg=="),
            Ok(Command::Auth {
                mechanism: "PLAIN".into(),
                initial: Some("AGEAYg==".into())
            })
        );
        assert_eq!(p("NOOP anything"), Ok(Command::Noop));
        assert_eq!(p("quit"), Ok(Command::Quit));
        assert_eq!(p("STARTTLS"), Ok(Command::Starttls));
        assert_eq!(p("VRFY bob"), Ok(Command::Vrfy("bob".into())));
    }

    #[test]
    fn errors_map_to_codes() {
        assert_eq!(p("FOO bar").unwrap_err().code().0, 500);
        assert_eq!(p("").unwrap_err().code().0, 500);
        assert_eq!(p("EHLO").unwrap_err().code().0, 501);
        assert_eq!(p("MAIL TO:<a@b>").unwrap_err().code().0, 501);
        assert_eq!(p("MAIL FROM:<a@b").unwrap_err().code().0, 501);
        assert_eq!(p("MAIL FROM:<a@b> SIZE=x").unwrap_err().code().0, 501);
        assert_eq!(
            p("MAIL FROM:<a@b> SIZE=99999999999999999999999")
                .unwrap_err()
                .code()
                .0,
            501
        );
        assert_eq!(p("MAIL FROM:<a@b> XYZZY=1").unwrap_err().code().0, 555);
        assert_eq!(p("RCPT TO:<>").unwrap_err().code().0, 501);
        assert_eq!(
            p("RCPT TO:<a@b> NOTIFY=NEVER,DELAY").unwrap_err().code().0,
            501
        );
        assert_eq!(p("DATA now").unwrap_err().code().0, 501);
        assert_eq!(p("BDAT -1").unwrap_err().code().0, 501);
        assert_eq!(p("BDAT 1 FIRST").unwrap_err().code().0, 501);
        assert_eq!(parse(b"\xff\xfe").unwrap_err().code().0, 501);
        assert_eq!(p("AUTH PL/AIN").unwrap_err().code().0, 501);
    }

    /// Found by fuzz/smtp_server: an address was accepted that its canonical form `<...>`
    /// does not give back: a bare one (no angle brackets) holding a `>` or an open quote,
    /// a second source route (`@a:@b:`), a route cut through a quoted string.
    #[test]
    fn an_address_is_what_brackets_would_hold() {
        for line in [
            "MAIL FROM:u@d>x",
            "MAIL FROM:a\"b@c",
            "RCPT TO:x<a@b>",
            "RCPT TO:@r:a>b@c",
            "RCPT TO:@OT1:@OT1:",
            "RCPT TO:<@a:@b:>",
            "MAIL FROM:<@a\"b:c\"@d>",
        ] {
            assert_eq!(p(line).unwrap_err().code().0, 501, "{line}");
        }
        for line in [
            "MAIL FROM:a@b SIZE=1",
            "MAIL FROM:<@a,@b:c@d>",
            "MAIL FROM:\"a>b\"@c",
            "RCPT TO:a@b",
            "RCPT TO:postmaster",
        ] {
            let c = p(line).unwrap();
            let wire = c.encode();
            assert_eq!(parse(&wire[..wire.len() - 2]), Ok(c), "{line}");
        }
    }

    #[test]
    fn garbage_never_panics() {
        for line in [
            &b"\x00\x01\x02"[..],
            b"MAIL FROM:<",
            b"MAIL FROM:",
            b"RCPT TO:<@>",
            b"RCPT TO:<@x>",
            b"MAIL FROM:<\"\\",
            b"\xc3",
            b"BDAT 18446744073709551616",
        ] {
            assert!(parse(line).is_err(), "{line:?}");
        }
    }

    fn command_strategy() -> impl proptest::strategy::Strategy<Value = Command> {
        use proptest::prelude::*;
        let addr = "[a-z0-9.]{1,10}@[a-z0-9.]{1,10}";
        prop_oneof![
            "[a-z0-9.]{1,20}".prop_map(Command::Ehlo),
            "[a-z0-9.]{1,20}".prop_map(Command::Lhlo),
            (
                addr,
                proptest::option::of(0u64..1 << 40),
                proptest::option::of("[A-Za-z0-9+]{1,12}")
            )
                .prop_map(|(from, size, envid)| Command::Mail {
                    from,
                    params: MailParams {
                        size,
                        envid,
                        body: Some(Body::EightBitMime),
                        ..Default::default()
                    }
                }),
            (addr, any::<bool>()).prop_map(|(to, n)| Command::Rcpt {
                to,
                params: RcptParams {
                    notify: n.then(|| vec![Notify::Failure, Notify::Delay]),
                    orcpt: None
                }
            }),
            (any::<u64>(), any::<bool>()).prop_map(|(size, last)| Command::Bdat { size, last }),
            Just(Command::Data),
            Just(Command::Rset),
            Just(Command::Quit),
            Just(Command::Starttls),
            (
                "[A-Z0-9-]{1,12}",
                proptest::option::of("[A-Za-z0-9+/=]{1,30}")
            )
                .prop_map(|(mechanism, initial)| Command::Auth { mechanism, initial }),
        ]
    }

    proptest::proptest! {
        #[test]
        fn encode_then_parse_round_trips(c in command_strategy()) {
            let wire = c.encode();
            proptest::prop_assert!(wire.ends_with(b"\r\n"));
            let parsed = parse(&wire[..wire.len() - 2]).unwrap();
            proptest::prop_assert_eq!(parsed, c);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = parse(&bytes);
        }
    }
}
