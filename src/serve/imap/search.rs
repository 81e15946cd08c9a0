//! SEARCH and UID SEARCH: the RFC 3501 key grammar evaluated over snapshots of the
//! selected mailbox's messages (taken under the store lock, matched outside it).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::SystemTime;

use super::{in_set, ok, Done, Session, Structure, FLAG_NAMES};
use crate::proto::imap::{DateCmp, Search};

/// What SEARCH needs of one message.
struct Item {
    seq: u32,
    uid: u32,
    flags: u8,
    keywords: Vec<String>,
    recent: bool,
    size: u64,
    received: SystemTime,
    data: Arc<[u8]>,
    mime: Option<Arc<Structure>>,
    modseq: u64,
}

/// Context of one evaluation: messages in view and the largest UID.
struct Ctx {
    count: u32,
    max_uid: u32,
}

/// Does the search use MODSEQ (and so turn CONDSTORE on)?
pub(super) fn uses_modseq(c: &Search) -> bool {
    match c {
        Search::ModSeq(_) => true,
        Search::Not(x) => uses_modseq(x),
        Search::Or(a, b) => uses_modseq(a) || uses_modseq(b),
        Search::And(v) => v.iter().any(uses_modseq),
        _ => false,
    }
}

fn needs_mime(c: &Search) -> bool {
    match c {
        Search::Date { sent: true, .. } => true,
        Search::Not(x) => needs_mime(x),
        Search::Or(a, b) => needs_mime(a) || needs_mime(b),
        Search::And(v) => v.iter().any(needs_mime),
        _ => false,
    }
}

/// Case-insensitive containment (ASCII and, via lowercasing, UTF-8).
fn contains(hay: &[u8], needle: &str) -> bool {
    if needle.is_empty() {
        return true;
    }
    if needle.is_ascii() {
        let n = needle.as_bytes();
        return hay.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n));
    }
    String::from_utf8_lossy(hay)
        .to_lowercase()
        .contains(&needle.to_lowercase())
}

fn date_matches(cmp: DateCmp, day: i64, want: i64) -> bool {
    match cmp {
        DateCmp::Before => day < want,
        DateCmp::On => day == want,
        DateCmp::Since => day >= want,
    }
}

fn day_of(t: SystemTime) -> i64 {
    let secs = match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    };
    secs.div_euclid(86_400)
}

fn matches(c: &Search, m: &Item, ctx: &Ctx) -> bool {
    let data = &m.data[..];
    let end = super::mime::header_end(data);
    match c {
        Search::All => true,
        Search::Seq(set) => in_set(set, m.seq, ctx.count),
        Search::Uid(set) => in_set(set, m.uid, ctx.max_uid),
        Search::Flag { flag, set } => {
            let bit = FLAG_NAMES
                .iter()
                .find(|(_, n)| n[1..].eq_ignore_ascii_case(flag))
                .map_or(0, |(b, _)| *b);
            (m.flags & bit != 0) == *set
        }
        Search::Keyword { name, set } => {
            m.keywords.iter().any(|k| k.eq_ignore_ascii_case(name)) == *set
        }
        Search::New => m.recent && m.flags & crate::serve::store::flags::SEEN == 0,
        Search::Old => !m.recent,
        Search::Recent => m.recent,
        Search::Date {
            sent: false,
            cmp,
            day,
        } => date_matches(*cmp, day_of(m.received), *day),
        Search::Date {
            sent: true,
            cmp,
            day,
        } => m
            .mime
            .as_ref()
            .and_then(|s| s.sent_day)
            .is_some_and(|d| date_matches(*cmp, d, *day)),
        Search::ModSeq(n) => m.modseq >= *n,
        Search::Larger(n) => m.size > *n,
        Search::Smaller(n) => m.size < *n,
        Search::Header(name, value) => {
            let address = ["FROM", "TO", "CC", "BCC", "SENDER", "REPLY-TO"]
                .iter()
                .any(|a| a.eq_ignore_ascii_case(name));
            super::header_values(data, name).iter().any(|v| {
                contains(v.as_bytes(), value)
                    || (address
                        && super::envelope::addresses(v)
                            .iter()
                            .any(|a| contains(a.as_bytes(), value)))
            })
        }
        Search::Body(s) => {
            contains(&data[end..], s) || super::mime::decoded_text_contains(data, s) == Some(true)
        }
        Search::Text(s) => {
            contains(data, s) || super::mime::decoded_text_contains(data, s) == Some(true)
        }
        Search::Not(x) => !matches(x, m, ctx),
        Search::Or(a, b) => matches(a, m, ctx) || matches(b, m, ctx),
        Search::And(v) => v.iter().all(|x| matches(x, m, ctx)),
    }
}

