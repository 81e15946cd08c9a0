use proptest::prelude::*;
use regex::bytes::Regex;

use super::*;

const MAX: usize = 1 << 20;

fn whole(f: &mut Framer, b: &[u8]) -> Result<Option<usize>, Error> {
    f.reset();
    f.frame(b)
}

/// Feeds `b` in pieces cut at `cuts`, as a connection would; the answer at the end.
fn in_pieces(f: &mut Framer, b: &[u8], cuts: &[usize]) -> Result<Option<usize>, Error> {
    f.reset();
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (b.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.push(b.len());
    for c in cuts {
        match f.frame(&b[..c]) {
            Ok(None) => continue,
            other => return other,
        }
    }
    Ok(None)
}

fn http() -> Framer {
    Framer::response(Frame::Http, MAX, None, false)
}

#[test]
fn line_one_and_until() {
    let mut f = Framer::response(Frame::Line, MAX, None, false);
    assert_eq!(whole(&mut f, b"ALLOW alice\r\nnext"), Ok(Some(13)));
    let m = f.message(b"ALLOW alice\r\nnext");
    assert_eq!(m.first_line, b"ALLOW alice");
    assert_eq!(&*m.body(), b"ALLOW alice");
    assert_eq!(whole(&mut f, b"partial"), Ok(None));
    let until = Regex::new("^(OK|ERR)").unwrap();
    let mut f = Framer::response(Frame::Line, MAX, Some(until), false);
    let r = b"item 1\nitem 2\r\nOK done\r\nafter";
    assert_eq!(whole(&mut f, r), Ok(Some(24)));
    assert_eq!(&*f.message(r).body(), b"item 1\nitem 2\nOK done");
    assert_eq!(f.message(r).first_line, b"item 1");
    assert_eq!(whole(&mut f, b"item 1\nitem 2\n"), Ok(None));
}

#[test]
fn line_cap() {
    let mut f = Framer::response(Frame::Line, 8, None, false);
    assert_eq!(whole(&mut f, b"123456789"), Err(Error::TooLong(8)));
    assert_eq!(whole(&mut f, b"1234567890\n"), Err(Error::TooLong(8)));
    assert_eq!(whole(&mut f, b"123456\n"), Ok(Some(7)));
}

#[test]
fn length_prefixes() {
    let mut f = Framer::response(Frame::Len32, MAX, None, false);
    assert_eq!(whole(&mut f, b"\0\0\0\x03abcd"), Ok(Some(7)));
    assert_eq!(&*f.message(b"\0\0\0\x03abcd").body(), b"abc");
    assert_eq!(whole(&mut f, b"\0\0\0\x03ab"), Ok(None));
    assert_eq!(whole(&mut f, b"\0\0"), Ok(None));
    // 4 GiB announced: refused from the prefix alone.
    assert_eq!(
        whole(&mut f, b"\xff\xff\xff\xff"),
        Err(Error::LengthOverCap(u32::MAX as u64, MAX))
    );
    let mut f = Framer::response(Frame::Len16, 100, None, false);
    assert_eq!(whole(&mut f, b"\0\x02hi"), Ok(Some(4)));
    assert_eq!(
        whole(&mut f, b"\x01\x00"),
        Err(Error::LengthOverCap(256, 100))
    );
    let mut out = Vec::new();
    encode_request(Frame::Len16, &HttpRequest::default(), b"hi", &mut out).unwrap();
    assert_eq!(out, b"\0\x02hi");
    let big = vec![0u8; 70_000];
    assert!(encode_request(Frame::Len16, &HttpRequest::default(), &big, &mut out).is_err());
    assert_eq!(
        encode_request(Frame::Line, &HttpRequest::default(), b"a\nb", &mut out),
        Err(EncodeError::LineBreak)
    );
}

#[test]
fn http_content_length_and_close() {
    let r = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhelloXX";
    let mut f = http();
    assert_eq!(whole(&mut f, r), Ok(Some(r.len() - 2)));
    let m = f.message(r);
    assert_eq!(m.status, Some(200));
    assert!(m.close);
    assert_eq!(&*m.body(), b"hello");
    assert_eq!(m.first_line, b"HTTP/1.1 200 OK");
    let r10 = b"HTTP/1.0 403 Forbidden\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(whole(&mut f, r10), Ok(Some(r10.len())));
    assert!(f.message(r10).close, "HTTP/1.0 closes by default");
    let r = b"HTTP/1.1 204 No Content\r\n\r\n";
    assert_eq!(whole(&mut f, r), Ok(Some(r.len())));
    let r = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    assert_eq!(whole(&mut f, r), Ok(Some(r.len())));
    assert_eq!(f.message(r).status, Some(200));
    assert_eq!(f.message(r).first_line, b"HTTP/1.1 200 OK");
}

#[test]
fn http_chunked() {
    let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n";
    let mut f = http();
    assert_eq!(whole(&mut f, r), Ok(Some(r.len())));
    assert_eq!(&*f.message(r).body(), b"hello world");
    let bad = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n";
    assert_eq!(
        whole(&mut f, bad),
        Err(Error::BadChunk("chunk data not followed by CRLF"))
    );
    let bad = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
    assert_eq!(whole(&mut f, bad), Err(Error::BadChunk("bad chunk size")));
    let big = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffff\r\n";
    assert!(matches!(whole(&mut f, big), Err(Error::ChunkOverCap(..))));
    let mut long = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    long.extend(std::iter::repeat_n(b'1', 2000));
    assert!(matches!(whole(&mut f, &long), Err(Error::BadChunk(_))));
}

#[test]
fn http_hostile_heads() {
    let mut f = http();
    let mut never = b"HTTP/1.1 200 OK\r\nX-Long: ".to_vec();
    never.extend(std::iter::repeat_n(b'a', MAX_HEAD + 10));
    assert_eq!(whole(&mut f, &never), Err(Error::HeadTooLong(MAX_HEAD)));
    let r = b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n";
    assert!(matches!(
        whole(&mut f, r),
        Err(Error::ContentLengthOverCap(..))
    ));
    let r = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n";
    assert!(matches!(whole(&mut f, r), Err(Error::BadContentLength(_))));
    let r = b"SMTP 220 hello\r\n\r\n";
    assert!(matches!(whole(&mut f, r), Err(Error::BadStartLine(_))));
    let r = b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n";
    assert!(matches!(whole(&mut f, r), Err(Error::BadHeader(_))));
}

#[test]
fn http_requests_round_trip() {
    let req = HttpRequest {
        method: "POST".into(),
        path: "/authz".into(),
        host: "127.0.0.1".into(),
        headers: vec!["X-Client: spate".into()],
    };
    let mut out = Vec::new();
    encode_request(Frame::Http, &req, b"user=7", &mut out).unwrap();
    assert!(out.starts_with(b"POST /authz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Client: spate\r\n"));
    let mut f = Framer::request(Frame::Http, MAX);
    assert_eq!(f.frame(&out), Ok(Some(out.len())));
    assert_eq!(&*f.message(&out).body(), b"user=7");
    let mut resp = Vec::new();
    encode_response(Frame::Http, 200, true, b"ALLOW", &mut resp);
    let mut f = http();
    assert_eq!(f.frame(&resp), Ok(Some(resp.len())));
    assert!(f.message(&resp).close);
    assert_eq!(&*f.message(&resp).body(), b"ALLOW");
}

fn valid_http() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(prop::collection::vec(any::<u8>(), 1..20), 0..5),
        any::<bool>(),
    )
        .prop_map(|(chunks, chunked)| {
            let body: Vec<u8> = chunks.concat();
            let mut r = b"HTTP/1.1 200 OK\r\nServer: t\r\n".to_vec();
            if chunked {
                r.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
                for c in &chunks {
                    r.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
                    r.extend_from_slice(c);
                    r.extend_from_slice(b"\r\n");
                }
                r.extend_from_slice(b"0\r\n\r\n");
            } else {
                r.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
                r.extend_from_slice(&body);
            }
            r
        })
}

