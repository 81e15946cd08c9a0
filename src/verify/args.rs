//! Options of `spate verify` and of the inline `spate smtp --verify`, and the mailbox
//! source they name.

use std::path::PathBuf;

use serde::Serialize;

pub const RULES_HELP: &str = "Derived messages to expect (bounces, notices, receipts), counted against \
    what was expected; an unmet rule fails the check. One rule a line, '#' starts a comment:\n  \
    KIND per=message|recipient [to=GLOB] [undelivered] [in=sender|recipient|ADDRESS]\n       \
    [match=trace|in-reply-to|references|header:NAME] [subject=GLOB] [from=GLOB] [count=N]\n  \
    per      one derived message per accepted message, or per (message, recipient)\n  \
    to       only recipients matching GLOB count (default *)\n  \
    undelivered  those recipients are expected to bounce, not to get the message\n  \
    in       where the derived message lands (default: the original's sender)\n  \
    match    how it names its original: trace = the original's X-Spate-Trace line in its\n           \
    body (bounces returning headers; Final-Recipient says which recipient),\n           \
    in-reply-to/references/header:NAME = the original's Message-ID in that header\n  \
    subject, from  globs (* ?, no spaces) that tell rules apart; count: per unit (default 1)\n  \
    e.g.  bounce per=recipient to=ghost*@example.test undelivered in=sender match=trace\n        \
    notice per=message match=in-reply-to subject=accepted*";

/// Options shared by `spate verify` and the inline check.
#[derive(Debug, Clone, Default, clap::Args, Serialize)]
pub struct Common {
    /// Keep polling until everything expected has arrived or this long has passed
    /// (e.g. 30s, 5m); prints progress while waiting.
    #[arg(long, value_name = "DUR")]
    pub wait: Option<String>,
    /// Derived messages to expect (bounces, notices, receipts); format below.
    #[arg(long, value_name = "FILE", long_help = RULES_HELP)]
    pub rules: Option<PathBuf>,
    /// How many missing deliveries to list on stdout (all are in missing.tsv).
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub show: usize,
}

/// How to log into an IMAP/POP3/JMAP source.
#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct RemoteOptions {
    /// IMAP/POP3/JMAP source: passwords of the mailboxes ('address password' per line);
    /// without it, SPATE_PASSWORD is every mailbox's password.
    #[arg(long, value_name = "FILE", help_heading = "IMAP/POP3/JMAP source")]
    pub users_file: Option<PathBuf>,
    /// IMAP/POP3/JMAP source: trust this CA (PEM) in addition to the system roots.
    #[arg(long, help_heading = "IMAP/POP3/JMAP source")]
    pub ca: Option<String>,
    /// IMAP/POP3/JMAP source: do not verify the server certificate.
    #[arg(long, help_heading = "IMAP/POP3/JMAP source")]
    pub insecure: bool,
    /// IMAP/POP3/JMAP source: deadline for connecting and for each response.
    #[arg(long, default_value = "30s", help_heading = "IMAP/POP3/JMAP source")]
    pub timeout: String,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            users_file: None,
            ca: None,
            insecure: false,
            timeout: "30s".into(),
        }
    }
}

/// Flattened into `spate smtp`: check delivery right after the run, watching the
/// mailboxes while it goes.
#[derive(Debug, Clone, Default, clap::Args, Serialize)]
pub struct InlineArgs {
    /// After the run, verify delivery from this source (maildir:ROOT, imap://, pop3://,
    /// jmap://); a Maildir is watched during the run, up to 200 IMAP or JMAP mailboxes
    /// are followed by push (IDLE, EventSource). Exit status 1 if anything is missing. Memory:
    /// about 22 bytes per message found, kept to the end (the final check adds about 70
    /// per message while it reads the sent log and writes the report).
    #[arg(long, value_name = "SOURCE", help_heading = "Verify")]
    pub verify: Option<String>,
    /// With --verify: wait up to this long for deliveries after the run (default 10s).
    #[arg(long, value_name = "DUR", requires = "verify", help_heading = "Verify")]
    pub verify_wait: Option<String>,
    /// With --verify: rules file of derived messages (see `spate verify --help`).
    #[arg(
        long,
        value_name = "FILE",
        requires = "verify",
        help_heading = "Verify"
    )]
    pub verify_rules: Option<PathBuf>,
    /// With --verify imap://…, pop3://… or jmap://…: passwords of the mailboxes ('address password'
    /// lines; default: SPATE_PASSWORD for all). TLS uses --ca/--insecure of the run.
    #[arg(
        long,
        value_name = "FILE",
        requires = "verify",
        help_heading = "Verify"
    )]
    pub verify_users_file: Option<PathBuf>,
}

