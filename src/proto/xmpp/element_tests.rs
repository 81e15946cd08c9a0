//! Element parsing and writing, stream headers, escaping and the negotiation builders.

use super::*;
use proptest::prelude::*;

/// Frames `s` (after a header, unless it is one) and checks it is exactly one frame.
fn framed(s: &str, open: bool) -> Frame {
    let mut f = Framer::new(1 << 20, 16);
    if !open {
        f.frame(b"<stream:stream>").unwrap();
    }
    let (frame, n) = f.frame(s.as_bytes()).unwrap().unwrap();
    assert_eq!(n, s.len(), "{s}");
    frame
}

fn el(s: &str) -> Element {
    assert_eq!(framed(s, false), Frame::Element);
    Element::parse(s.as_bytes()).unwrap()
}

#[test]
fn accessors() {
    let e = el(
        "<stream:features xmlns:stream='http://etherx.jabber.org/streams'>\
        <mechanisms xmlns='urn:ietf:params:xml:ns:xmpp-sasl'><mechanism>PLAIN</mechanism>\
        <mechanism>SCRAM-SHA-1</mechanism></mechanisms><x:bind xmlns:x='b'/></stream:features>",
    );
    assert_eq!(e.local_name(), "features");
    assert_eq!(e.ns(), None);
    let m = e.child("mechanisms").unwrap();
    assert_eq!(m.ns(), Some("urn:ietf:params:xml:ns:xmpp-sasl"));
    assert_eq!(m.children_named("mechanism").count(), 2);
    assert_eq!(e.child("bind").unwrap().name, "x:bind");
    assert_eq!(e.child("bind").unwrap().attr("xmlns:x"), Some("b"));
    assert!(e.child("starttls").is_none());
}

#[test]
fn text_and_attribute_unescaping() {
    let e = el("<m a='&lt;&amp;&#x41;&#66;\"' b=\"x\ty\nz\"> a &amp; b\r\n<c/>&#13;</m>");
    assert_eq!(e.attr("a"), Some("<&AB\""));
    assert_eq!(
        e.attr("b"),
        Some("x y z"),
        "attribute values are normalised"
    );
    assert_eq!(e.text, " a & b\n\r", "raw CR LF is a newline, &#13; stays");
    assert_eq!(e.children.len(), 1);
}

