//! One framed element as a small tree (names as written, attributes and text unescaped),
//! the stream header's attributes, and escaping for what spate writes.
//!
//! quick-xml tokenizes the element: the framer has already delimited and capped it, so a
//! complete-buffer reader is enough. Namespaces are not resolved: an element carries its
//! `xmlns` as an attribute, which is all a load client needs (XMPP streams put each
//! extension's namespace on the element that uses it).

use quick_xml::escape::resolve_predefined_entity;
use quick_xml::events::{BytesRef, BytesStart, Event};
use quick_xml::{Reader, XmlVersion};

use super::frame::is_space;

/// How deep [`Element::parse`] nests before it refuses: the tree is dropped, compared and
/// written recursively, so it must stay shallow. A [`super::Framer`]'s `max_depth`
/// should not be above this.
pub const MAX_PARSE_DEPTH: usize = 1024;

/// Why a framed element (or header) could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("XMPP element is not UTF-8")]
    Utf8,
    #[error("malformed XML: {0}")]
    Xml(String),
    #[error("malformed XMPP element ({0})")]
    Malformed(&'static str),
    #[error("XMPP element nested deeper than {MAX_PARSE_DEPTH}")]
    TooDeep,
}

impl From<quick_xml::Error> for ParseError {
    fn from(e: quick_xml::Error) -> Self {
        ParseError::Xml(e.to_string())
    }
}

/// One XML element.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Element {
    /// The name as written, with its prefix (`stream:features`).
    pub name: String,
    /// Attributes in document order, values unescaped; `xmlns` declarations included.
    pub attrs: Vec<(String, String)>,
    pub children: Vec<Element>,
    /// The element's own character data (not its children's), unescaped and concatenated,
    /// whitespace included.
    pub text: String,
}

impl Element {
    /// Parses one complete element as framed: whitespace around it is allowed, anything
    /// else (a second element, text, comments, PIs, a DTD) is refused.
    pub fn parse(bytes: &[u8]) -> Result<Element, ParseError> {
        let text = std::str::from_utf8(bytes).map_err(|_| ParseError::Utf8)?;
        let mut reader = Reader::from_str(text);
        let mut stack: Vec<Element> = Vec::new();
        let mut root = None;
        loop {
            let done = match reader.read_event()? {
                Event::Start(s) => {
                    if root.is_some() {
                        return Err(ParseError::Malformed("more than one element"));
                    }
                    if stack.len() >= MAX_PARSE_DEPTH {
                        return Err(ParseError::TooDeep);
                    }
                    stack.push(start(&s)?);
                    None
                }
                Event::Empty(s) => Some(start(&s)?),
                Event::End(_) => Some(stack.pop().ok_or(ParseError::Malformed("stray end tag"))?),
                Event::Text(t) => {
                    push_text(&mut stack, &t.xml10_content())?;
                    None
                }
                Event::CData(t) => {
                    push_text(&mut stack, &t.xml10_content())?;
                    None
                }
                Event::GeneralRef(r) => {
                    push_text(&mut stack, &reference(&r)?)?;
                    None
                }
                Event::Eof => break,
                Event::Comment(_) => return Err(ParseError::Malformed("comment")),
                Event::Decl(_) | Event::PI(_) => {
                    return Err(ParseError::Malformed("processing instruction"))
                }
                Event::DocType(_) => return Err(ParseError::Malformed("DTD")),
            };
            if let Some(e) = done {
                match stack.last_mut() {
                    Some(parent) => parent.children.push(e),
                    None if root.is_none() => root = Some(e),
                    None => return Err(ParseError::Malformed("more than one element")),
                }
            }
        }
        if !stack.is_empty() {
            return Err(ParseError::Malformed("element not closed"));
        }
        root.ok_or(ParseError::Malformed("no element"))
    }

    /// The name without its prefix.
    pub fn local_name(&self) -> &str {
        local(&self.name)
    }

    /// An attribute's value, by its name as written (`xml:lang`, `type`).
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The element's default namespace declaration (`xmlns`), if it has one.
    pub fn ns(&self) -> Option<&str> {
        self.attr("xmlns")
    }

    /// The element's namespace as XML Namespaces resolves it: the declaration of its
    /// prefix (`xmlns:p` for `p:name`), or the default one (`xmlns`), on the element or
    /// else on the nearest of `outer` (its ancestors, outermost first) that declares it.
    pub fn namespace<'a>(&'a self, outer: &[&'a Element]) -> Option<&'a str> {
        let key = match self.name.split_once(':') {
            Some((prefix, _)) => format!("xmlns:{prefix}"),
            None => "xmlns".to_string(),
        };
        std::iter::once(self)
            .chain(outer.iter().rev().copied())
            .find_map(|e| e.attr(&key))
    }

    /// The first child with this local name.
    pub fn child(&self, local: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.local_name() == local)
    }

    /// The children with this local name, in order.
    pub fn children_named<'a>(&'a self, local: &'a str) -> impl Iterator<Item = &'a Element> {
        self.children
            .iter()
            .filter(move |c| c.local_name() == local)
    }

