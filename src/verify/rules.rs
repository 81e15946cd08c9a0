//! Rules for derived messages: what else each injected message should cause (bounces,
//! notices, receipts) and how to recognise it.
//!
//! The format is one rule a line, whitespace-separated, `#` starts a comment:
//!
//! ```text
//! KIND per=message|recipient [to=GLOB] [undelivered] [in=sender|recipient|ADDRESS]
//!      [match=trace|in-reply-to|references|header:NAME] [subject=GLOB] [from=GLOB] [count=N]
//! ```
//!
//! - KIND: a name for the report ("bounce", "notice", "receipt").
//! - per: one unit per accepted message, or per (message, recipient) pair.
//! - to: only recipients whose address matches the glob count (default `*`); with
//!   per=message, messages with at least one such recipient.
//! - undelivered: those recipients are expected NOT to receive the original (a bounce is
//!   expected instead), so they are not counted as missing.
//! - in: the mailbox the derived message lands in: the original's sender (default), the
//!   recipient, or a fixed address.
//! - match: how the derived message names its original: `trace` = the original's
//!   X-Spate-Trace line appears in its body (DSNs that return the headers; the
//!   Final-Recipient fields say which recipient), `in-reply-to` / `references` = the
//!   original's Message-ID appears in that header, `header:NAME` = in that header.
//! - subject, from: globs (`*`, `?`, case-insensitive) on the derived message's Subject
//!   and From, to tell rules apart. Globs cannot contain spaces; use `?` or `*`.
//! - count: derived messages per unit (default 1).
//!
//! Example (an unknown user accepted by the MTA and bounced by the mailbox store):
//! `bounce per=recipient to=ghost*@example.test undelivered in=sender match=trace`

use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Per {
    Message,
    Recipient,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Where {
    Sender,
    Recipient,
    Address(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    Trace,
    InReplyTo,
    References,
    Header(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub kind: String,
    pub per: Per,
    pub to: String,
    pub undelivered: bool,
    pub within: Where,
    pub matcher: Match,
    pub subject: Option<String>,
    pub from: Option<String>,
    pub count: u32,
}

#[derive(Debug, thiserror::Error)]
#[error("{path} line {line}: {what}")]
pub struct RuleError {
    pub path: String,
    pub line: usize,
    pub what: String,
}

/// Parses a rules file.
pub fn read(path: &Path) -> anyhow::Result<Vec<Rule>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read rules {}: {e}", path.display()))?;
    Ok(parse(&text, &path.display().to_string())?)
}

pub fn parse(text: &str, path: &str) -> Result<Vec<Rule>, RuleError> {
    let mut rules = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let err = |what: String| RuleError {
            path: path.to_string(),
            line: i + 1,
            what,
        };
        let mut words = line.split_whitespace();
        let kind = words.next().unwrap_or_default().to_string();
        if kind.contains('=') {
            return Err(err(format!(
                "a rule starts with its kind name, not '{kind}'"
            )));
        }
        let mut rule = Rule {
            kind,
            per: Per::Message,
            to: "*".to_string(),
            undelivered: false,
            within: Where::Sender,
            matcher: Match::Trace,
            subject: None,
            from: None,
            count: 1,
        };
        let mut has_per = false;
        for w in words {
            if w == "undelivered" {
                rule.undelivered = true;
                continue;
            }
            let Some((k, v)) = w.split_once('=') else {
                return Err(err(format!("'{w}' is not key=value")));
            };
            match k {
                "per" => {
                    has_per = true;
                    rule.per = match v {
                        "message" => Per::Message,
                        "recipient" => Per::Recipient,
                        _ => return Err(err(format!("per={v}: use message or recipient"))),
                    }
                }
                "to" => rule.to = v.to_string(),
                "in" => {
                    rule.within = match v {
                        "sender" => Where::Sender,
                        "recipient" => Where::Recipient,
                        a if a.contains('@') => Where::Address(a.to_ascii_lowercase()),
                        _ => {
                            return Err(err(format!("in={v}: use sender, recipient or an address")))
                        }
                    }
                }
                "match" => {
                    rule.matcher = match v {
                        "trace" => Match::Trace,
                        "in-reply-to" => Match::InReplyTo,
                        "references" => Match::References,
                        h => match h.strip_prefix("header:") {
                            Some(name) if !name.is_empty() => Match::Header(name.to_string()),
                            _ => {
                                return Err(err(format!(
                                    "match={v}: use trace, in-reply-to, references or header:NAME"
                                )))
                            }
                        },
                    }
                }
                "subject" => rule.subject = Some(v.to_string()),
                "from" => rule.from = Some(v.to_string()),
                "count" => {
                    rule.count = v
                        .parse()
                        .ok()
                        .filter(|&c| c > 0)
                        .ok_or_else(|| err(format!("count={v}: a positive whole number")))?
                }
                _ => return Err(err(format!("unknown key '{k}'"))),
            }
        }
        if !has_per {
            return Err(err("per=message or per=recipient is required".into()));
        }
        rules.push(rule);
    }
    Ok(rules)
}

/// Case-insensitive glob: `*` any run of characters, `?` one character.
pub fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.to_lowercase().chars().collect();
    let t: Vec<char> = text.to_lowercase().chars().collect();
    // Iterative matcher with one backtrack point: linear enough for addresses/subjects.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rules() {
        let r = parse(
            "# comment\n\
             bounce per=recipient to=ghost*@x.test undelivered in=sender match=trace\n\
             receipt per=message in=sender match=header:X-Receipt-For subject=Receipt* count=2\n",
            "t",
        )
        .unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].per, Per::Recipient);
        assert!(r[0].undelivered);
        assert_eq!(r[1].matcher, Match::Header("X-Receipt-For".into()));
        assert_eq!(r[1].count, 2);
        assert_eq!(r[1].subject.as_deref(), Some("Receipt*"));
    }

    #[test]
    fn rejects_bad_rules() {
        for bad in [
            "bounce to=x",
            "bounce per=each",
            "bounce per=message match=magic",
            "bounce per=message count=0",
            "bounce per=message wat",
            "per=message",
        ] {
            let e = parse(bad, "t").unwrap_err();
            assert_eq!(e.line, 1, "{bad}");
        }
    }

    #[test]
    fn globs() {
        assert!(glob("*", ""));
        assert!(glob("ghost*@x.test", "Ghost3@X.test"));
        assert!(!glob("ghost*@x.test", "user3@x.test"));
        assert!(glob("*undeliver*", "Undelivered Mail Returned to Sender"));
        assert!(glob("a?c", "abc"));
        assert!(!glob("a?c", "ac"));
    }
}