#[test]
fn parse_refuses_what_is_not_one_element() {
    for bad in [
        &b"<a/><b/>"[..],
        b"x<a/>",
        b"<a/>x",
        b"<a>&foo;</a>",
        b"<a>&#0;</a>",
        b"<a>\xff</a>",
        b"<a><!--x--></a>",
        b"<a>",
        b"<a></b>",
        b"",
        b"   ",
        b"<a b='1' b='2'/>",
        b"<?xml version='1.0'?><a/>",
    ] {
        assert!(
            Element::parse(bad).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn headers() {
    let h = parse_header(
        b"<?xml version='1.0'?>\n <s:stream xmlns='jabber:server' to='a&amp;b' id='x'>",
    )
    .unwrap();
    assert_eq!(h.ns.as_deref(), Some("jabber:server"));
    assert_eq!(h.to.as_deref(), Some("a&b"));
    assert_eq!(h.id.as_deref(), Some("x"));
    assert_eq!(h.from, None);
    assert!(parse_header(b"<message>").is_err());
    assert!(parse_header(b"<stream:stream/>").is_err());
    assert!(parse_header(b"hello").is_err());
    assert!(parse_header(b"").is_err());
}

#[test]
fn escaping() {
    let mut s = String::new();
    escape("a&<>\"'\r\n\t\u{1}\u{ffff}b\u{263a}", &mut s);
    assert_eq!(
        s,
        "a&amp;&lt;&gt;&quot;&apos;&#13;\n\t\u{fffd}\u{fffd}b\u{263a}"
    );
}

#[test]
fn builders_frame_and_parse() {
    let open = stream_open_client("ex'ample.test");
    assert_eq!(framed(&open, true), Frame::Open);
    let h = parse_header(open.as_bytes()).unwrap();
    assert_eq!(h.to.as_deref(), Some("ex'ample.test"));
    assert_eq!(h.ns.as_deref(), Some(NS_CLIENT));
    assert_eq!(h.version.as_deref(), Some("1.0"));

    let open = stream_open_server("example.test", "id<1>");
    assert_eq!(framed(&open, true), Frame::Open);
    let h = parse_header(open.as_bytes()).unwrap();
    assert_eq!(
        (h.from.as_deref(), h.id.as_deref()),
        (Some("example.test"), Some("id<1>"))
    );

    let f = el(&features(true, &["SCRAM-SHA-1", "PLAIN"], false));
    assert_eq!(f.child("starttls").unwrap().ns(), Some(NS_TLS));
    assert_eq!(f.child("mechanisms").unwrap().children.len(), 2);
    assert!(f.child("bind").is_none());
    let f = el(&features(false, &[], true));
    assert_eq!(f.children.len(), 1);
    assert_eq!(f.child("bind").unwrap().ns(), Some(NS_BIND));

    assert_eq!(
        starttls(),
        "<starttls xmlns='urn:ietf:params:xml:ns:xmpp-tls'/>"
    );
    assert_eq!(el(&proceed()).local_name(), "proceed");
    let a = el(&auth("PLAIN", "AHVzZXIAcGVuY2ls"));
    assert_eq!(
        (a.attr("mechanism"), a.text.as_str(), a.ns()),
        (Some("PLAIN"), "AHVzZXIAcGVuY2ls", Some(NS_SASL))
    );
    assert_eq!(
        auth("SCRAM-SHA-1", ""),
        "<auth xmlns='urn:ietf:params:xml:ns:xmpp-sasl' mechanism='SCRAM-SHA-1'/>"
    );
    assert_eq!(el(&challenge("cj1h")).text, "cj1h");
    assert_eq!(el(&response("Yz1i")).text, "Yz1i");
    assert_eq!(el(&success("")).text, "");
    assert!(el(&failure("not-authorized"))
        .child("not-authorized")
        .is_some());
    assert!(el(&stream_error("conflict")).child("conflict").is_some());

    let b = el(&bind("bind_1", "spate/1"));
    assert_eq!(
        (b.attr("type"), b.attr("id")),
        (Some("set"), Some("bind_1"))
    );
    assert_eq!(
        b.child("bind").unwrap().child("resource").unwrap().text,
        "spate/1"
    );
    assert!(el(&bind("b", ""))
        .child("bind")
        .unwrap()
        .children
        .is_empty());
    let r = el(&bind_result("bind_1", "u@h/r"));
    assert_eq!(r.child("bind").unwrap().child("jid").unwrap().text, "u@h/r");
    assert_eq!(
        el(&session("s")).child("session").unwrap().ns(),
        Some(NS_SESSION)
    );
    assert_eq!(
        el(&roster_get("r")).child("query").unwrap().ns(),
        Some(NS_ROSTER)
    );
    assert_eq!(iq_result("p1", ""), "<iq type='result' id='p1'/>");
    assert_eq!(el(&iq_result("p1", "a@b/c")).attr("to"), Some("a@b/c"));
    let e = el(&iq_error("q", "a@b", "cancel", "service-unavailable"));
    let err = e.child("error").unwrap();
    assert_eq!(err.attr("type"), Some("cancel"));
    assert_eq!(
        err.child("service-unavailable").unwrap().ns(),
        Some(NS_STANZA_ERRORS)
    );
    assert_eq!(framed(STREAM_CLOSE, false), Frame::Close);
}

/// Characters XML 1.0 allows.
const XML_TEXT: &str = "[^\u{0}-\u{8}\u{b}\u{c}\u{e}-\u{1f}\u{fffe}\u{ffff}]{0,12}";

fn element() -> impl Strategy<Value = Element> {
    let name = "[a-z_][a-z0-9._-]{0,5}(:[a-z][a-z0-9]{0,3})?";
    let attrs = proptest::collection::btree_map("[a-z][a-z0-9]{0,5}", XML_TEXT, 0..4);
    let leaf = (name, attrs.clone(), XML_TEXT).prop_map(|(name, attrs, text)| Element {
        name,
        attrs: attrs.into_iter().collect(),
        children: Vec::new(),
        text,
    });
    leaf.prop_recursive(4, 32, 4, move |inner| {
        (
            name,
            attrs.clone(),
            proptest::collection::vec(inner, 0..4),
            XML_TEXT,
        )
            .prop_map(|(name, attrs, children, text)| Element {
                name,
                attrs: attrs.into_iter().collect(),
                children,
                text,
            })
    })
}

proptest! {
    #[test]
    fn write_then_parse_round_trips(e in element()) {
        let mut s = String::new();
        e.write(&mut s);
        prop_assert_eq!(framed(&s, false), Frame::Element);
        prop_assert_eq!(Element::parse(s.as_bytes()).unwrap(), e);
    }
}
