//! BODYSTRUCTURE (RFC 3501 7.4.2) read just far enough to choose a part to fetch: the
//! leaf parts, each with its section number (`1`, `2.1`, ...), media type and size in
//! octets. Nested lists are bounded in depth and the parts kept are bounded in number,
//! so a hostile server can make the parse fail, never grow memory or the stack.

use super::{Cursor, Error};

/// Deepest nesting of multiparts accepted (real mail rarely goes past 5).
pub const MAX_DEPTH: usize = 32;
/// Leaf parts kept; the rest of a larger structure is checked but not listed.
pub const MAX_PARTS: usize = 256;

/// A leaf body part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// The section to fetch it as (`BODY.PEEK[section]`).
    pub section: String,
    /// `type/subtype`, lower case.
    pub media: String,
    /// body-fld-octets: the size of the part's body in its transfer encoding, which is
    /// what `BODY[section]` returns.
    pub size: u64,
}

/// The leaf parts of a BODYSTRUCTURE value (the bytes inside its outer parentheses, as
/// [`super::Fetch::structure`] holds them).
pub fn parts(inner: &[u8]) -> Result<Vec<Part>, Error> {
    let bad = |why: &str| Error::Malformed(format!("BODYSTRUCTURE: {why}"));
    let mut c = Cursor { b: inner, i: 0 };
    let mut out = Vec::new();
    let mut path = Vec::new();
    body(&mut c, &mut path, &mut out).map_err(bad)?;
    c.skip_spaces();
    if c.i != inner.len() {
        return Err(bad("data after the body"));
    }
    if out.is_empty() {
        return Err(bad("no parts"));
    }
    Ok(out)
}

/// One body, the cursor just inside its opening parenthesis (or at the start of the
/// whole value); reads up to, not including, its closing parenthesis.
fn body(c: &mut Cursor<'_>, path: &mut Vec<u32>, out: &mut Vec<Part>) -> Result<(), &'static str> {
    if path.len() > MAX_DEPTH {
        return Err("nested too deep");
    }
    c.skip_spaces();
    if c.peek() == Some(b'(') {
        // body-type-mpart: 1*body SP media-subtype [SP body-ext-mpart]
        let mut n = 0u32;
        while c.peek() == Some(b'(') {
            n += 1;
            c.i += 1;
            path.push(n);
            body(c, path, out)?;
            path.pop();
            if c.peek() != Some(b')') {
                return Err("unclosed body part");
            }
            c.i += 1;
        }
        c.skip_spaces();
        string(c).ok_or("multipart without a subtype")?;
        return rest(c);
    }
    let kind = string(c).ok_or("no media type")?;
    let sub = string(c).ok_or("no media subtype")?;
    for err in [
        "bad body parameters",
        "bad body id",
        "bad body description",
        "bad body encoding",
    ] {
        c.skip_spaces();
        c.value().ok_or(err)?;
    }
    c.skip_spaces();
    let size = c
        .value()
        .and_then(|v| std::str::from_utf8(v).ok()?.parse::<u64>().ok())
        .ok_or("body size is not a number")?;
    if out.len() < MAX_PARTS {
        let section = if path.is_empty() {
            "1".to_string()
        } else {
            path.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(".")
        };
        out.push(Part {
            section,
            media: format!("{}/{}", lower(kind)?, lower(sub)?),
            size,
        });
    }
    rest(c)
}

/// A string (quoted or literal) or NIL-free atom, after spaces.
fn string<'a>(c: &mut Cursor<'a>) -> Option<&'a [u8]> {
    c.skip_spaces();
    if matches!(c.peek()?, b'(' | b')') {
        return None;
    }
    c.value()
}

fn lower(v: &[u8]) -> Result<String, &'static str> {
    std::str::from_utf8(v)
        .map(str::to_ascii_lowercase)
        .map_err(|_| "media type is not text")
}

