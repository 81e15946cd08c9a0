//! The XMPP stream framer: finds where the stream header, each top-level element and the
//! stream's end lie in the bytes read so far, without parsing them and without I/O.
//!
//! An XMPP stream is one XML document that never ends while the session lasts, so a
//! document parser cannot be handed "the next message". The framer scans the bytes with a
//! byte-at-a-time state machine (it can stop and resume at any byte), counts nesting, and
//! reports a frame only when it is complete. It caps the frame's size and nesting before
//! anything is buffered further, and it refuses what RFC 6120 §11.1 forbids on a stream:
//! comments, processing instructions (other than the leading XML declaration) and DTDs.

/// What one frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// The stream header: an optional `<?xml …?>` declaration and the unclosed
    /// `<stream:stream …>` open tag (any prefix; recognised by the local name `stream`).
    Open,
    /// One complete top-level element (a stanza, `<stream:features>`, `<auth>`, …).
    Element,
    /// The stream's end tag, `</stream:stream>`.
    Close,
    /// Only whitespace between top-level elements (a keepalive), and nothing else
    /// was there to fold it into.
    Whitespace,
}

/// Why the bytes cannot be framed. After an error the stream is unusable: every later
/// call returns the same error until [`Framer::restart`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The frame would be longer than the cap (the cap's value).
    #[error("XMPP frame longer than {0} bytes")]
    TooLarge(usize),
    /// Elements nest deeper than the cap (the cap's value).
    #[error("XMPP elements nested deeper than {0}")]
    TooDeep(usize),
    #[error("malformed XMPP stream ({0})")]
    Malformed(&'static str),
}

/// Where the stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before the header: an XML declaration and the header may come.
    Prolog,
    /// After the header: top-level elements, whitespace, or the stream's end.
    Stream,
    /// After `</stream:stream>`: only whitespace may follow.
    Closed,
}

/// The scanner's state at the byte it will look at next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lex {
    /// Character data (only whitespace outside elements).
    Text,
    /// After `<`.
    Lt,
    /// In the name of a start tag.
    StartName,
    /// In a start tag, outside attribute values.
    InTag,
    /// In an attribute value delimited by this quote.
    Quote(u8),
    /// After `/` in a start tag: `>` must follow.
    Slash,
    /// In the name of an end tag.
    EndName,
    /// After the name of an end tag: whitespace, then `>`.
    EndTail,
    /// After `<!`: how many bytes of `[CDATA[` matched.
    Bang(u8),
    /// In a CDATA section: how many `]` just preceded (0..=2).
    CData(u8),
    /// After `<?`: how many bytes of `xml` matched.
    Qmark(u8),
    /// In the XML declaration; whether the previous byte was `?`.
    Decl(bool),
}

const CDATA_OPEN: &[u8] = b"[CDATA[";

/// Splits an XMPP stream into frames. Sans-I/O and incremental.
///
/// # Contract
/// `buf` given to [`Framer::frame`] always starts where the previous frame ended. The
/// framer remembers how far it has scanned into the current (incomplete) frame, so after
/// `Ok(None)` the next call must pass the same bytes again, possibly with more appended;
/// bytes already passed must not change. (If `buf` is shorter than what was scanned, the
/// scan starts over from its beginning; changed bytes cannot be detected.) After
/// `Ok(Some((frame, len)))` the caller drops the first `len` bytes and passes the rest.
/// So feeding a 64 KiB stanza one byte at a time costs O(n), not O(n²).
#[derive(Debug)]
pub struct Framer {
    max_stanza: usize,
    max_depth: usize,
    phase: Phase,
    lex: Lex,
    /// Bytes of the current frame scanned so far.
    pos: usize,
    /// Open elements in the current frame.
    depth: usize,
    /// The names of the open elements, as (start, end) offsets into `buf`.
    names: Vec<(usize, usize)>,
    /// Start and end of the tag name being scanned.
    name: (usize, usize),
    /// The current frame holds an XML declaration.
    decl: bool,
    /// The header's element name, as written, to match the stream's end tag.
    stream_name: Vec<u8>,
    failed: Option<FrameError>,
    /// XMPP over WebSocket (RFC 7395): no stream header; `<open/>` and `<close/>` are
    /// top-level elements that say [`Frame::Open`] and [`Frame::Close`].
    ws: bool,
}

