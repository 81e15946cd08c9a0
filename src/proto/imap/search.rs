//! SEARCH keys (RFC 3501 6.4.4): the whole grammar, with OR, NOT and parenthesized lists.

use super::{Command, SeqSet, P, R};

/// BEFORE, ON or SINCE a date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DateCmp {
    Before,
    On,
    Since,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Search {
    All,
    Seq(SeqSet),
    Uid(SeqSet),
    /// A system flag by name without the backslash (`SEEN`), set or not.
    Flag {
        flag: String,
        set: bool,
    },
    Keyword {
        name: String,
        set: bool,
    },
    New,
    Old,
    Recent,
    /// The internal date (or with `sent`, the Date header) against a day, as days since
    /// the epoch.
    Date {
        sent: bool,
        cmp: DateCmp,
        day: i64,
    },
    Larger(u64),
    Smaller(u64),
    /// A header field (by name) containing a string; an empty string matches any message
    /// that has the field.
    Header(String, String),
    Body(String),
    Text(String),
    /// MODSEQ n (RFC 7162): changed at or after n (an entry name and type are read and
    /// ignored: flags have one mod-sequence here).
    ModSeq(u64),
    Not(Box<Search>),
    Or(Box<Search>, Box<Search>),
    And(Vec<Search>),
}

/// `1-Feb-1994` as days since the epoch.
pub fn date(s: &str) -> Option<i64> {
    let d = chrono::NaiveDate::parse_from_str(s, "%d-%b-%Y").ok()?;
    Some(
        d.signed_duration_since(chrono::NaiveDate::from_ymd_opt(1970, 1, 1)?)
            .num_days(),
    )
}

fn string(p: &mut P) -> R<String> {
    match p.peek() {
        Some(b'"') => p.quoted(),
        Some(b'{') => p
            .literal_bytes()
            .map(|b| String::from_utf8_lossy(b).into_owned()),
        _ => p.atom_with(b"").map(str::to_string),
    }
}

fn key(p: &mut P, depth: u32) -> R<Search> {
    if depth > 10 {
        return Err("search nested too deeply");
    }
    if p.eat(b'(') {
        let mut all = Vec::new();
        loop {
            all.push(key(p, depth + 1)?);
            if all.len() > 50 {
                return Err("too many SEARCH keys");
            }
            if p.eat(b')') {
                break;
            }
            p.sp()?;
        }
        return Ok(if all.len() == 1 {
            all.remove(0)
        } else {
            Search::And(all)
        });
    }
    if p.peek().is_some_and(|b| b.is_ascii_digit() || b == b'*') {
        return Ok(Search::Seq(p.seq_set()?));
    }
    let k = p.atom()?.to_ascii_uppercase();
    let flag = |f: &str, set| Search::Flag {
        flag: f.to_string(),
        set,
    };
    let date_key = |p: &mut P, sent: bool, cmp| -> R<Search> {
        p.sp()?;
        let d = string(p)?;
        Ok(Search::Date {
            sent,
            cmp,
            day: date(&d).ok_or("bad date")?,
        })
    };
    Ok(match k.as_str() {
        "ALL" => Search::All,
        "NEW" => Search::New,
        "OLD" => Search::Old,
        "RECENT" => Search::Recent,
        "UID" => {
            p.sp()?;
            Search::Uid(p.seq_set()?)
        }
        "HEADER" => {
            p.sp()?;
            let name = p.astring()?;
            p.sp()?;
            Search::Header(name, string(p)?)
        }
        "SUBJECT" | "FROM" | "TO" | "CC" | "BCC" => {
            p.sp()?;
            Search::Header(k.clone(), string(p)?)
        }
        "BODY" => {
            p.sp()?;
            Search::Body(string(p)?)
        }
        "TEXT" => {
            p.sp()?;
            Search::Text(string(p)?)
        }
        "KEYWORD" | "UNKEYWORD" => {
            p.sp()?;
            Search::Keyword {
                name: p.atom()?.to_string(),
                set: k == "KEYWORD",
            }
        }
        "LARGER" | "SMALLER" => {
            p.sp()?;
            let n = p.number()? as u64;
            if k == "LARGER" {
                Search::Larger(n)
            } else {
                Search::Smaller(n)
            }
        }
        "BEFORE" => date_key(p, false, DateCmp::Before)?,
        "ON" => date_key(p, false, DateCmp::On)?,
        "SINCE" => date_key(p, false, DateCmp::Since)?,
        "SENTBEFORE" => date_key(p, true, DateCmp::Before)?,
        "SENTON" => date_key(p, true, DateCmp::On)?,
        "SENTSINCE" => date_key(p, true, DateCmp::Since)?,
        "MODSEQ" => {
            p.sp()?;
            if p.peek() == Some(b'"') {
                p.quoted()?;
                p.sp()?;
                p.atom()?;
                p.sp()?;
            }
            Search::ModSeq(p.number64()?)
        }
        "NOT" => {
            p.sp()?;
            Search::Not(Box::new(key(p, depth + 1)?))
        }
        "OR" => {
            p.sp()?;
            let a = key(p, depth + 1)?;
            p.sp()?;
            Search::Or(Box::new(a), Box::new(key(p, depth + 1)?))
        }
        "SEEN" | "ANSWERED" | "FLAGGED" | "DELETED" | "DRAFT" => flag(&k, true),
        "UNSEEN" | "UNANSWERED" | "UNFLAGGED" | "UNDELETED" | "UNDRAFT" => flag(&k[2..], false),
        _ => return Err("unknown SEARCH key"),
    })
}

/// [UID] SEARCH [CHARSET x] keys; at most 50 keys. US-ASCII and UTF-8 are the charsets
/// known (anything else: `BADCHARSET`, said by the caller from the error text).
pub(super) fn command(p: &mut P, uid: bool) -> R<Command> {
    let mut criteria = Vec::new();
    let mut ret = None;
    if p.s[p.i..].len() > 7 && p.s[p.i..p.i + 7].eq_ignore_ascii_case(b" RETURN") {
        p.sp()?;
        p.atom()?;
        p.sp()?;
        if p.peek() != Some(b'(') {
            return Err("expected RETURN options in parentheses");
        }
        let opts = p.list_or_atom()?;
        let opts: Vec<String> = opts.into_iter().map(|o| o.to_ascii_uppercase()).collect();
        if let Some(o) = opts
            .iter()
            .find(|o| !["MIN", "MAX", "ALL", "COUNT"].contains(&o.as_str()))
        {
            return Err(if o == "SAVE" {
                "RETURN (SAVE) is not supported"
            } else {
                "unknown RETURN option"
            });
        }
        ret = Some(opts);
    }
    while p.eat(b' ') {
        if criteria.is_empty() && p.eat_word("CHARSET") {
            p.sp()?;
            let cs = p.astring()?;
            if !cs.eq_ignore_ascii_case("UTF-8") && !cs.eq_ignore_ascii_case("US-ASCII") {
                return Err(BADCHARSET);
            }
            continue;
        }
        criteria.push(key(p, 0)?);
        if criteria.len() > 50 {
            return Err("too many SEARCH keys");
        }
    }
    if criteria.is_empty() {
        return Err("SEARCH needs a key");
    }
    Ok(Command::Search { uid, criteria, ret })
}

/// The parse error of an unknown charset (answered `NO [BADCHARSET]`).
pub const BADCHARSET: &str = "[BADCHARSET (US-ASCII UTF-8)] unknown charset";
