//! FETCH (every RFC 3501 data item), STORE (all modes, keywords), COPY and MOVE (with
//! UIDPLUS's COPYUID). Messages are read under the store lock as shared snapshots; MIME
//! parsing and rendering happen outside it, and a parse is kept with the message.

use std::sync::Arc;
use std::time::SystemTime;

use super::{
    bad, flags_lines, message_flags, no, ok, recent_flag, uid_set, BadSet, Done, Session,
    Structure, FLAG_NAMES,
};
use crate::proto::imap::{FetchItem, SectionText, SeqSet, StoreMode};
use crate::serve::store::{flags, StoredMessage};

/// What FETCH needs of one message, copied out under the lock.
struct Snap {
    seq: u32,
    uid: u32,
    flags: String,
    recent: bool,
    newly_seen: bool,
    data: Arc<[u8]>,
    size: u64,
    received: SystemTime,
    mime: Option<Arc<Structure>>,
    modseq: u64,
}

fn marks_seen(i: &FetchItem) -> bool {
    matches!(
        i,
        FetchItem::Section { peek: false, .. } | FetchItem::Rfc822 | FetchItem::Rfc822Text
    )
}

fn needs_mime(i: &FetchItem) -> bool {
    match i {
        FetchItem::Body | FetchItem::BodyStructure => true,
        FetchItem::Section { section, .. } => !section.part.is_empty(),
        _ => false,
    }
}

fn literal(out: &mut Vec<u8>, name: &str, bytes: &[u8]) {
    out.extend_from_slice(format!("{name} {{{}}}\r\n", bytes.len()).as_bytes());
    out.extend_from_slice(bytes);
}

fn internal_date(t: SystemTime) -> String {
    let dt: chrono::DateTime<chrono::Utc> = t.into();
    dt.format("%d-%b-%Y %H:%M:%S +0000").to_string()
}

/// The system flag bits and keyword names of a STORE or APPEND flag list.
pub(super) fn split_flags(names: &[String]) -> Result<(u8, Vec<&str>), String> {
    let mut bits = 0;
    let mut keywords = Vec::new();
    for f in names {
        if f.starts_with('\\') {
            match FLAG_NAMES.iter().find(|(_, n)| n.eq_ignore_ascii_case(f)) {
                Some((b, _)) => bits |= b,
                None if f.eq_ignore_ascii_case("\\Recent") => {}
                None => return Err(format!("invalid system flag {f}")),
            }
        } else {
            keywords.push(f.as_str());
        }
    }
    Ok((bits, keywords))
}

