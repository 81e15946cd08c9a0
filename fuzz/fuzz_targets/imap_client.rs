//! The client's IMAP response framer and parser on server bytes. Beyond "no panic":
//! - `literal_at_end` is exactly "`{digits}` or `{digits+}` before the line end";
//! - the framer gives what a whole-buffer reading of the same bytes gives, however the
//!   bytes arrive (it keeps state between calls), and never a length past its input;
//! - a frame is found the same from exactly its own bytes, and no shorter prefix is one;
//! - a literal over `max_literal` is refused as soon as its line is in, not buffered;
//! - `parse` of a frame borrows only from the frame, and every piece it returns fits the
//!   grammar it was cut by (tags without spaces, trimmed texts, codes without `]`);
//! - what `astring` writes comes back unchanged as a FETCH body, quoted or literal;
//! - `internal_date` reads a well-formed date as the time computed by hand, and a date
//!   it accepts reads the same when written back canonically.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spate::proto::imap_client::{
    self as imap, astring, internal_date, literal_at_end, Error, Framer, Response, Untagged,
    MAX_LINE,
};

/// Where `inner` lies inside `outer` (pointer ranges), if it does.
fn within(outer: &[u8], inner: &[u8]) -> bool {
    if inner.is_empty() {
        return true; // an empty piece may be a constant ""
    }
    let o = outer.as_ptr_range();
    let i = inner.as_ptr_range();
    i.start >= o.start && i.end <= o.end
}

/// The literal size a line announces, from the grammar (`literal = "{" number ["+"] "}"
/// CRLF`, RFC 3501/7888; a bare LF accepted; at most 19 digits).
fn spec_literal(line: &[u8]) -> Option<u64> {
    let body = line.strip_suffix(b"\n")?;
    let body = body.strip_suffix(b"\r").unwrap_or(body);
    if body.last() != Some(&b'}') {
        return None;
    }
    let open = body.iter().rposition(|&b| b == b'{')?;
    let mut inner = &body[open + 1..body.len() - 1];
    if inner.last() == Some(&b'+') {
        inner = &inner[..inner.len() - 1];
    }
    if inner.is_empty() || inner.len() > 19 || inner.iter().any(|b| !b.is_ascii_digit()) {
        return None;
    }
    Some(
        inner
            .iter()
            .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')),
    )
}

/// The framer's answer for a whole buffer read at once, and where it was decided (the
/// end of the line that ends the frame or announces a refused literal).
fn model(buf: &[u8], max_literal: u64) -> (Result<Option<usize>, Error>, usize) {
    let mut pos = 0usize;
    loop {
        let rest = &buf[pos..];
        let Some(i) = rest.iter().position(|&b| b == b'\n') else {
            let r = if rest.len() > MAX_LINE {
                Err(Error::LineTooLong)
            } else {
                Ok(None)
            };
            return (r, buf.len());
        };
        if i > MAX_LINE {
            return (Err(Error::LineTooLong), pos + i + 1);
        }
        let line = &rest[..=i];
        pos += i + 1;
        match spec_literal(line) {
            Some(n) if n > max_literal => return (Err(Error::LiteralTooLarge(n)), pos),
            Some(n) => {
                if ((buf.len() - pos) as u64) < n {
                    return (Ok(None), buf.len());
                }
                pos += n as usize;
            }
            None => return (Ok(Some(pos)), pos),
        }
    }
}

fn check_text(frame: &[u8], t: &imap::Text<'_>) {
    assert!(within(frame, t.text.as_bytes()));
    assert_eq!(t.text, t.text.trim());
    assert!(!t.text.contains('\n'));
    if let Some(code) = t.code {
        assert!(within(frame, code.as_bytes()));
        assert!(!code.contains(']') && !code.contains('\n'));
    }
}

