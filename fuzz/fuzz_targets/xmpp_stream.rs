//! The XMPP framer and element parser (`proto::xmpp`) on a stream from either side.
//! Beyond "no panic":
//! - fed as its contract says (the bytes from the frame's start, growing, cut at two
//!   points), the framer gives the same frames, of the same lengths, as when it is given
//!   each frame's whole bytes at once (whitespace that came alone, a keepalive, counted
//!   with the frame after it; the cap, which counts whitespace that came with a frame,
//!   may refuse one reading where the other still waits); a frame is never longer than
//!   its input or the cap;
//! - an error is sticky: every later call answers the same error;
//! - every element frame parses, or fails, the same twice; a parsed element's local name
//!   ends its name, and its namespace is one of its attributes' values;
//! - any text escaped with `escape` comes back unchanged as an attribute value and as an
//!   element's text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spate::proto::xmpp::{escape, Element, Frame, Framer};

/// The frames of `data` when the framer gets each frame's bytes whole.
fn whole(data: &[u8], cap: usize) -> Vec<Result<(Frame, usize), ()>> {
    let mut f = Framer::new(cap, 16);
    let mut out = Vec::new();
    let mut at = 0;
    while at < data.len() {
        match f.frame(&data[at..]) {
            Ok(Some((frame, n))) => {
                assert!(n > 0 && n <= data.len() - at && n <= cap);
                out.push(Ok((frame, n)));
                at += n;
            }
            Ok(None) => break,
            Err(e) => {
                assert_eq!(f.frame(&data[at..]), Err(e), "an error is sticky");
                out.push(Err(()));
                break;
            }
        }
    }
    out
}

/// The same frames, the bytes arriving in three pieces.
fn pieces(data: &[u8], cap: usize, c1: usize, c2: usize) -> Vec<Result<(Frame, usize), ()>> {
    let mut cuts = if data.is_empty() {
        vec![]
    } else {
        vec![c1 % data.len(), c2 % data.len()]
    };
    cuts.sort_unstable();
    cuts.push(data.len());
    let mut f = Framer::new(cap, 16);
    let (mut out, mut at) = (Vec::new(), 0);
    for &end in &cuts {
        loop {
            if at >= end {
                break;
            }
            match f.frame(&data[at..end]) {
                Ok(Some((frame, n))) => {
                    out.push(Ok((frame, n)));
                    at += n;
                }
                Ok(None) => break,
                Err(_) => {
                    out.push(Err(()));
                    return out;
                }
            }
        }
    }
    out
}

fn check_elements(data: &[u8], frames: &[Result<(Frame, usize), ()>]) {
    let mut at = 0;
    for f in frames {
        let Ok((frame, n)) = f else { break };
        let bytes = &data[at..at + n];
        at += n;
        if *frame != Frame::Element {
            continue;
        }
        let a = Element::parse(bytes);
        assert_eq!(a, Element::parse(bytes), "parsing is deterministic");
        if let Ok(e) = a {
            assert!(e.name.ends_with(e.local_name()), "{e:?}");
            if let Some(ns) = e.ns() {
                assert!(e.attrs.iter().any(|(_, v)| v == ns), "{e:?}");
            }
        }
    }
}

fn check_escape(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Characters XML 1.0 cannot carry at all, and line breaks and tabs that an attribute
    // value normalises, are not escape's to keep.
    if text.chars().any(|c| (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}') {
        return;
    }
    let mut doc = String::from("<a v='");
    escape(text, &mut doc);
    doc.push_str("'>");
    escape(text, &mut doc);
    doc.push_str("</a>");
    let e = Element::parse(doc.as_bytes()).expect("escaped text parses");
    assert_eq!(e.attr("v"), Some(text));
    assert_eq!(e.text, text);
}

/// Whitespace that came as a frame of its own (nothing else had arrived yet) folded
/// into the frame after it: the framer folds it itself when both are there. Whitespace
/// after the last frame is left out.
fn folded(frames: &[Result<(Frame, usize), ()>]) -> Vec<Result<(Frame, usize), ()>> {
    let (mut out, mut pending) = (Vec::new(), 0);
    for f in frames {
        match f {
            Ok((Frame::Whitespace, n)) => pending += n,
            Ok((frame, n)) => {
                out.push(Ok((*frame, n + pending)));
                pending = 0;
            }
            Err(()) => {
                out.push(Err(()));
                pending = 0;
            }
        }
    }
    // Whitespace at the end is no decision: alone it is a keepalive, and before an
    // element still incomplete the framer keeps it for that element.
    let _ = pending;
    out
}

/// The frames decided the same. One exception: the cap counts the whitespace that came
/// with a frame, so a frame just under the cap may be refused when its keepalive
/// whitespace came with it and not when that came alone; up to the first refusal on
/// either side, the frames are the same.
fn same_frames(a: &[Result<(Frame, usize), ()>], b: &[Result<(Frame, usize), ()>]) {
    let err = |v: &[Result<(Frame, usize), ()>]| v.iter().position(|f| f.is_err());
    match (err(a), err(b)) {
        (None, None) => assert_eq!(a, b),
        (ea, eb) => {
            let k = ea.unwrap_or(a.len()).min(eb.unwrap_or(b.len()));
            assert_eq!(&a[..k.min(a.len())], &b[..k.min(b.len())], "{a:?} {b:?}");
        }
    }
}

fuzz_target!(|input: (u8, u16, u16, &[u8])| {
    let (sel, c1, c2, data) = input;
    let cap = match sel & 3 {
        0 => 64,
        1 => 512,
        2 => 4096,
        _ => 1 << 16,
    };
    let frames = whole(data, cap);
    same_frames(
        &folded(&pieces(data, cap, c1 as usize, c2 as usize)),
        &folded(&frames),
    );
    check_elements(data, &frames);
    check_escape(data);
});