proptest! {
    /// However the bytes arrive, the framer decides what a whole reading decides.
    #[test]
    fn every_split_frames_the_same(
        r in valid_http(), cuts in prop::collection::vec(any::<usize>(), 0..6)
    ) {
        let mut f = http();
        let want = whole(&mut f, &r);
        prop_assert_eq!(want.clone(), Ok(Some(r.len())));
        let body = f.message(&r).body().into_owned();
        prop_assert_eq!(in_pieces(&mut f, &r, &cuts), want);
        prop_assert_eq!(f.message(&r).body().into_owned(), body);
    }

    #[test]
    fn every_split_of_prefixed_and_lines(
        body in prop::collection::vec(any::<u8>(), 0..300),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let mut r = Vec::new();
        encode_request(Frame::Len32, &HttpRequest::default(), &body, &mut r).unwrap();
        let mut f = Framer::response(Frame::Len32, MAX, None, false);
        prop_assert_eq!(in_pieces(&mut f, &r, &cuts), Ok(Some(r.len())));
        prop_assert_eq!(&*f.message(&r).body(), &body[..]);
        let line: Vec<u8> = body.iter().map(|&b| if b == b'\n' || b == b'\r' { b'.' } else { b }).collect();
        let mut r = Vec::new();
        encode_request(Frame::Line, &HttpRequest::default(), &line, &mut r).unwrap();
        let mut f = Framer::response(Frame::Line, MAX, None, false);
        prop_assert_eq!(in_pieces(&mut f, &r, &cuts), Ok(Some(r.len())));
        prop_assert_eq!(&*f.message(&r).body(), &line[..]);
    }

    /// Arbitrary bytes: no panic, never a length past the input, nothing over the cap.
    #[test]
    fn garbage_is_bounded(data in prop::collection::vec(any::<u8>(), 0..400), cap in 1usize..300) {
        for frame in [Frame::Line, Frame::Len32, Frame::Len16, Frame::Http] {
            let mut f = Framer::response(frame, cap, None, false);
            if let Ok(Some(n)) = f.frame(&data) {
                prop_assert!(n <= data.len() && n <= cap);
                let _ = f.message(&data).body();
            }
            let mut f = Framer::request(frame, cap);
            if let Ok(Some(n)) = f.frame(&data) {
                prop_assert!(n <= data.len() && n <= cap);
            }
        }
    }
}

/// HTTP/1.0 style: no Content-Length, not chunked: the body runs until the server closes
/// the connection, which makes the response whole; a response with a length that the
/// close cuts short stays cut off.
#[test]
fn a_response_without_a_length_ends_at_the_close() {
    let mut f = http();
    let r = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nPermit all\nmore";
    assert_eq!(whole(&mut f, r), Ok(None), "more may come until the close");
    assert_eq!(f.at_close(r), Some(r.len()));
    let m = f.message(r);
    assert_eq!((m.status, m.close), (Some(200), true));
    assert_eq!(
        m.body(),
        std::borrow::Cow::Borrowed(&b"Permit all\nmore"[..])
    );
    let cut = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc";
    assert_eq!(whole(&mut f, cut), Ok(None));
    assert_eq!(f.at_close(cut), None);
    let head_only = b"HTTP/1.0 200 OK\r\n";
    f.reset();
    assert_eq!(f.at_close(head_only), None, "a head the close cut short");
}