/// Skips the remaining fields of a body (extension data, an encapsulated message's
/// envelope and body, line counts) up to its closing parenthesis.
fn rest(c: &mut Cursor<'_>) -> Result<(), &'static str> {
    loop {
        c.skip_spaces();
        match c.peek() {
            None | Some(b')') => return Ok(()),
            Some(b'\r' | b'\n') => return Err("line end inside the structure"),
            Some(_) => {
                c.value().ok_or("bad body field")?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(section: &str, media: &str, size: u64) -> Part {
        Part {
            section: section.into(),
            media: media.into(),
            size,
        }
    }

    #[test]
    fn single_part_is_section_1() {
        let s = br#""TEXT" "PLAIN" ("CHARSET" "us-ascii") NIL NIL "7BIT" 3028 92 NIL NIL NIL NIL"#;
        assert_eq!(parts(s).unwrap(), vec![p("1", "text/plain", 3028)]);
    }

    /// RFC 3501's own example (7.4.2), and a nested multipart with a message/rfc822.
    #[test]
    fn multipart_sections() {
        let rfc = br#"("TEXT" "PLAIN" ("CHARSET" "US-ASCII") NIL NIL "7BIT" 1152 23)("TEXT" "PLAIN" ("CHARSET" "US-ASCII" "NAME" "cc.diff") "<960723163407.20117h@cac.washington.edu>" "Compiler diff" "BASE64" 4554 73) "MIXED""#;
        assert_eq!(
            parts(rfc).unwrap(),
            vec![p("1", "text/plain", 1152), p("2", "text/plain", 4554)]
        );
        let nested = b"((\"text\" \"plain\" NIL NIL NIL \"7bit\" 10 1 NIL NIL NIL)(\"text\" \"html\" NIL NIL NIL \"quoted-printable\" {2}\r\n20 1) \"alternative\" (\"boundary\" \"b\") NIL NIL)(\"message\" \"rfc822\" NIL NIL NIL \"7bit\" 300 (NIL \"s\" NIL NIL NIL NIL NIL NIL NIL NIL) (\"text\" \"plain\" NIL NIL NIL \"7bit\" 100 4) 9)(\"application\" \"octet-stream\" (\"name\" \"a.bin\") NIL NIL \"base64\" 76 NIL (\"attachment\" (\"filename\" \"a.bin\")) NIL) \"mixed\" (\"boundary\" \"x\") NIL NIL";
        assert_eq!(
            parts(nested).unwrap(),
            vec![
                p("1.1", "text/plain", 10),
                p("1.2", "text/html", 20),
                p("2", "message/rfc822", 300),
                p("3", "application/octet-stream", 76),
            ]
        );
    }

    #[test]
    fn broken_structures_are_refused() {
        for s in [
            &b""[..],
            b"\"TEXT\" \"PLAIN\" NIL NIL NIL \"7BIT\" many",
            b"\"TEXT\" \"PLAIN\" NIL NIL NIL \"7BIT\"",
            b"(\"TEXT\" \"PLAIN\" NIL NIL NIL \"7BIT\" 1",
            b"(\"TEXT\" \"PLAIN\" NIL NIL NIL \"7BIT\" 1)",
            b"(\"TEXT\" \"PLAIN\" NIL NIL NIL \"7BIT\" 1) \"MIXED\") x",
            b"\"TEXT\"",
        ] {
            assert!(parts(s).is_err(), "{:?}", String::from_utf8_lossy(s));
        }
        let deep = format!(
            "{}\"TEXT\" \"PLAIN\" NIL NIL NIL \"7BIT\" 1{}",
            "(".repeat(MAX_DEPTH + 2),
            ") \"MIXED\"".repeat(MAX_DEPTH + 2)
        );
        assert!(parts(deep.as_bytes()).is_err());
    }

    #[test]
    fn parts_kept_are_bounded() {
        let one = "(\"TEXT\" \"PLAIN\" NIL NIL NIL \"7BIT\" 1 1)";
        let many = format!("{} \"MIXED\"", one.repeat(MAX_PARTS + 10));
        assert_eq!(parts(many.as_bytes()).unwrap().len(), MAX_PARTS);
    }
}