impl Framer {
    /// A framer for a new stream. `max_stanza` caps every frame (header and top-level
    /// elements, with the whitespace before them) in bytes; `max_depth` caps nesting
    /// inside a top-level element (the element itself is depth 1; the stream header
    /// does not count).
    pub fn new(max_stanza: usize, max_depth: usize) -> Framer {
        Framer {
            max_stanza,
            max_depth,
            phase: Phase::Prolog,
            lex: Lex::Text,
            pos: 0,
            depth: 0,
            names: Vec::new(),
            name: (0, 0),
            decl: false,
            stream_name: Vec::new(),
            failed: None,
            ws: false,
        }
    }

    /// The framer of a stream over WebSocket (RFC 7395) when `on`: each message is one
    /// element, `<open/>` and `<close/>` stand for the stream's header and end.
    pub fn websocket(mut self, on: bool) -> Framer {
        self.ws = on;
        self.restart();
        self
    }

    /// The next frame at the start of `buf` (see the contract on [`Framer`]).
    ///
    /// `Ok(None)`: more bytes are needed; never when `max_stanza` bytes are there
    /// ([`FrameError::TooLarge`] then), so the caller never buffers more than the cap.
    /// `Ok(Some((frame, len)))`: the first `len` bytes are that frame. Whitespace before
    /// a frame is part of it (so [`Frame::Element`] bytes may begin with whitespace);
    /// when `buf` holds only whitespace outside any element, it comes back as
    /// [`Frame::Whitespace`] so that keepalives need no buffering.
    pub fn frame(&mut self, buf: &[u8]) -> Result<Option<(Frame, usize)>, FrameError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let r = self.scan(buf);
        if let Err(e) = &r {
            self.failed = Some(e.clone());
        }
        r
    }

    /// Expects a new stream header, as after STARTTLS or SASL success: the stream
    /// restarts. Any partly scanned frame is forgotten, and a failure is cleared.
    pub fn restart(&mut self) {
        self.phase = if self.ws {
            Phase::Stream
        } else {
            Phase::Prolog
        };
        self.stream_name.clear();
        self.failed = None;
        self.reset_frame();
    }

    /// How many bytes of the current frame have been scanned (tests check that nothing
    /// is scanned twice).
    #[cfg(test)]
    pub(super) fn scanned(&self) -> usize {
        self.pos
    }

    fn reset_frame(&mut self) {
        self.lex = Lex::Text;
        self.pos = 0;
        self.depth = 0;
        self.names.clear();
        self.name = (0, 0);
        self.decl = false;
    }

    /// Nothing but whitespace scanned in the current frame.
    fn blank(&self) -> bool {
        self.lex == Lex::Text && self.depth == 0 && !self.decl
    }

    fn scan(&mut self, buf: &[u8]) -> Result<Option<(Frame, usize)>, FrameError> {
        if buf.len() < self.pos {
            self.reset_frame();
        }
        let end = buf.len().min(self.max_stanza);
        while let Some(&b) = buf.get(self.pos).filter(|_| self.pos < end) {
            self.pos += 1;
            if let Some(frame) = self.step(buf, b)? {
                let len = self.pos;
                self.reset_frame();
                return Ok(Some((frame, len)));
            }
        }
        if self.pos > 0 && self.blank() {
            let len = self.pos;
            self.reset_frame();
            return Ok(Some((Frame::Whitespace, len)));
        }
        if self.pos >= self.max_stanza && !buf.is_empty() {
            return Err(FrameError::TooLarge(self.max_stanza));
        }
        Ok(None)
    }

    /// Consumes byte `b` (at `self.pos - 1`); a frame when it completes one.
    fn step(&mut self, buf: &[u8], b: u8) -> Result<Option<Frame>, FrameError> {
        let at = self.pos - 1;
        match self.lex {
            Lex::Text => self.text(b),
            Lex::Lt => self.after_lt(b, at),
            Lex::StartName => self.start_name(buf, b, at),
            Lex::InTag => self.in_tag(buf, b),
            Lex::Quote(q) => {
                if b == q {
                    self.lex = Lex::InTag;
                } else if b == b'<' {
                    return Err(FrameError::Malformed("'<' in an attribute value"));
                }
                Ok(None)
            }
            Lex::Slash if b == b'>' => self.start_tag_done(buf, true),
            Lex::Slash => Err(FrameError::Malformed("'/' not followed by '>' in a tag")),
            Lex::EndName => self.end_name(buf, b, at),
            Lex::EndTail if is_space(b) => Ok(None),
            Lex::EndTail if b == b'>' => self.end_tag_done(buf),
            Lex::EndTail => Err(FrameError::Malformed("junk in an end tag")),
            Lex::Bang(n) => self.bang(n, b).map(|()| None),
            Lex::CData(k) => {
                self.lex = match b {
                    b']' => Lex::CData((k + 1).min(2)),
                    b'>' if k == 2 => Lex::Text,
                    _ => Lex::CData(0),
                };
                Ok(None)
            }
            Lex::Qmark(n) => self.qmark(n, b).map(|()| None),
            Lex::Decl(q) => {
                self.lex = match b {
                    b'>' if q => {
                        self.decl = true;
                        Lex::Text
                    }
                    b'<' => return Err(FrameError::Malformed("'<' in the XML declaration")),
                    _ => Lex::Decl(b == b'?'),
                };
                Ok(None)
            }
        }
    }

    fn text(&mut self, b: u8) -> Result<Option<Frame>, FrameError> {
        if b == b'<' {
            if self.phase == Phase::Closed {
                return Err(FrameError::Malformed("data after the stream's end"));
            }
            self.lex = Lex::Lt;
        } else if self.depth == 0 && !is_space(b) {
            return Err(FrameError::Malformed(
                "text outside any element, so the server does not speak XMPP here",
            ));
        }
        Ok(None)
    }

    fn after_lt(&mut self, b: u8, at: usize) -> Result<Option<Frame>, FrameError> {
        self.lex = match b {
            b'/' => {
                self.name = (at + 1, at + 1);
                Lex::EndName
            }
            b'!' => Lex::Bang(0),
            b'?' if self.phase == Phase::Prolog && !self.decl && self.depth == 0 => Lex::Qmark(0),
            b'?' => return Err(FrameError::Malformed("processing instruction")),
            _ if is_name_start(b) => {
                self.name = (at, at);
                Lex::StartName
            }
            _ => return Err(FrameError::Malformed("bad character after '<'")),
        };
        Ok(None)
    }

    fn start_name(&mut self, buf: &[u8], b: u8, at: usize) -> Result<Option<Frame>, FrameError> {
        if is_name_char(b) {
            return Ok(None);
        }
        self.name.1 = at;
        match b {
            b'>' => self.start_tag_done(buf, false),
            b'/' => {
                self.lex = Lex::Slash;
                Ok(None)
            }
            _ if is_space(b) => {
                self.lex = Lex::InTag;
                Ok(None)
            }
            _ => Err(FrameError::Malformed("bad character in an element name")),
        }
    }

    fn in_tag(&mut self, buf: &[u8], b: u8) -> Result<Option<Frame>, FrameError> {
        match b {
            b'"' | b'\'' => self.lex = Lex::Quote(b),
            b'/' => self.lex = Lex::Slash,
            b'>' => return self.start_tag_done(buf, false),
            b'<' => return Err(FrameError::Malformed("'<' inside a tag")),
            _ => {}
        }
        Ok(None)
    }

    fn end_name(&mut self, buf: &[u8], b: u8, at: usize) -> Result<Option<Frame>, FrameError> {
        let first = at == self.name.0;
        if (first && is_name_start(b)) || (!first && is_name_char(b)) {
            return Ok(None);
        }
        if first {
            return Err(FrameError::Malformed("bad character in an end tag"));
        }
        self.name.1 = at;
        if b == b'>' {
            return self.end_tag_done(buf);
        }
        if is_space(b) {
            self.lex = Lex::EndTail;
            return Ok(None);
        }
        Err(FrameError::Malformed("bad character in an end tag"))
    }

    /// A start tag ended (`>`, or `/>` when `empty`).
    fn start_tag_done(&mut self, buf: &[u8], empty: bool) -> Result<Option<Frame>, FrameError> {
        self.lex = Lex::Text;
        let name = buf.get(self.name.0..self.name.1).unwrap_or_default();
        if self.depth == 0 {
            match self.phase {
                Phase::Prolog => return self.header_done(name, empty).map(Some),
                Phase::Closed => return Err(FrameError::Malformed("data after the stream's end")),
                Phase::Stream if empty && self.ws => {
                    return Ok(Some(match local_name(name) {
                        b"open" => Frame::Open,
                        b"close" => {
                            self.phase = Phase::Closed;
                            Frame::Close
                        }
                        _ => Frame::Element,
                    }))
                }
                Phase::Stream if empty => return Ok(Some(Frame::Element)),
                Phase::Stream => {}
            }
        }
        if self.depth >= self.max_depth {
            return Err(FrameError::TooDeep(self.max_depth));
        }
        if !empty {
            self.depth += 1;
            self.names.push(self.name);
        }
        Ok(None)
    }

    fn header_done(&mut self, name: &[u8], empty: bool) -> Result<Frame, FrameError> {
        if local_name(name) != b"stream" {
            return Err(FrameError::Malformed("expected the stream header"));
        }
        if empty {
            return Err(FrameError::Malformed("the stream header is closed"));
        }
        self.stream_name = name.to_vec();
        self.phase = Phase::Stream;
        Ok(Frame::Open)
    }

    /// An end tag ended: it must close the innermost open element (or the stream).
    fn end_tag_done(&mut self, buf: &[u8]) -> Result<Option<Frame>, FrameError> {
        self.lex = Lex::Text;
        let name = buf.get(self.name.0..self.name.1).unwrap_or_default();
        let Some((s, e)) = self.names.pop() else {
            if self.phase == Phase::Stream && name == self.stream_name.as_slice() {
                self.phase = Phase::Closed;
                return Ok(Some(Frame::Close));
            }
            return Err(FrameError::Malformed("end tag without a start tag"));
        };
        if buf.get(s..e) != Some(name) {
            return Err(FrameError::Malformed("mismatched end tag"));
        }
        self.depth = self.depth.saturating_sub(1);
        Ok((self.depth == 0).then_some(Frame::Element))
    }

    /// After `<!`: only CDATA inside an element; comments and DTDs are refused.
    fn bang(&mut self, n: u8, b: u8) -> Result<(), FrameError> {
        if n == 0 {
            match b {
                b'-' => return Err(FrameError::Malformed("comment")),
                b'D' => return Err(FrameError::Malformed("DTD")),
                b'[' if self.depth == 0 => {
                    return Err(FrameError::Malformed("CDATA outside any element"))
                }
                _ => {}
            }
        }
        if CDATA_OPEN.get(usize::from(n)) != Some(&b) {
            return Err(FrameError::Malformed("markup declaration"));
        }
        self.lex = if usize::from(n) + 1 == CDATA_OPEN.len() {
            Lex::CData(0)
        } else {
            Lex::Bang(n + 1)
        };
        Ok(())
    }

    /// After `<?`: only `<?xml` followed by whitespace (the declaration).
    fn qmark(&mut self, n: u8, b: u8) -> Result<(), FrameError> {
        self.lex = match b"xml".get(usize::from(n)) {
            Some(&want) if want == b => Lex::Qmark(n + 1),
            None if is_space(b) => Lex::Decl(false),
            _ => return Err(FrameError::Malformed("processing instruction")),
        };
        Ok(())
    }
}

/// XML's whitespace (the `S` production).
pub(crate) fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// A byte that may start an XML name (any non-ASCII byte is let through: the parser
/// checks names properly).
fn is_name_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b':' || b >= 0x80
}

fn is_name_char(b: u8) -> bool {
    is_name_start(b) || b.is_ascii_digit() || b == b'-' || b == b'.'
}

/// The part of a qualified name after its prefix.
fn local_name(name: &[u8]) -> &[u8] {
    match name.iter().position(|&b| b == b':') {
        Some(i) => name.get(i + 1..).unwrap_or_default(),
        None => name,
    }
}