/// Where mailboxes are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Maildir(PathBuf),
    /// `scheme` is imap, imaps or imap+starttls.
    Imap {
        addr: String,
        scheme: &'static str,
    },
    /// `scheme` is pop3, pop3s or pop3+stls.
    Pop3 {
        addr: String,
        scheme: &'static str,
    },
    /// `scheme` is jmap or jmaps; `addr` is HOST:PORT with the session resource's path,
    /// if any.
    Jmap {
        addr: String,
        scheme: &'static str,
    },
}

impl Source {
    /// `maildir:ROOT`, `imap[s]://HOST:PORT`, `pop3[s]://HOST:PORT`,
    /// `jmap[s]://HOST:PORT[/PATH]`, or a bare directory.
    pub fn parse(s: &str) -> anyhow::Result<Source> {
        let remote = |rest: &str| -> anyhow::Result<String> {
            let addr = rest.trim_end_matches('/');
            if addr.is_empty() {
                return crate::usage(format!("source {s}: give HOST:PORT"));
            }
            Ok(addr.to_string())
        };
        if let Some(p) = s.strip_prefix("maildir:") {
            let p = p.strip_prefix("//").unwrap_or(p);
            if p.is_empty() {
                return crate::usage("source maildir: needs a directory, e.g. maildir:/tmp/mail");
            }
            return Ok(Source::Maildir(PathBuf::from(p)));
        }
        for scheme in ["jmap", "jmaps"] {
            if let Some(rest) = s.strip_prefix(scheme).and_then(|r| r.strip_prefix("://")) {
                // A path is the session resource's: kept as written.
                let addr = match rest.find('/') {
                    Some(i) if i + 1 < rest.len() => rest.to_string(),
                    _ => remote(rest)?,
                };
                return Ok(Source::Jmap { addr, scheme });
            }
        }
        for (scheme, imap) in [
            ("imap", true),
            ("imaps", true),
            ("imap+starttls", true),
            ("pop3", false),
            ("pop3s", false),
            ("pop3+stls", false),
        ] {
            if let Some(rest) = s.strip_prefix(scheme).and_then(|r| r.strip_prefix("://")) {
                let addr = remote(rest)?;
                return Ok(if imap {
                    Source::Imap { addr, scheme }
                } else {
                    Source::Pop3 { addr, scheme }
                });
            }
        }
        if s.contains("://") {
            return crate::usage(format!(
                "source {s}: use maildir:ROOT, imap[s]://, imap+starttls://, pop3[s]://, pop3+stls://HOST:PORT or jmap[s]://HOST:PORT[/PATH]"
            ));
        }
        Ok(Source::Maildir(PathBuf::from(s)))
    }

    pub fn describe(&self) -> String {
        match self {
            Source::Maildir(p) => format!("maildir:{}", p.display()),
            Source::Imap { addr, scheme }
            | Source::Pop3 { addr, scheme }
            | Source::Jmap { addr, scheme } => {
                format!("{scheme}://{addr}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sources() {
        assert_eq!(
            Source::parse("maildir:/tmp/m").unwrap(),
            Source::Maildir("/tmp/m".into())
        );
        assert_eq!(
            Source::parse("/tmp/m").unwrap(),
            Source::Maildir("/tmp/m".into())
        );
        assert_eq!(
            Source::parse("imap://127.0.0.1:1143").unwrap(),
            Source::Imap {
                addr: "127.0.0.1:1143".into(),
                scheme: "imap"
            }
        );
        assert!(matches!(
            Source::parse("pop3s://h:995").unwrap(),
            Source::Pop3 {
                scheme: "pop3s",
                ..
            }
        ));
        assert_eq!(
            Source::parse("pop3+stls://h:110").unwrap().describe(),
            "pop3+stls://h:110"
        );
        assert_eq!(
            Source::parse("jmap://127.0.0.1:8080/").unwrap(),
            Source::Jmap {
                addr: "127.0.0.1:8080".into(),
                scheme: "jmap"
            }
        );
        assert_eq!(
            Source::parse("jmaps://h/jmap/session").unwrap().describe(),
            "jmaps://h/jmap/session"
        );
        assert!(Source::parse("jmap://").is_err());
        assert!(Source::parse("http://x").is_err());
        assert!(Source::parse("maildir:").is_err());
        assert!(Source::parse("imap://").is_err());
    }
}