impl Session<'_> {
    pub(super) fn fetch(
        &mut self,
        uid: bool,
        set: &SeqSet,
        items: &[FetchItem],
        changed_since: Option<u64>,
    ) -> Done {
        // CHANGEDSINCE implies MODSEQ (RFC 7162 3.1.4.1).
        let mut items = items.to_vec();
        if changed_since.is_some() && !items.contains(&FetchItem::ModSeq) {
            items.push(FetchItem::ModSeq);
        }
        let items = &items[..];
        let Ok(idx) = self.resolve(uid, set) else {
            return bad(BadSet::TEXT);
        };
        let Some(sel) = self.selected.as_ref() else {
            return bad("select a mailbox first");
        };
        let sets_seen = !sel.read_only && items.iter().any(marks_seen);
        let targets: Vec<(u32, u32)> = idx.iter().map(|&i| (i as u32 + 1, sel.view[i])).collect();
        let recent = sel.recent.clone();
        let (known_keywords, read_only) = (sel.keywords, sel.read_only);
        let taken = self.in_selected(|mb| {
            // Keywords another session added are announced before they are shown.
            let head = (mb.keywords.len() != known_keywords)
                .then(|| (flags_lines(mb, read_only), mb.keywords.len()));
            let before = mb.highest_modseq;
            let mut told = Vec::new();
            let mut snaps = Vec::with_capacity(targets.len());
            let mut missing = false;
            for &(seq, uid) in &targets {
                let Some(p) = mb.find(uid) else {
                    missing = true;
                    continue;
                };
                if changed_since.is_some_and(|c| mb.messages[p].modseq <= c) {
                    continue;
                }
                let newly_seen = sets_seen && mb.messages[p].flags & flags::SEEN == 0;
                if newly_seen {
                    let ms = mb.next_modseq();
                    let m = &mut mb.messages[p];
                    m.flags |= flags::SEEN;
                    m.modseq = ms;
                    told.push((uid, ms));
                }
                let m = &mb.messages[p];
                snaps.push(Snap {
                    seq,
                    uid,
                    flags: message_flags(mb, m),
                    recent: recent.binary_search(&uid).is_ok(),
                    newly_seen,
                    data: m.data.clone(),
                    size: m.size,
                    received: m.received,
                    mime: super::mime::cached(m),
                    modseq: m.modseq,
                });
            }
            if mb.highest_modseq != before {
                mb.touch();
            }
            (snaps, missing, told, head)
        });
        let Some((mut snaps, missing, told, head)) = taken else {
            return no("[EXPUNGEISSUED] the mailbox is gone");
        };
        if let Some(sel) = self.selected.as_mut() {
            sel.told.extend(told);
            if let Some((lines, n)) = head {
                sel.keywords = n;
                self.conn.queue(lines.as_bytes());
            }
        }
        if items.iter().any(needs_mime) {
            self.parse_all(&mut snaps);
        }
        let mut out = Vec::new();
        let mut retrieved = 0;
        let condstore = self.condstore;
        for s in &snaps {
            retrieved += render(&mut out, s, uid, items, condstore);
        }
        for _ in 0..retrieved {
            self.sh.stats.retrieved();
        }
        self.conn.queue(&out);
        if missing {
            return no("[EXPUNGEISSUED] some of the requested messages no longer exist");
        }
        ok("FETCH completed")
    }

    /// Parses the snapshots' messages that have no structure yet and keeps the parses
    /// with the stored messages.
    fn parse_all(&self, snaps: &mut [Snap]) {
        let mut fresh = Vec::new();
        for s in snaps.iter_mut().filter(|s| s.mime.is_none()) {
            let parsed = Arc::new(Structure::parse(&s.data));
            fresh.push((s.uid, parsed.clone()));
            s.mime = Some(parsed);
        }
        if fresh.is_empty() {
            return;
        }
        self.in_selected(|mb| {
            for (uid, parsed) in fresh {
                if let Some(p) = mb.find(uid) {
                    super::mime::keep(&mb.messages[p], parsed);
                }
            }
        });
    }

    pub(super) fn store(
        &mut self,
        uid: bool,
        set: &SeqSet,
        unchanged_since: Option<u64>,
        mode: StoreMode,
        silent: bool,
        names: &[String],
    ) -> Done {
        let condstore = self.condstore;
        if self.selected.as_ref().is_some_and(|s| s.read_only) {
            return no("[READ-ONLY] mailbox is read-only");
        }
        let (bits, keywords) = match split_flags(names) {
            Ok(x) => x,
            Err(e) => return bad(e),
        };
        let Ok(idx) = self.resolve(uid, set) else {
            return bad(BadSet::TEXT);
        };
        let Some(sel) = self.selected.as_ref() else {
            return bad("select a mailbox first");
        };
        let targets: Vec<(u32, u32)> = idx.iter().map(|&i| (i as u32 + 1, sel.view[i])).collect();
        let (known_keywords, read_only) = (sel.keywords, sel.read_only);
        let recent = sel.recent.clone();
        let done = self.in_selected(|mb| {
            let mut kw = 0u64;
            for k in &keywords {
                match mb.keyword_bit(k, mode != StoreMode::Remove) {
                    Some(b) => kw |= b,
                    None if mode == StoreMode::Remove => {}
                    None => return Err(no("[LIMIT] too many keywords in this mailbox")),
                }
            }
            let before = mb.highest_modseq;
            let mut told = Vec::new();
            let mut lines = String::new();
            if mb.keywords.len() != known_keywords {
                lines.push_str(&flags_lines(mb, read_only));
            }
            let mut modified = Vec::new();
            for &(seq, u) in &targets {
                let Some(p) = mb.find(u) else { continue };
                let m = &mb.messages[p];
                if unchanged_since.is_some_and(|n| m.modseq > n) {
                    modified.push(if uid { u } else { seq });
                    continue;
                }
                let (f, k) = match mode {
                    StoreMode::Replace => (bits, kw),
                    StoreMode::Add => (m.flags | bits, m.keywords | kw),
                    StoreMode::Remove => (m.flags & !bits, m.keywords & !kw),
                };
                if (f, k) != (m.flags, m.keywords) {
                    let ms = mb.next_modseq();
                    let m = &mut mb.messages[p];
                    (m.flags, m.keywords, m.modseq) = (f, k, ms);
                }
                // Said now (or, with .SILENT, known to the client): not again at sync.
                told.push((u, mb.messages[p].modseq));
                if !silent {
                    let recent = recent.binary_search(&u).is_ok();
                    let said =
                        stored_flags(mb, &mb.messages[p], (seq, u), (uid, condstore), recent);
                    lines.push_str(&said);
                }
            }
            if mb.highest_modseq != before {
                mb.touch();
            }
            Ok((lines, mb.keywords.len(), told, modified))
        });
        let (lines, keywords_now, told, modified) = match done {
            Some(Ok(x)) => x,
            Some(Err(d)) => return d,
            None => return ok("STORE completed"),
        };
        if let Some(sel) = self.selected.as_mut() {
            sel.keywords = keywords_now;
            sel.told.extend(told);
        }
        self.conn.queue(lines.as_bytes());
        if !modified.is_empty() {
            // RFC 7162 3.1.3: these changed since UNCHANGEDSINCE and were left alone.
            return ok(format!(
                "[MODIFIED {}] conditional STORE completed",
                uid_set(&modified)
            ));
        }
        ok("STORE completed")
    }

    /// COPY, or MOVE (`mv`): copies with flags, keywords and internal dates, answers with
    /// COPYUID; MOVE then expunges the originals (reported by the sync after it).
    pub(super) fn copy(&mut self, uid: bool, set: &SeqSet, dest: &str, mv: bool) -> Done {
        if mv && self.selected.as_ref().is_some_and(|s| s.read_only) {
            return no("[READ-ONLY] mailbox is read-only");
        }
        let Ok(idx) = self.resolve(uid, set) else {
            return bad(BadSet::TEXT);
        };
        let Some(sel) = self.selected.as_ref() else {
            return bad("select a mailbox first");
        };
        let uids: Vec<u32> = idx.iter().map(|&i| sel.view[i]).collect();
        let (src_name, validity) = (sel.name.clone(), sel.validity);
        let dest = super::mailbox::canonical(dest);
        let store = self.sh.store.clone();
        let done = self.account(|a| {
            let Some(src) = a.get(&src_name).filter(|m| m.uid_validity == validity) else {
                return Err(no("[EXPUNGEISSUED] the mailbox is gone"));
            };
            let picked: Vec<(StoredMessage, Vec<String>)> = uids
                .iter()
                .filter_map(|u| src.find(*u).map(|p| &src.messages[p]))
                .map(|m| {
                    let names = src
                        .keywords
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| m.keywords & (1 << i) != 0)
                        .map(|(_, k)| k.clone())
                        .collect();
                    (m.clone(), names)
                })
                .collect();
            let Some(dst) = a.get_mut(&dest).filter(|m| !m.noselect) else {
                return Err(no("[TRYCREATE] no such mailbox"));
            };
            if !store.has_room(picked.iter().map(|(m, _)| m.size).sum()) {
                return Err(no("[OVERQUOTA] mail store full"));
            }
            let mut pairs = Vec::with_capacity(picked.len());
            for (mut m, names) in picked {
                m.keywords = 0;
                for k in names {
                    if let Some(b) = dst.keyword_bit(&k, true) {
                        m.keywords |= b;
                    }
                }
                let from = m.uid;
                pairs.push((from, dst.push(m)));
            }
            let dst_validity = dst.uid_validity;
            if mv {
                if let Some(src) = a.get_mut(&src_name) {
                    let moved: Vec<u32> = pairs.iter().map(|p| p.0).collect();
                    src.remove_where(|m| moved.binary_search(&m.uid).is_ok());
                }
            }
            Ok((pairs, dst_validity))
        });
        let (pairs, dst_validity) = match done {
            Ok(x) => x,
            Err(d) => return d,
        };
        let verb = if mv { "MOVE" } else { "COPY" };
        if pairs.is_empty() {
            return ok(format!("{verb} completed (no messages)"));
        }
        let from: Vec<u32> = pairs.iter().map(|p| p.0).collect();
        let to: Vec<u32> = pairs.iter().map(|p| p.1).collect();
        let code = format!(
            "[COPYUID {dst_validity} {} {}]",
            uid_set(&from),
            uid_set(&to)
        );
        if mv {
            self.conn.queue(format!("* OK {code} moved\r\n").as_bytes());
            return ok("MOVE completed");
        }
        ok(format!("{code} COPY completed"))
    }
}