/// `parse` never panics; on success what it returns is cut from the frame by its grammar.
fn check_parse(frame: &[u8]) {
    let Ok(r) = imap::parse(frame) else { return };
    let first_end = frame
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(frame.len());
    let first = &frame[..first_end];
    match &r {
        Response::Continue(t) => {
            assert!(first.starts_with(b"+"));
            assert!(within(first, t.as_bytes()));
            assert_eq!(*t, t.trim());
        }
        Response::Tagged { tag, text, .. } => {
            assert!(*tag != "*" && !tag.contains(' '));
            assert!(first.starts_with(tag.as_bytes()));
            assert_eq!(first.get(tag.len()), Some(&b' '));
            check_text(first, text);
        }
        Response::Untagged(u) => {
            assert!(first.starts_with(b"* "));
            match u {
                Untagged::Status(_, text) => check_text(first, text),
                Untagged::Capability(caps) => {
                    for c in caps {
                        assert!(within(first, c.as_bytes()));
                        assert!(!c.is_empty() && !c.contains(char::is_whitespace));
                    }
                }
                Untagged::Fetch(_, f) => {
                    for flag in f.flags.iter().flatten() {
                        assert!(within(frame, flag.as_bytes()));
                        assert!(!flag.is_empty() && !flag.contains(char::is_whitespace));
                    }
                    if let Some(d) = f.internal_date {
                        assert!(within(frame, d.as_bytes()));
                        let _ = internal_date(d);
                    }
                    if let Some(st) = f.structure {
                        assert!(within(frame, st));
                        // Bounded whatever the bytes: parts kept, depth (no stack overflow).
                        if let Ok(parts) = imap::structure::parts(st) {
                            assert!(!parts.is_empty());
                            assert!(parts.len() <= imap::structure::MAX_PARTS);
                        }
                    }
                    if let Some((name, body)) = f.body {
                        assert!(within(frame, name.as_bytes()));
                        assert!(within(frame, body));
                        let up = name.to_ascii_uppercase();
                        assert!(
                            up.starts_with("BODY[")
                                || up.starts_with("BINARY[")
                                || up.starts_with("RFC822")
                        );
                    }
                }
                _ => {}
            }
        }
    }
    // Only a FETCH reads past the first line: anything else parses the same from it.
    if !matches!(r, Response::Untagged(Untagged::Fetch(..))) {
        let line = &frame[..(first_end + 1).min(frame.len())];
        assert_eq!(imap::parse(line).as_ref(), Ok(&r));
    }
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

fn secs(t: std::time::SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

fn check_dates(f: [u8; 10], data: &[u8]) {
    // A date built from fields reads as the time computed from them.
    let day = 1 + i64::from(f[0] % 28);
    let month = i64::from(f[1] % 12) + 1;
    let year = 1970 + i64::from(u16::from_le_bytes([f[2], f[3]]) % 8030);
    let (h, mi, s) = (
        i64::from(f[4] % 24),
        i64::from(f[5] % 60),
        i64::from(f[6] % 60),
    );
    let (oh, om) = (i64::from(f[7] % 24), i64::from(f[8] % 60));
    let west = f[9] & 1 == 1;
    let day_s = if day < 10 && f[9] & 2 == 2 {
        format!(" {day}")
    } else {
        format!("{day:02}")
    };
    let date = format!(
        "{day_s}-{}-{year:04} {h:02}:{mi:02}:{s:02} {}{oh:02}{om:02}",
        MONTHS[month as usize - 1],
        if west { '-' } else { '+' }
    );
    let offset = (oh * 3600 + om * 60) * if west { -1 } else { 1 };
    let want = days_from_civil(year, month, day) * 86400 + h * 3600 + mi * 60 + s - offset;
    let got = internal_date(&date).map(secs);
    assert_eq!(got, (want >= 0).then_some(want), "{date:?}");

    // Whatever it accepts reads the same written back in UTC.
    if let Some(t) = std::str::from_utf8(data).ok().and_then(internal_date) {
        let t = secs(t);
        let (y, m, d) = civil_from_days(t.div_euclid(86400));
        let r = t.rem_euclid(86400);
        if y <= 9999 {
            let back = format!(
                "{d:02}-{}-{y:04} {:02}:{:02}:{:02} +0000",
                MONTHS[m as usize - 1],
                r / 3600,
                r / 60 % 60,
                r % 60
            );
            assert_eq!(internal_date(&back).map(secs), Some(t), "{back:?}");
        }
    }
}

/// What `astring` writes is read back unchanged as the body of a FETCH response.
fn check_astring(s: &str) {
    let mut r = b"* 7 FETCH (UID 3 BODY[] ".to_vec();
    let at = r.len();
    astring(s, &mut r);
    let quoted = r[at] == b'"';
    if quoted {
        assert!(!r[at..].iter().any(|&b| b == b'\r' || b == b'\n'));
    }
    r.extend_from_slice(b")\r\n");
    let n = s.len() as u64;
    assert_eq!(Framer::new(n).frame(&r), Ok(Some(r.len())));
    if !quoted && n > 0 {
        assert_eq!(Framer::new(n - 1).frame(&r), Err(Error::LiteralTooLarge(n)));
    }
    match imap::parse(&r) {
        Ok(Response::Untagged(Untagged::Fetch(7, f))) => {
            assert_eq!(f.uid, Some(3));
            assert_eq!(f.body, Some(("BODY[]", s.as_bytes())));
        }
        other => panic!("{other:?} from {:?}", String::from_utf8_lossy(&r)),
    }
}

fuzz_target!(|input: (u8, u16, u16, [u8; 10], &[u8])| {
    let (sel, c1, c2, date, data) = input;
    let max_literal = match sel % 4 {
        0 => 0,
        1 => u64::from(sel),
        2 => 1 << 20,
        _ => u64::MAX,
    };

    for line in data.split_inclusive(|&b| b == b'\n').take(64) {
        assert_eq!(literal_at_end(line), spec_literal(line));
    }

    let (want, decided) = model(data, max_literal);
    let whole = Framer::new(max_literal).frame(data);
    assert_eq!(whole, want);

    // Fed in growing pieces, the framer answers each prefix as a fresh reading would.
    let mut cuts = if data.is_empty() {
        vec![]
    } else {
        vec![c1 as usize % data.len(), c2 as usize % data.len()]
    };
    cuts.sort_unstable();
    cuts.push(data.len());
    let mut f = Framer::new(max_literal);
    for &c in &cuts {
        let got = f.frame(&data[..c]);
        assert_eq!(got, model(&data[..c], max_literal).0, "prefix {c}");
        if got != Ok(None) {
            break;
        }
    }

    match whole {
        Ok(Some(n)) => {
            assert!(n >= 1 && n <= data.len());
            assert_eq!(data[n - 1], b'\n');
            let frame = &data[..n];
            assert_eq!(Framer::new(max_literal).frame(frame), Ok(Some(n)));
            let shorter = c1 as usize % n;
            assert_eq!(Framer::new(max_literal).frame(&data[..shorter]), Ok(None));
            check_parse(frame);
        }
        Err(Error::LiteralTooLarge(k)) => {
            assert!(k > max_literal);
            // Refused from its announcement alone: none of the literal is waited for.
            assert!(decided <= data.len());
            assert_eq!(
                Framer::new(max_literal).frame(&data[..decided]),
                Err(Error::LiteralTooLarge(k))
            );
        }
        _ => {}
    }
    // Whatever the bytes, parse does not panic and stays inside them.
    check_parse(data);

    check_dates(date, data);
    check_astring(&String::from_utf8_lossy(data));
});
