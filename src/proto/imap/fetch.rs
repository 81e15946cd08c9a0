//! FETCH data items (RFC 3501 6.4.5): macros, body sections with part numbers and
//! partial ranges.

use super::{P, R};

/// What a section names inside the part its numbers lead to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SectionText {
    Header,
    HeaderFields {
        not: bool,
        fields: Vec<String>,
    },
    Text,
    /// The MIME header of a numbered part.
    Mime,
}

/// `[1.2.HEADER]`: part numbers, then what of that part (`None`: all of it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Section {
    pub part: Vec<u32>,
    pub text: Option<SectionText>,
}

impl Section {
    /// The section as a response names it (`1.2.HEADER.FIELDS (A B)`).
    pub fn name(&self) -> String {
        let mut out: Vec<String> = self.part.iter().map(u32::to_string).collect();
        match &self.text {
            None => {}
            Some(SectionText::Header) => out.push("HEADER".into()),
            Some(SectionText::Text) => out.push("TEXT".into()),
            Some(SectionText::Mime) => out.push("MIME".into()),
            Some(SectionText::HeaderFields { not, fields }) => out.push(format!(
                "HEADER.FIELDS{} ({})",
                if *not { ".NOT" } else { "" },
                fields.join(" ")
            )),
        }
        out.join(".")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchItem {
    Flags,
    Uid,
    Rfc822Size,
    InternalDate,
    Envelope,
    /// MODSEQ (RFC 7162).
    ModSeq,
    /// BODY without a section: the structure without extension data.
    Body,
    BodyStructure,
    /// RFC822 (= BODY[]).
    Rfc822,
    /// RFC822.HEADER (= BODY.PEEK[HEADER]).
    Rfc822Header,
    /// RFC822.TEXT (= BODY[TEXT]).
    Rfc822Text,
    Section {
        peek: bool,
        section: Section,
        partial: Option<(u32, u32)>,
    },
}

/// `[section]` after BODY or BODY.PEEK.
fn section(p: &mut P) -> R<Section> {
    if !p.eat(b'[') {
        return Err("expected '['");
    }
    let mut s = Section::default();
    if p.eat(b']') {
        return Ok(s);
    }
    loop {
        if p.peek().is_some_and(|b| b.is_ascii_digit()) {
            match p.number()? {
                0 => return Err("0 is not a part number"),
                n => s.part.push(n),
            }
            if s.part.len() > 20 {
                return Err("section nested too deeply");
            }
            if p.eat(b'.') {
                continue;
            }
            break;
        }
        let name = p.atom_with(b"[.]")?.to_ascii_uppercase();
        let name = if name == "HEADER" && p.peek() == Some(b'.') {
            p.eat(b'.');
            format!("HEADER.{}", p.atom_with(b"[.]")?.to_ascii_uppercase())
        } else {
            name
        };
        let name = if name == "HEADER.FIELDS" && p.eat(b'.') {
            format!("{name}.{}", p.atom_with(b"[.]")?.to_ascii_uppercase())
        } else {
            name
        };
        s.text = Some(match name.as_str() {
            "HEADER" => SectionText::Header,
            "TEXT" => SectionText::Text,
            "MIME" if !s.part.is_empty() => SectionText::Mime,
            "HEADER.FIELDS" | "HEADER.FIELDS.NOT" => {
                p.sp()?;
                if p.peek() != Some(b'(') {
                    return Err("expected a list of header fields");
                }
                let fields = p.list_or_atom()?;
                if fields.is_empty() {
                    return Err("empty list of header fields");
                }
                SectionText::HeaderFields {
                    not: name.ends_with(".NOT"),
                    fields: fields.into_iter().map(|f| f.to_ascii_uppercase()).collect(),
                }
            }
            _ => return Err("bad body section"),
        });
        break;
    }
    if !p.eat(b']') {
        return Err("expected ']'");
    }
    Ok(s)
}

fn item(p: &mut P, out: &mut Vec<FetchItem>) -> R<()> {
    let name = p.atom_with(b"[")?.to_ascii_uppercase();
    match name.as_str() {
        "FLAGS" => out.push(FetchItem::Flags),
        "UID" => out.push(FetchItem::Uid),
        "RFC822.SIZE" => out.push(FetchItem::Rfc822Size),
        "INTERNALDATE" => out.push(FetchItem::InternalDate),
        "ENVELOPE" => out.push(FetchItem::Envelope),
        "MODSEQ" => out.push(FetchItem::ModSeq),
        "BODYSTRUCTURE" => out.push(FetchItem::BodyStructure),
        "RFC822" => out.push(FetchItem::Rfc822),
        "RFC822.HEADER" => out.push(FetchItem::Rfc822Header),
        "RFC822.TEXT" => out.push(FetchItem::Rfc822Text),
        "FAST" | "ALL" | "FULL" => {
            out.extend([
                FetchItem::Flags,
                FetchItem::InternalDate,
                FetchItem::Rfc822Size,
            ]);
            if name != "FAST" {
                out.push(FetchItem::Envelope);
            }
            if name == "FULL" {
                out.push(FetchItem::Body);
            }
        }
        "BODY" if p.peek() != Some(b'[') => out.push(FetchItem::Body),
        "BODY" | "BODY.PEEK" => {
            let section = section(p)?;
            let partial = if p.eat(b'<') {
                let a = p.number()?;
                if !p.eat(b'.') {
                    return Err("expected <origin.count>");
                }
                let b = p.number()?;
                if !p.eat(b'>') || b == 0 {
                    return Err("expected <origin.count> with a count above 0");
                }
                Some((a, b))
            } else {
                None
            };
            out.push(FetchItem::Section {
                peek: name == "BODY.PEEK",
                section,
                partial,
            });
        }
        _ => return Err("unknown FETCH item"),
    }
    Ok(())
}

/// One item, a macro, or a parenthesized list of items; at most 50.
pub(super) fn items(p: &mut P) -> R<Vec<FetchItem>> {
    let mut out = Vec::new();
    if p.eat(b'(') {
        while !p.eat(b')') {
            if !out.is_empty() {
                p.sp()?;
            }
            item(p, &mut out)?;
            if out.len() > 50 {
                return Err("too many FETCH items");
            }
        }
        if out.is_empty() {
            return Err("empty list of FETCH items");
        }
    } else {
        item(p, &mut out)?;
    }
    Ok(out)
}