/// One message's FETCH response; returns 1 if it carried the whole message.
fn render(out: &mut Vec<u8>, s: &Snap, uid: bool, items: &[FetchItem], condstore: bool) -> u32 {
    let mut retrieved = 0;
    out.extend_from_slice(format!("* {} FETCH (", s.seq).as_bytes());
    let mut first = true;
    let mut sep = |out: &mut Vec<u8>| {
        if !std::mem::take(&mut first) {
            out.push(b' ');
        }
    };
    if uid && !items.contains(&FetchItem::Uid) {
        sep(out);
        out.extend_from_slice(format!("UID {}", s.uid).as_bytes());
    }
    let flags = || {
        let r = if s.recent {
            recent_flag(&s.flags)
        } else {
            String::new()
        };
        format!("FLAGS ({}{r})", s.flags)
    };
    let data = &s.data[..];
    for item in items {
        sep(out);
        match item {
            FetchItem::Flags => out.extend_from_slice(flags().as_bytes()),
            FetchItem::Uid => out.extend_from_slice(format!("UID {}", s.uid).as_bytes()),
            FetchItem::ModSeq => out.extend_from_slice(format!("MODSEQ ({})", s.modseq).as_bytes()),
            FetchItem::Rfc822Size => {
                out.extend_from_slice(format!("RFC822.SIZE {}", s.size).as_bytes())
            }
            FetchItem::InternalDate => out.extend_from_slice(
                format!("INTERNALDATE \"{}\"", internal_date(s.received)).as_bytes(),
            ),
            FetchItem::Envelope => {
                out.extend_from_slice(super::envelope::envelope(data).as_bytes())
            }
            FetchItem::Body | FetchItem::BodyStructure => {
                let ext = *item == FetchItem::BodyStructure;
                let name = if ext { "BODYSTRUCTURE" } else { "BODY" };
                let text = s
                    .mime
                    .as_ref()
                    .map_or_else(String::new, |m| m.render(data, ext));
                out.extend_from_slice(format!("{name} {text}").as_bytes());
            }
            FetchItem::Rfc822 => {
                retrieved = 1;
                literal(out, "RFC822", data);
            }
            FetchItem::Rfc822Header => {
                let end = super::mime::header_end(data);
                literal(out, "RFC822.HEADER", &data[..end]);
            }
            FetchItem::Rfc822Text => {
                let end = super::mime::header_end(data);
                literal(out, "RFC822.TEXT", &data[end..]);
            }
            FetchItem::Section {
                section, partial, ..
            } => {
                if section.part.is_empty() && section.text.is_none() {
                    retrieved = 1;
                }
                let bytes = if section.part.is_empty() {
                    Some(top_section(data, &section.text))
                } else {
                    s.mime.as_ref().and_then(|m| m.section(data, section))
                };
                let mut name = format!("BODY[{}]", section.name());
                let Some(bytes) = bytes else {
                    out.extend_from_slice(format!("{name} NIL").as_bytes());
                    continue;
                };
                match partial {
                    Some((origin, count)) => {
                        name.push_str(&format!("<{origin}>"));
                        let start = (*origin as usize).min(bytes.len());
                        let end = start.saturating_add(*count as usize).min(bytes.len());
                        literal(out, &name, &bytes[start..end]);
                    }
                    None => literal(out, &name, &bytes),
                }
            }
        }
    }
    if s.newly_seen && !items.contains(&FetchItem::Flags) {
        sep(out);
        out.extend_from_slice(flags().as_bytes());
    }
    if s.newly_seen && condstore && !items.contains(&FetchItem::ModSeq) {
        sep(out);
        out.extend_from_slice(format!("MODSEQ ({})", s.modseq).as_bytes());
    }
    out.extend_from_slice(b")\r\n");
    retrieved
}

