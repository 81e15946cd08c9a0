//! The client's POP3 response framers and parsers on server bytes. Beyond "no panic":
//! - `line_frame` ends at the first LF, within its cap, and never past its input;
//! - `MultiFramer` answers each prefix of the bytes as a whole-buffer reading would,
//!   however they arrive (it keeps state between calls): one line for `-ERR`, else up to
//!   the first data line that is exactly "." (CRLF or LF), and the same from its own bytes;
//! - a framed `+OK` response is its status line, `data`, and the terminator, in that
//!   order, and no line of `data` is a terminator; unstuffing never lengthens it;
//! - any bytes dot-stuffed behind `+OK` frame exactly and unstuff back to themselves
//!   (line ends as CRLF);
//! - `status`, `stat`, `listing`, `capabilities`, `apop_timestamp` return pieces of their
//!   input that fit their grammar, and `stat` and `listing` round-trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spate::proto::dot;
use spate::proto::pop3_client::{
    apop_digest, apop_timestamp, capabilities, data as data_of, line_frame, listing, stat, status,
    Error, MultiFramer, MAX_LINE,
};

fn within(outer: &[u8], inner: &[u8]) -> bool {
    if inner.is_empty() {
        return true; // an empty piece may be a constant ""
    }
    let o = outer.as_ptr_range();
    let i = inner.as_ptr_range();
    i.start >= o.start && i.end <= o.end
}

fn is_terminator(line: &[u8]) -> bool {
    line == b".\r\n" || line == b".\n"
}

/// The multi-line framer's answer for a whole buffer read at once.
fn model(buf: &[u8]) -> Result<Option<usize>, Error> {
    let Some(first) = buf.iter().position(|&b| b == b'\n') else {
        return if buf.len() >= MAX_LINE {
            Err(Error::LineTooLong)
        } else {
            Ok(None)
        };
    };
    if first >= MAX_LINE {
        return Err(Error::LineTooLong);
    }
    if buf[0] == b'-' {
        return Ok(Some(first + 1));
    }
    let mut end = first + 1;
    for line in buf[first + 1..].split_inclusive(|&b| b == b'\n') {
        end += line.len();
        if is_terminator(line) {
            return Ok(Some(end));
        }
    }
    Ok(None)
}

/// The bytes `dot::stuff` carries: every LF not after a CR becomes CRLF, and a last line
/// gets its line end.
fn crlf(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, &b) in body.iter().enumerate() {
        if b == b'\n' && (i == 0 || body[i - 1] != b'\r') {
            out.push(b'\r');
        }
        out.push(b);
    }
    if !body.is_empty() && body.last() != Some(&b'\n') {
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn check_status(frame: &[u8]) {
    let Ok(st) = status(frame) else { return };
    let end = frame
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(frame.len());
    let line = &frame[..end];
    assert!(within(line, st.text.as_bytes()));
    assert_eq!(st.text, st.text.trim());
    let head: &[u8] = if st.ok { b"+OK" } else { b"-ERR" };
    assert!(line.len() >= head.len() && line[..head.len()].eq_ignore_ascii_case(head));
}

fn check_data_parsers(data: &[u8]) {
    let l: Vec<(u32, &str)> = listing(data).collect();
    for (_, v) in &l {
        assert!(within(data, v.as_bytes()));
        assert!(!v.is_empty() && *v == v.trim() && !v.contains('\n'));
    }
    let again: String = l.iter().map(|(n, v)| format!("{n} {v}\r\n")).collect();
    assert_eq!(listing(again.as_bytes()).collect::<Vec<_>>(), l);

    let caps = capabilities(data);
    assert!(caps.len() <= data.split(|&b| b == b'\n').count());
    for c in &caps {
        assert!(!c.is_empty() && !c.contains(char::is_whitespace));
        assert!(!c.bytes().any(|b| b.is_ascii_lowercase()));
    }
}

fuzz_target!(|input: (u16, u16, &[u8])| {
    let (c1, c2, data) = input;

    // The status-line framer.
    match line_frame(data) {
        Ok(Some(n)) => {
            assert!(n >= 1 && n <= data.len() && n <= MAX_LINE);
            assert_eq!(data[n - 1], b'\n');
            assert!(!data[..n - 1].contains(&b'\n'));
            assert_eq!(line_frame(&data[..n]), Ok(Some(n)));
        }
        Ok(None) => assert!(!data.contains(&b'\n') && data.len() < MAX_LINE),
        Err(_) => {}
    }

    // The multi-line framer, whole and in growing pieces.
    let whole = MultiFramer::new().frame(data);
    assert_eq!(whole, model(data));
    let mut cuts = if data.is_empty() {
        vec![]
    } else {
        vec![c1 as usize % data.len(), c2 as usize % data.len()]
    };
    cuts.sort_unstable();
    cuts.push(data.len());
    let mut f = MultiFramer::new();
    for &c in &cuts {
        let got = f.frame(&data[..c]);
        assert_eq!(got, model(&data[..c]), "prefix {c}");
        if got != Ok(None) {
            break;
        }
    }

    if let Ok(Some(n)) = whole {
        assert!(n >= 1 && n <= data.len());
        let frame = &data[..n];
        assert_eq!(MultiFramer::new().frame(frame), Ok(Some(n)));
        let first = line_frame(frame).unwrap().unwrap();
        check_status(frame);
        if frame[0] == b'-' {
            assert_eq!(n, first);
        } else {
            // Status line, data, terminator: nothing else, nothing twice.
            let d = data_of(frame);
            assert!(within(frame, d));
            assert_eq!(d.as_ptr(), frame[first..].as_ptr());
            let term = &frame[first + d.len()..];
            assert!(is_terminator(term), "{term:?}");
            assert!(!d.split_inclusive(|&b| b == b'\n').any(is_terminator));
            let mut out = Vec::new();
            dot::unstuff(d, &mut out);
            assert!(out.len() <= d.len());
            check_data_parsers(&out);
        }
    }

    // Any bytes, stuffed behind +OK, frame exactly and come back.
    let mut wire = b"+OK\r\n".to_vec();
    dot::stuff_into(data, &mut wire);
    let mut f = MultiFramer::new();
    let cut = 5 + c1 as usize % (wire.len() - 5);
    assert_eq!(f.frame(&wire[..cut]), Ok(None));
    assert_eq!(f.frame(&wire), Ok(Some(wire.len())));
    assert!(status(&wire).unwrap().ok);
    let mut out = Vec::new();
    dot::unstuff(data_of(&wire), &mut out);
    assert_eq!(out, crlf(data));

    // The parsers on whatever came, framed or not.
    check_status(data);
    let d = data_of(data);
    assert!(within(data, d));
    check_data_parsers(data);
    if let Ok(text) = std::str::from_utf8(data) {
        if let Some((n, size)) = stat(text) {
            assert_eq!(stat(&format!("{n} {size}")), Some((n, size)));
        }
        if let Some(ts) = apop_timestamp(text) {
            assert!(within(text.as_bytes(), ts.as_bytes()));
            assert!(ts.starts_with('<') && ts.ends_with('>') && ts.contains('@'));
            assert!(!ts[..ts.len() - 1].contains('>'));
            assert_eq!(
                text.find('<'),
                Some(ts.as_ptr() as usize - text.as_ptr() as usize)
            );
            let digest = apop_digest(ts, text);
            assert!(digest.len() == 32 && digest.bytes().all(|b| b"0123456789abcdef".contains(&b)));
        }
    }
});
