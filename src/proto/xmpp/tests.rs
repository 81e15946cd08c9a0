//! The framer against realistic C:/S: transcripts (whole, at every split point, one byte
//! at a time), its caps, and malformed streams; plus properties over random input.

use super::*;
use crate::proto::sasl::encode;
use proptest::prelude::*;

const HEADER_S: &str = "<stream:stream xmlns='jabber:client' \
    xmlns:stream='http://etherx.jabber.org/streams' from='example.test' version='1.0' \
    xml:lang='en' id=";

/// What a client receives: STARTTLS, SCRAM-SHA-1 (the RFC 5802 exchange), bind, and
/// traffic with escapes, keepalives and the stream's end.
fn server_transcript() -> String {
    let challenge =
        encode(b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096");
    let success = encode(b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=");
    [
        "<?xml version='1.0'?>\n",
        HEADER_S,
        "'s1'>",
        "<stream:features><starttls xmlns='urn:ietf:params:xml:ns:xmpp-tls'><required/>\
         </starttls><mechanisms xmlns='urn:ietf:params:xml:ns:xmpp-sasl'>\
         <mechanism>SCRAM-SHA-1</mechanism><mechanism>PLAIN</mechanism></mechanisms>\
         </stream:features>",
        "<proceed xmlns='urn:ietf:params:xml:ns:xmpp-tls'/>",
        // TLS, then the stream restarts.
        "<?xml version='1.0'?>",
        HEADER_S,
        "\"s2\">\n",
        "<stream:features><mechanisms xmlns='urn:ietf:params:xml:ns:xmpp-sasl'>\
         <mechanism>SCRAM-SHA-1</mechanism></mechanisms></stream:features>",
        &format!("<challenge xmlns='urn:ietf:params:xml:ns:xmpp-sasl'>{challenge}</challenge>"),
        &format!("<success xmlns='urn:ietf:params:xml:ns:xmpp-sasl'>{success}</success>"),
        HEADER_S,
        "'s3'>",
        "<stream:features><bind xmlns='urn:ietf:params:xml:ns:xmpp-bind'/></stream:features>",
        "<iq type='result' id='bind_1'><bind xmlns='urn:ietf:params:xml:ns:xmpp-bind'>\
         <jid>user@example.test/spate</jid></bind></iq>",
        "<presence from='user@example.test/spate' to='user@example.test/spate' \
         id='p>1' x=\"/>\"/>",
        " ",
        "<message from=\"b@example.test/x\" to='user@example.test/spate' type='chat' \
         id=\"a'b>/\"><body>x &lt;y&gt; &quot;z&quot; 1 > 0</body>\
         <delay xmlns='urn:xmpp:delay' stamp='2026-01-01T00:00:00Z'/></message>",
        "\r\n \t",
        "</stream:stream>",
        "\n",
    ]
    .concat()
}

/// What the server receives from that client.
fn client_transcript() -> String {
    let header = "<stream:stream to='example.test' xmlns='jabber:client' \
        xmlns:stream='http://etherx.jabber.org/streams' version='1.0'>";
    let first = encode(b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL");
    [
        "<?xml version='1.0'?>",
        header,
        "<starttls xmlns='urn:ietf:params:xml:ns:xmpp-tls'/>",
        header,
        &format!(
            "<auth xmlns='urn:ietf:params:xml:ns:xmpp-sasl' \
             mechanism='SCRAM-SHA-1'>{first}</auth>"
        ),
        "<response xmlns='urn:ietf:params:xml:ns:xmpp-sasl'>Yz1iaXdz</response>",
        "<?xml version='1.0'?>",
        header,
        "<iq type='set' id='bind_1'><bind xmlns='urn:ietf:params:xml:ns:xmpp-bind'>\
         <resource>spate</resource></bind></iq>",
        "<presence/>",
        " \n \t ",
        "<message to='b@example.test' id='m&amp;1' type='chat' data-x=\"a>b/c 'q'\">\
         <body>1 &lt; 2 &amp;&amp; 3 > 2 &#x263A; \
         <![CDATA[<not markup/> ]> </body> ]]]]></body></message>",
        "\n",
        "</stream:stream>",
    ]
    .concat()
}

/// After these elements the stream restarts (STARTTLS, SASL success), on either side.
fn restarts_after(frame: &[u8]) -> bool {
    let s = String::from_utf8_lossy(frame);
    let s = s.trim_start();
    ["<proceed", "<success", "<starttls", "<response"]
        .iter()
        .any(|p| s.starts_with(p))
}

type Frames = Vec<(Frame, Vec<u8>)>;

/// Feeds `chunks` in order as a session would, restarting where the protocol does.
fn run<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Result<Frames, FrameError> {
    let mut f = Framer::new(64 * 1024, 32);
    let mut buf = Vec::new();
    let mut out = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        while let Some((frame, n)) = f.frame(&buf)? {
            assert!(n > 0 && n <= buf.len());
            let bytes: Vec<u8> = buf.drain(..n).collect();
            if frame == Frame::Element && restarts_after(&bytes) {
                f.restart();
            }
            out.push((frame, bytes));
        }
        assert_eq!(f.scanned(), buf.len(), "every byte is scanned once");
    }
    Ok(out)
}

/// Folds whitespace frames into the frame after them: what one read of everything gives.
fn normalize(frames: Frames) -> Frames {
    let mut out = Vec::new();
    let mut pending = Vec::new();
    for (frame, bytes) in frames {
        if frame == Frame::Whitespace {
            assert!(bytes.iter().all(|b| b" \t\r\n".contains(b)), "{bytes:?}");
        }
        pending.extend_from_slice(&bytes);
        if frame != Frame::Whitespace {
            out.push((frame, std::mem::take(&mut pending)));
        }
    }
    if !pending.is_empty() {
        out.push((Frame::Whitespace, pending));
    }
    out
}

fn kinds(frames: &Frames) -> Vec<Frame> {
    frames.iter().map(|(f, _)| *f).collect()
}

#[test]
fn server_transcript_known_answer() {
    use Frame::{Close, Open, Whitespace};
    const E: Frame = Frame::Element;
    let t = server_transcript();
    let frames = run([t.as_bytes()]).unwrap();
    assert_eq!(
        kinds(&frames),
        [Open, E, E, Open, E, E, E, Open, E, E, E, E, Close, Whitespace]
    );
    let total: usize = frames.iter().map(|(_, b)| b.len()).sum();
    assert_eq!(total, t.len());
    let h = parse_header(&frames[3].1).unwrap();
    assert_eq!(h.id.as_deref(), Some("s2"));
    assert_eq!(h.from.as_deref(), Some("example.test"));
    assert_eq!(h.version.as_deref(), Some("1.0"));
    assert_eq!(h.ns.as_deref(), Some("jabber:client"));
    assert_eq!(h.to, None);

    let features = Element::parse(&frames[1].1).unwrap();
    assert_eq!(features.name, "stream:features");
    let mechs: Vec<_> = features
        .child("mechanisms")
        .unwrap()
        .children_named("mechanism")
        .map(|m| m.text.as_str())
        .collect();
    assert_eq!(mechs, ["SCRAM-SHA-1", "PLAIN"]);
    assert!(features
        .child("starttls")
        .unwrap()
        .child("required")
        .is_some());

    let challenge = Element::parse(&frames[5].1).unwrap();
    let decoded = crate::proto::sasl::decode(&challenge.text).unwrap();
    assert!(decoded.starts_with(b"r=fyko+"));

    let presence = Element::parse(&frames[10].1).unwrap();
    assert_eq!(presence.attr("id"), Some("p>1"));
    assert_eq!(presence.attr("x"), Some("/>"));
    let msg = Element::parse(&frames[11].1).unwrap();
    assert_eq!(msg.attr("id"), Some("a'b>/"));
    assert_eq!(msg.child("body").unwrap().text, "x <y> \"z\" 1 > 0");
    assert_eq!(msg.child("delay").unwrap().ns(), Some("urn:xmpp:delay"));
    assert_eq!(frames[12].1, b"\r\n \t</stream:stream>");
}

#[test]
fn client_transcript_known_answer() {
    use Frame::{Close, Open};
    const E: Frame = Frame::Element;
    let t = client_transcript();
    let frames = run([t.as_bytes()]).unwrap();
    assert_eq!(kinds(&frames), [Open, E, Open, E, E, Open, E, E, E, Close]);
    let h = parse_header(&frames[0].1).unwrap();
    assert_eq!(h.to.as_deref(), Some("example.test"));
    let auth = Element::parse(&frames[3].1).unwrap();
    assert_eq!(auth.attr("mechanism"), Some("SCRAM-SHA-1"));
    let bind = Element::parse(&frames[6].1).unwrap();
    let resource = bind.child("bind").and_then(|b| b.child("resource"));
    assert_eq!(resource.unwrap().text, "spate");
    let msg = Element::parse(&frames[8].1).unwrap();
    assert_eq!(msg.attr("id"), Some("m&1"));
    assert_eq!(msg.attr("data-x"), Some("a>b/c 'q'"));
    assert_eq!(
        msg.child("body").unwrap().text,
        "1 < 2 && 3 > 2 \u{263a} <not markup/> ]> </body> ]]"
    );
}

#[test]
fn every_split_point_gives_the_same_frames() {
    for t in [server_transcript(), client_transcript()] {
        let t = t.as_bytes();
        let whole = run([t]).unwrap();
        for i in 0..=t.len() {
            let split = run([&t[..i], &t[i..]]).unwrap();
            assert_eq!(normalize(split), whole, "split at {i}");
        }
        let bytewise = run(t.chunks(1)).unwrap();
        assert_eq!(normalize(bytewise), whole);
    }
}

/// After a header, a stanza of `n` bytes.
fn header_and_stanza(n: usize) -> (Vec<u8>, Vec<u8>) {
    let header = b"<stream:stream xmlns='jabber:client'>".to_vec();
    let (open, close) = ("<message><body>", "</body></message>");
    let mut stanza = open.as_bytes().to_vec();
    stanza.resize(n - close.len(), b'a');
    stanza.extend_from_slice(close.as_bytes());
    (header, stanza)
}

#[test]
fn stanza_size_is_capped_before_more_is_read() {
    const CAP: usize = 64 * 1024;
    let (header, stanza) = header_and_stanza(CAP);
    let mut f = Framer::new(CAP, 8);
    assert_eq!(f.frame(&header).unwrap(), Some((Frame::Open, header.len())));
    assert_eq!(f.frame(&stanza).unwrap(), Some((Frame::Element, CAP)));
    // One byte at a time: each call scans only the new byte.
    for end in 0..CAP {
        assert_eq!(f.frame(&stanza[..end]).unwrap(), None);
        assert_eq!(f.scanned(), end);
    }
    assert_eq!(f.frame(&stanza).unwrap(), Some((Frame::Element, CAP)));

    let (header, stanza) = header_and_stanza(CAP + 1);
    let mut f = Framer::new(CAP, 8);
    f.frame(&header).unwrap();
    let mut seen = 0;
    for end in (4096..=stanza.len()).step_by(4096) {
        seen = end;
        match f.frame(&stanza[..end]) {
            Ok(None) => assert!(end < CAP),
            Err(e) => {
                assert_eq!(e, FrameError::TooLarge(CAP));
                break;
            }
            Ok(Some(_)) => panic!("an oversized stanza was framed"),
        }
    }
    assert_eq!(seen, CAP, "refused as soon as the cap was reached");
    // Sticky until restart.
    assert_eq!(f.frame(&stanza), Err(FrameError::TooLarge(CAP)));
}

#[test]
fn nesting_is_capped_quickly() {
    let mut bytes = b"<stream:stream>".to_vec();
    for _ in 0..10_000 {
        bytes.extend_from_slice(b"<a>");
    }
    let mut f = Framer::new(1 << 20, 64);
    let mut buf = bytes.clone();
    let (_, n) = f.frame(&buf).unwrap().unwrap();
    buf.drain(..n);
    assert_eq!(f.frame(&buf), Err(FrameError::TooDeep(64)));
    assert!(f.scanned() <= 65 * 3, "stopped at the cap, not at the end");

    let mut deep = String::new();
    for _ in 0..MAX_PARSE_DEPTH + 1 {
        deep.push_str("<a>");
    }
    assert_eq!(Element::parse(deep.as_bytes()), Err(ParseError::TooDeep));
}

fn first_error(input: &str) -> FrameError {
    let mut f = Framer::new(4096, 16);
    let mut buf = input.as_bytes().to_vec();
    loop {
        match f.frame(&buf) {
            Ok(Some((_, n))) => {
                buf.drain(..n);
            }
            Ok(None) => panic!("no error in {input:?}"),
            Err(e) => return e,
        }
    }
}

#[test]
fn malformed_streams_are_refused() {
    let h = "<stream:stream xmlns='jabber:client'>";
    let cases = [
        (format!("{h}<!-- hi -->"), "comment"),
        (format!("{h}<message><!-- hi --></message>"), "comment"),
        (format!("{h}<?foo bar?>"), "processing instruction"),
        (
            format!("{h}<?xml version='1.0'?>"),
            "processing instruction",
        ),
        (
            "<?xml-stylesheet?><stream:stream>".into(),
            "processing instruction",
        ),
        (
            "<!DOCTYPE x [<!ENTITY a 'b'>]><stream:stream>".into(),
            "DTD",
        ),
        (format!("{h}<!DOCTYPE x>"), "DTD"),
        ("<stream:stream a='1' <x>".into(), "'<' inside a tag"),
        (format!("{h}<a><b></a></b>"), "mismatched end tag"),
        (format!("{h}</message>"), "end tag without a start tag"),
        (format!("{h}</stream:foo>"), "end tag without a start tag"),
        (
            format!("{h}hello"),
            "text outside any element, so the server does not speak XMPP here",
        ),
        (format!("{h}<![CDATA[x]]>"), "CDATA outside any element"),
        (format!("{h}<a b='<'/>"), "'<' in an attribute value"),
        (format!("{h}< a/>"), "bad character after '<'"),
        (format!("{h}<a/ >"), "'/' not followed by '>' in a tag"),
        (format!("{h}<a></a b>"), "junk in an end tag"),
        (format!("{h}<a><!x></a>"), "markup declaration"),
        (
            format!("{h}</stream:stream><a/>"),
            "data after the stream's end",
        ),
        ("<message/>".into(), "expected the stream header"),
        ("<stream:stream/>".into(), "the stream header is closed"),
        (
            "hello".into(),
            "text outside any element, so the server does not speak XMPP here",
        ),
    ];
    for (input, why) in cases {
        assert_eq!(first_error(&input), FrameError::Malformed(why), "{input}");
    }
}

#[test]
fn restart_clears_a_failure_and_a_short_buffer_rescans() {
    let mut f = Framer::new(4096, 16);
    assert!(f.frame(b"<!--").is_err());
    assert!(f.frame(b"<stream:stream>").is_err(), "errors are sticky");
    f.restart();
    assert_eq!(
        f.frame(b"<stream:stream>").unwrap(),
        Some((Frame::Open, 15))
    );
    // The caller broke the contract (a shorter buffer): no panic, a fresh scan.
    assert_eq!(f.frame(b"<message><bo").unwrap(), None);
    assert_eq!(f.frame(b"<a/>").unwrap(), Some((Frame::Element, 4)));
}

#[test]
fn whitespace_alone_is_a_frame_and_prefixes_fold() {
    let mut f = Framer::new(4096, 16);
    assert_eq!(f.frame(b"").unwrap(), None);
    assert_eq!(f.frame(b" \n").unwrap(), Some((Frame::Whitespace, 2)));
    assert_eq!(
        f.frame(b"<stream:stream>").unwrap(),
        Some((Frame::Open, 15))
    );
    assert_eq!(f.frame(b"  ").unwrap(), Some((Frame::Whitespace, 2)));
    assert_eq!(f.frame(b"  <a").unwrap(), None);
    assert_eq!(f.frame(b"  <a/> ").unwrap(), Some((Frame::Element, 6)));
    assert_eq!(Element::parse(b"  <a/>").unwrap().name, "a");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Random bytes, before or after a header, never panic and never frame past `buf`.
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400),
                                header in any::<bool>()) {
        let mut f = Framer::new(256, 8);
        let mut buf = Vec::new();
        if header {
            buf.extend_from_slice(b"<stream:stream>");
        }
        buf.extend_from_slice(&bytes);
        while let Ok(Some((_, n))) = f.frame(&buf) {
            prop_assert!(n > 0 && n <= buf.len());
            let frame: Vec<u8> = buf.drain(..n).collect();
            let _ = Element::parse(&frame);
            let _ = parse_header(&frame);
        }
        let _ = Element::parse(&bytes);
        let _ = parse_header(&bytes);
    }

    /// Near-valid input: the transcript with a few bytes changed.
    #[test]
    fn mutated_transcripts_never_panic(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)
    ) {
        let mut t = client_transcript().into_bytes();
        for (i, b) in edits {
            let i = i.index(t.len());
            t[i] = b;
        }
        let _ = run(t.chunks(7));
    }

    #[test]
    fn any_cuts_give_the_same_frames(
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8)
    ) {
        let t = server_transcript();
        let t = t.as_bytes();
        let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(t.len() + 1)).collect();
        cuts.sort_unstable();
        let mut chunks = Vec::new();
        let mut at = 0;
        for c in cuts {
            chunks.push(&t[at..c]);
            at = c;
        }
        chunks.push(&t[at..]);
        prop_assert_eq!(normalize(run(chunks).unwrap()), run([t]).unwrap());
    }
}

#[test]
fn a_namespace_resolves_through_its_prefix_on_the_element_or_its_parent() {
    let m = Element::parse(
        b"<message xmlns='jabber:client' xmlns:ns1='urn:x-spate:stamp:0'><ns1:stamp/>\
          <stamp xmlns='urn:x'/><body/><ns2:x xmlns:ns2='urn:y'/></message>",
    )
    .unwrap();
    let ns = |i: usize| m.children[i].namespace(&[&m]);
    assert_eq!(
        ns(0),
        Some("urn:x-spate:stamp:0"),
        "prefix declared on the parent"
    );
    assert_eq!(ns(1), Some("urn:x"), "its own default");
    assert_eq!(ns(2), Some("jabber:client"), "the parent's default");
    assert_eq!(ns(3), Some("urn:y"), "prefix declared on itself");
    assert_eq!(m.namespace(&[]), Some("jabber:client"));
}