impl Session<'_> {
    pub(super) fn search(
        &mut self,
        tag: &str,
        uid: bool,
        criteria: &[Search],
        ret: Option<Vec<String>>,
    ) -> Done {
        let Some(sel) = self.selected.as_ref() else {
            return ok("SEARCH completed");
        };
        let view = sel.view.clone();
        let recent = sel.recent.clone();
        let items = self.in_selected(|mb| {
            view.iter()
                .enumerate()
                .filter_map(|(i, u)| {
                    let m = &mb.messages[mb.find(*u)?];
                    Some(Item {
                        seq: i as u32 + 1,
                        uid: m.uid,
                        flags: m.flags,
                        keywords: mb
                            .keywords
                            .iter()
                            .enumerate()
                            .filter(|(b, _)| m.keywords & (1 << b) != 0)
                            .map(|(_, k)| k.clone())
                            .collect(),
                        recent: recent.binary_search(u).is_ok(),
                        size: m.size,
                        received: m.received,
                        data: m.data.clone(),
                        mime: super::mime::cached(m),
                        modseq: m.modseq,
                    })
                })
                .collect::<Vec<_>>()
        });
        let mut items = items.unwrap_or_default();
        if criteria.iter().any(needs_mime) {
            for it in items.iter_mut().filter(|i| i.mime.is_none()) {
                it.mime = Some(Arc::new(Structure::parse(&it.data)));
            }
        }
        let ctx = Ctx {
            count: view.len() as u32,
            max_uid: view.last().copied().unwrap_or(0),
        };
        let found: Vec<(u32, u64)> = items
            .iter()
            .filter(|m| criteria.iter().all(|c| matches(c, m, &ctx)))
            .map(|m| (if uid { m.uid } else { m.seq }, m.modseq))
            .collect();
        // RFC 7162 3.1.5: with MODSEQ in the keys, the highest mod-sequence returned.
        let modseq = criteria.iter().any(uses_modseq);
        let out = match ret {
            Some(opts) => esearch(tag, uid, &opts, &found, modseq),
            None => {
                let mut out = String::from("* SEARCH");
                for (h, _) in &found {
                    let _ = write!(out, " {h}");
                }
                if let (true, Some(max)) = (modseq, found.iter().map(|f| f.1).max()) {
                    let _ = write!(out, " (MODSEQ {max})");
                }
                out + "\r\n"
            }
        };
        self.conn.queue(out.as_bytes());
        ok("SEARCH completed")
    }
}

/// The ESEARCH response (RFC 4731) for `RETURN (opts)`; `RETURN ()` means ALL.
fn esearch(tag: &str, uid: bool, opts: &[String], found: &[(u32, u64)], modseq: bool) -> String {
    let hits: Vec<u32> = found.iter().map(|f| f.0).collect();
    let mut out = format!("* ESEARCH (TAG {})", crate::proto::imap::quote(tag));
    if uid {
        out.push_str(" UID");
    }
    let want = |o: &str| opts.iter().any(|x| x == o) || (opts.is_empty() && o == "ALL");
    if let (true, Some(min)) = (want("MIN"), hits.first()) {
        let _ = write!(out, " MIN {min}");
    }
    if let (true, Some(max)) = (want("MAX"), hits.last()) {
        let _ = write!(out, " MAX {max}");
    }
    if want("COUNT") {
        let _ = write!(out, " COUNT {}", hits.len());
    }
    if want("ALL") && !hits.is_empty() {
        let _ = write!(out, " ALL {}", super::uid_set(&hits));
    }
    // The mod-sequence of what was returned: of MIN and/or MAX alone, else of all.
    let returned: Vec<u64> = if want("ALL") || want("COUNT") {
        found.iter().map(|f| f.1).collect()
    } else {
        [
            want("MIN").then(|| found.first()),
            want("MAX").then(|| found.last()),
        ]
        .into_iter()
        .flatten()
        .flatten()
        .map(|f| f.1)
        .collect()
    };
    if let (true, Some(max)) = (modseq, returned.into_iter().max()) {
        let _ = write!(out, " MODSEQ {max}");
    }
    out + "\r\n"
}
