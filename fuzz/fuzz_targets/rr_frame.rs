//! The request/response framer (`proto::rr`) on bytes from either side. Beyond "no panic":
//! - however the bytes arrive (cut at two points), the framer answers what a
//!   whole-buffer reading answers, never a length past its input or over its cap;
//! - a frame is found the same from exactly its own bytes, and no shorter prefix is one;
//! - a message's body is never longer than its frame;
//! - any bytes framed as a request (len32, len16, HTTP, a line without line breaks) or as
//!   a response (len32, HTTP) are framed back whole, with the same body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spate::proto::rr::{encode_request, encode_response, Frame, Framer, HttpRequest};

const FRAMES: [Frame; 4] = [Frame::Line, Frame::Len32, Frame::Len16, Frame::Http];

fn framer(frame: Frame, request: bool, cap: usize) -> Framer {
    if request {
        Framer::request(frame, cap)
    } else {
        Framer::response(frame, cap, None, false)
    }
}

fn check_split(frame: Frame, request: bool, cap: usize, data: &[u8], c1: usize, c2: usize) {
    let mut f = framer(frame, request, cap);
    let whole = f.frame(data);
    if let Ok(Some(n)) = whole {
        assert!(n <= data.len() && n <= cap);
        assert!(f.message(data).body().len() <= n);
        let mut g = framer(frame, request, cap);
        assert_eq!(g.frame(&data[..n]), Ok(Some(n)));
        if n > 0 {
            let mut g = framer(frame, request, cap);
            assert_eq!(g.frame(&data[..c1 % n]), Ok(None));
        }
    }
    let mut cuts = if data.is_empty() {
        vec![]
    } else {
        vec![c1 % data.len(), c2 % data.len()]
    };
    cuts.sort_unstable();
    cuts.push(data.len());
    f.reset();
    for &c in &cuts {
        let got = f.frame(&data[..c]);
        if c == data.len() {
            assert_eq!(got, whole, "pieces {cuts:?}");
        }
        if got != Ok(None) {
            if c < data.len() {
                // Decided early: a whole reading decides the same.
                assert_eq!(got, whole, "prefix {c}");
            }
            break;
        }
    }
}

fn check_round_trip(body: &[u8]) {
    let http = HttpRequest::default();
    for frame in FRAMES {
        let mut wire = Vec::new();
        if encode_request(frame, &http, body, &mut wire).is_err() {
            continue;
        }
        let mut f = Framer::request(frame, 1 << 20);
        assert_eq!(f.frame(&wire), Ok(Some(wire.len())), "{frame:?}");
        assert_eq!(&*f.message(&wire).body(), body, "{frame:?}");
    }
    for frame in [Frame::Len32, Frame::Http] {
        let mut wire = Vec::new();
        encode_response(frame, 200, false, body, &mut wire);
        let mut f = Framer::response(frame, 1 << 20, None, false);
        assert_eq!(f.frame(&wire), Ok(Some(wire.len())), "{frame:?}");
        assert_eq!(&*f.message(&wire).body(), body, "{frame:?}");
    }
}

fuzz_target!(|input: (u8, u16, u16, &[u8])| {
    let (sel, c1, c2, data) = input;
    let frame = FRAMES[(sel & 3) as usize];
    let request = sel & 4 != 0;
    let cap = match (sel >> 3) & 3 {
        0 => 16,
        1 => 256,
        2 => 4096,
        _ => 1 << 20,
    };
    check_split(frame, request, cap, data, c1 as usize, c2 as usize);
    check_round_trip(data);
});