/// A section of the top-level message (no part numbers): no MIME parse needed.
fn top_section(data: &[u8], text: &Option<SectionText>) -> Vec<u8> {
    let end = super::mime::header_end(data);
    match text {
        None | Some(SectionText::Mime) => data.to_vec(),
        Some(SectionText::Header) => data[..end].to_vec(),
        Some(SectionText::Text) => data[end..].to_vec(),
        Some(SectionText::HeaderFields { not, fields }) => super::header_fields(data, fields, *not),
    }
}

/// The untagged FETCH a STORE answers with for message `seq` (UID `u`): its flags (and
/// \\Recent), its UID for UID STORE, its MODSEQ under CONDSTORE.
fn stored_flags(
    mb: &crate::serve::store::Mailbox,
    m: &StoredMessage,
    (seq, u): (u32, u32),
    (uid, condstore): (bool, bool),
    recent: bool,
) -> String {
    let text = message_flags(mb, m);
    let r = if recent {
        recent_flag(&text)
    } else {
        String::new()
    };
    let mut extra = if uid {
        format!(" UID {u}")
    } else {
        String::new()
    };
    if condstore {
        extra.push_str(&format!(" MODSEQ ({})", m.modseq));
    }
    format!("* {seq} FETCH (FLAGS ({text}{r}){extra})\r\n")
}