    /// Serialises the element. Text and attribute values are escaped so that
    /// `Element::parse` gives the same element back (carriage returns, and tabs and
    /// newlines in attribute values, as character references, which XML does not
    /// normalise). Names are written as they are.
    pub fn write(&self, out: &mut String) {
        out.push('<');
        out.push_str(&self.name);
        for (k, v) in &self.attrs {
            out.push(' ');
            out.push_str(k);
            out.push_str("='");
            escape_with(v, out, true);
            out.push('\'');
        }
        if self.children.is_empty() && self.text.is_empty() {
            out.push_str("/>");
            return;
        }
        out.push('>');
        escape_with(&self.text, out, false);
        for c in &self.children {
            c.write(out);
        }
        out.push_str("</");
        out.push_str(&self.name);
        out.push('>');
    }
}

/// The attributes of a stream header that a session looks at.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamHeader {
    pub from: Option<String>,
    pub to: Option<String>,
    pub id: Option<String>,
    pub version: Option<String>,
    /// The default namespace (`jabber:client`).
    pub ns: Option<String>,
}

/// Parses the bytes of a [`super::Frame::Open`]: an optional XML declaration, then the
/// `<…:stream …>` open tag.
pub fn parse_header(bytes: &[u8]) -> Result<StreamHeader, ParseError> {
    let text = std::str::from_utf8(bytes).map_err(|_| ParseError::Utf8)?;
    let mut reader = Reader::from_str(text);
    let mut decl = false;
    loop {
        match reader.read_event()? {
            Event::Decl(_) if !decl => decl = true,
            Event::Text(t) if t.bytes().all(is_space) => {}
            // The stream's open tag, or RFC 7395's <open/> (XMPP over WebSocket).
            ev @ (Event::Start(_) | Event::Empty(_)) => {
                let (s, empty) = match ev {
                    Event::Start(s) => (s, false),
                    Event::Empty(s) => (s, true),
                    _ => unreachable!("matched above"),
                };
                let e = start(&s)?;
                let name = e.local_name();
                if !(name == "stream" && !empty || name == "open" && empty) {
                    return Err(ParseError::Malformed("not a stream header"));
                }
                let get = |k: &str| e.attr(k).map(str::to_string);
                return Ok(StreamHeader {
                    from: get("from"),
                    to: get("to"),
                    id: get("id"),
                    version: get("version"),
                    ns: get("xmlns"),
                });
            }
            _ => return Err(ParseError::Malformed("not a stream header")),
        }
    }
}

/// Escapes text or an attribute value: `&`, `<`, `>`, `"`, `'`, and `\r` as `&#13;` (a
/// receiver would turn a raw one into `\n`). Characters XML 1.0 forbids even escaped
/// (controls other than tab, newline and carriage return; U+FFFE, U+FFFF) become U+FFFD:
/// a server closes the stream on them.
pub fn escape(s: &str, out: &mut String) {
    escape_with(s, out, false);
}

/// [`escape`], plus the characters XML would normalise away: `\r` always, and in
/// attribute values (`attr`) also tab and newline.
fn escape_with(s: &str, out: &mut String, attr: bool) {
    let mut rest = s;
    while let Some(i) = rest.find(|c| needs_escape(c, attr)) {
        let (head, tail) = rest.split_at(i);
        out.push_str(head);
        let mut chars = tail.chars();
        let c = chars.next().unwrap_or('\u{fffd}');
        out.push_str(match c {
            '&' => "&amp;",
            '<' => "&lt;",
            '>' => "&gt;",
            '"' => "&quot;",
            '\'' => "&apos;",
            '\r' => "&#13;",
            '\n' => "&#10;",
            '\t' => "&#9;",
            _ => "\u{fffd}",
        });
        rest = chars.as_str();
    }
    out.push_str(rest);
}

fn needs_escape(c: char, attr: bool) -> bool {
    match c {
        '&' | '<' | '>' | '"' | '\'' | '\r' => true,
        '\n' | '\t' => attr,
        '\u{fffe}' | '\u{ffff}' => true,
        c => c < ' ',
    }
}

fn local(name: &str) -> &str {
    name.split_once(':').map_or(name, |(_, l)| l)
}

/// A new element from a start tag: its name and its attributes, unescaped and normalised
/// as XML 1.0 says.
fn start(s: &BytesStart<'_>) -> Result<Element, ParseError> {
    let mut attrs = Vec::new();
    for a in s.attributes() {
        let a = a.map_err(|e| ParseError::Xml(e.to_string()))?;
        let v = a.normalized_value(XmlVersion::Implicit1_0)?;
        attrs.push((a.key.as_ref().to_string(), v.into_owned()));
    }
    Ok(Element {
        name: s.name().as_ref().to_string(),
        attrs,
        children: Vec::new(),
        text: String::new(),
    })
}

/// Appends text to the innermost open element; outside it only whitespace may be.
fn push_text(stack: &mut [Element], text: &str) -> Result<(), ParseError> {
    match stack.last_mut() {
        Some(e) => e.text.push_str(text),
        None if text.bytes().all(is_space) => {}
        None => return Err(ParseError::Malformed("text outside the element")),
    }
    Ok(())
}

/// The text of `&name;` or `&#n;`: only XML's predefined entities exist on a stream.
fn reference(r: &BytesRef<'_>) -> Result<String, ParseError> {
    if let Some(c) = r.resolve_char_ref()? {
        return Ok(c.to_string());
    }
    resolve_predefined_entity(r)
        .map(str::to_string)
        .ok_or(ParseError::Malformed("unknown entity"))
}
