//! The incremental framer: where a whole request or response ends in the bytes read so
//! far, decided without buffering more than the cap, and what the framed message says.

use std::borrow::Cow;

use regex::bytes::Regex;

use super::http::{chunk_size, parse_head, Head};
use super::{Error, Frame, MAX_CHUNK_LINE, MAX_HEAD};

/// Where an HTTP message's body stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    /// The message ends at this offset.
    Fixed(usize),
    /// A chunk-size line starts at `pos`.
    ChunkSize,
    /// Chunk data ends at this offset; its CRLF follows.
    ChunkData(usize),
    /// After the last chunk: trailer lines up to an empty one.
    Trailer,
    /// Neither a length nor chunks (HTTP/1.0 style): the body is what comes until the
    /// server closes the connection ([`Framer::at_close`]).
    UntilClose,
}

/// A whole message, as decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Done {
    len: usize,
    /// Where the (final, after any 1xx) message starts.
    start: usize,
    /// Where its body starts.
    body: usize,
    head: Head,
}

/// Finds the end of one message at a time; see the module documentation.
#[derive(Debug, Clone)]
pub struct Framer {
    frame: Frame,
    request: bool,
    max: usize,
    until: Option<Regex>,
    head_only: bool,
    /// Scanned up to here.
    pos: usize,
    /// Where the current line (line framing, HTTP head or trailer) starts.
    line_start: usize,
    /// Where the current HTTP message (after any interim 1xx) starts.
    start: usize,
    http: Option<(usize, Head, Body)>,
    done: Option<Done>,
}

impl Framer {
    /// A client's framer of responses at most `max` bytes long. `until`: line framing
    /// reads lines up to one that matches (else one line). `head_only`: the requests are
    /// HTTP HEAD (no body whatever the headers say).
    pub fn response(frame: Frame, max: usize, until: Option<Regex>, head_only: bool) -> Self {
        Framer {
            frame,
            request: false,
            max,
            until,
            head_only,
            pos: 0,
            line_start: 0,
            start: 0,
            http: None,
            done: None,
        }
    }

    /// A server's framer of requests at most `max` bytes long.
    pub fn request(frame: Frame, max: usize) -> Self {
        let mut f = Framer::response(frame, max, None, false);
        f.request = true;
        f
    }

    /// Forgets the last message: the next `frame` call starts a new one.
    pub fn reset(&mut self) {
        self.pos = 0;
        self.line_start = 0;
        self.start = 0;
        self.http = None;
        self.done = None;
    }

    /// `Ok(Some(len))` once `buf` starts with a whole message of `len` bytes, `Ok(None)`
    /// when more bytes are needed. `buf` must start at the message and only grow between
    /// calls (until [`Framer::reset`]).
    pub fn frame(&mut self, buf: &[u8]) -> Result<Option<usize>, Error> {
        if let Some(d) = self.done {
            return Ok(Some(d.len));
        }
        let end = match self.frame {
            Frame::Line => self.lines(buf)?,
            Frame::Len32 => self.prefixed(buf, 4)?,
            Frame::Len16 => self.prefixed(buf, 2)?,
            Frame::Http => self.http(buf)?,
        };
        match end {
            Some(d) if d.len > self.max => Err(Error::TooLong(self.max)),
            Some(d) => {
                self.done = Some(d);
                Ok(Some(d.len))
            }
            None if buf.len() > self.max => Err(Error::TooLong(self.max)),
            None => Ok(None),
        }
    }

    fn lines(&mut self, buf: &[u8]) -> Result<Option<Done>, Error> {
        while let Some(i) = buf[self.pos..].iter().position(|&b| b == b'\n') {
            let nl = self.pos + i;
            self.pos = nl + 1;
            let line = trim_cr(&buf[self.line_start..nl]);
            self.line_start = nl + 1;
            if self.until.as_ref().is_none_or(|re| re.is_match(line)) {
                return Ok(Some(Done {
                    len: nl + 1,
                    ..Done::default()
                }));
            }
        }
        self.pos = buf.len();
        Ok(None)
    }

    fn prefixed(&mut self, buf: &[u8], width: usize) -> Result<Option<Done>, Error> {
        if buf.len() < width {
            return Ok(None);
        }
        let n = buf[..width]
            .iter()
            .fold(0u64, |n, &b| (n << 8) | u64::from(b));
        if n > (self.max - self.max.min(width)) as u64 {
            return Err(Error::LengthOverCap(n, self.max));
        }
        let len = width + n as usize;
        Ok((buf.len() >= len).then_some(Done {
            len,
            body: width,
            ..Done::default()
        }))
    }

    fn http(&mut self, buf: &[u8]) -> Result<Option<Done>, Error> {
        // Bounded: each round consumes a head, a chunk or a line, or returns.
        for _ in 0..=buf.len() {
            let Some((body_at, head, state)) = self.http else {
                if !self.http_head(buf)? {
                    return Ok(None);
                }
                continue;
            };
            let next = match state {
                Body::Fixed(end) => {
                    return Ok((buf.len() >= end).then_some(Done {
                        len: end,
                        start: self.start,
                        body: body_at,
                        head,
                    }))
                }
                Body::ChunkSize => {
                    let Some(line) = self.line(buf, MAX_CHUNK_LINE, "chunk-size line too long")?
                    else {
                        return Ok(None);
                    };
                    let n = chunk_size(line)?;
                    if n > self.max as u64 {
                        return Err(Error::ChunkOverCap(n, self.max));
                    }
                    if n == 0 {
                        Body::Trailer
                    } else {
                        let end = self.pos + n as usize;
                        if end > self.max {
                            return Err(Error::TooLong(self.max));
                        }
                        Body::ChunkData(end)
                    }
                }
                Body::ChunkData(end) => {
                    match (buf.get(end), buf.get(end + 1)) {
                        (None, _) | (Some(b'\r'), None) => return Ok(None),
                        (Some(b'\n'), _) => self.pos = end + 1,
                        (Some(b'\r'), Some(b'\n')) => self.pos = end + 2,
                        _ => return Err(Error::BadChunk("chunk data not followed by CRLF")),
                    }
                    self.line_start = self.pos;
                    Body::ChunkSize
                }
                Body::UntilClose => {
                    self.pos = buf.len();
                    return Ok(None);
                }
                Body::Trailer => {
                    let Some(line) = self.line(buf, MAX_HEAD, "trailer line too long")? else {
                        return Ok(None);
                    };
                    if !line.is_empty() {
                        continue;
                    }
                    return Ok(Some(Done {
                        len: self.pos,
                        start: self.start,
                        body: body_at,
                        head,
                    }));
                }
            };
            self.http = Some((body_at, head, next));
        }
        Ok(None)
    }

    /// The next whole line from `pos` (without its line end), or None; a line longer than
    /// `cap` is an error.
    fn line<'b>(
        &mut self,
        buf: &'b [u8],
        cap: usize,
        what: &'static str,
    ) -> Result<Option<&'b [u8]>, Error> {
        match buf[self.pos..].iter().position(|&b| b == b'\n') {
            Some(i) if i > cap => Err(Error::BadChunk(what)),
            Some(i) => {
                let line = trim_cr(&buf[self.pos..self.pos + i]);
                self.pos += i + 1;
                self.line_start = self.pos;
                Ok(Some(line))
            }
            None if buf.len() - self.pos > cap => Err(Error::BadChunk(what)),
            None => Ok(None),
        }
    }

    /// Looks for the end of the head; true once one was read (and the body's shape set).
    fn http_head(&mut self, buf: &[u8]) -> Result<bool, Error> {
        let limit = MAX_HEAD.min(self.max);
        loop {
            let Some(i) = buf[self.pos..].iter().position(|&b| b == b'\n') else {
                self.pos = buf.len();
                if buf.len() - self.start > limit {
                    return Err(Error::HeadTooLong(limit));
                }
                return Ok(false);
            };
            let nl = self.pos + i;
            self.pos = nl + 1;
            let empty = trim_cr(&buf[self.line_start..nl]).is_empty();
            let first = self.line_start == self.start;
            self.line_start = nl + 1;
            if nl + 1 - self.start > limit {
                return Err(Error::HeadTooLong(limit));
            }
            if !empty || first {
                if first && empty {
                    return Err(Error::BadStartLine(String::new()));
                }
                continue;
            }
            let head = parse_head(&buf[self.start..=nl], self.request)?;
            let body_at = nl + 1;
            if !self.request && (100..200).contains(&head.status) && head.status != 101 {
                // An interim response (100 Continue): the real one follows.
                self.start = body_at;
                continue;
            }
            let state = self.body_shape(&head, body_at)?;
            self.http = Some((body_at, head, state));
            return Ok(true);
        }
    }

    fn body_shape(&self, head: &Head, body_at: usize) -> Result<Body, Error> {
        let no_body =
            !self.request && (self.head_only || matches!(head.status, 101..=199 | 204 | 304));
        if no_body {
            return Ok(Body::Fixed(body_at));
        }
        if head.chunked {
            return Ok(Body::ChunkSize);
        }
        match head.content_length {
            Some(n) if n > self.max as u64 => Err(Error::ContentLengthOverCap(n, self.max)),
            Some(n) => Ok(Body::Fixed(body_at + n as usize)),
            None if self.request => Ok(Body::Fixed(body_at)),
            None => Ok(Body::UntilClose),
        }
    }

    /// The server closed the connection with `buf` read: a response whose body runs until
    /// the close (no Content-Length, not chunked) is whole, all of `buf`; anything else
    /// is cut off (None).
    pub fn at_close(&mut self, buf: &[u8]) -> Option<usize> {
        if self.frame(buf).ok()?.is_some() {
            return self.done.map(|d| d.len);
        }
        let (body_at, mut head, Body::UntilClose) = self.http? else {
            return None;
        };
        head.close = true;
        self.done = Some(Done {
            len: buf.len(),
            start: self.start,
            body: body_at,
            head,
        });
        Some(buf.len())
    }

    /// What the message that [`Framer::frame`] last found says; `bytes` is that message
    /// (the `len` bytes it answered).
    pub fn message<'a>(&self, bytes: &'a [u8]) -> Message<'a> {
        let d = self.done.unwrap_or_default();
        let bytes = &bytes[..d.len.min(bytes.len())];
        let start = &bytes[d.start.min(bytes.len())..];
        let first = start.split(|&b| b == b'\n').next().unwrap_or_default();
        let (status, body) = match self.frame {
            Frame::Line => (None, trim_line_end(bytes)),
            Frame::Len32 | Frame::Len16 => (None, &bytes[d.body.min(bytes.len())..]),
            Frame::Http => (Some(d.head.status), &bytes[d.body.min(bytes.len())..]),
        };
        Message {
            first_line: trim_cr(first),
            status,
            close: d.head.close,
            chunked: d.head.chunked,
            lines: self.frame == Frame::Line,
            raw_body: body,
        }
    }
}

fn trim_cr(b: &[u8]) -> &[u8] {
    b.strip_suffix(b"\r").unwrap_or(b)
}

fn trim_line_end(b: &[u8]) -> &[u8] {
    trim_cr(b.strip_suffix(b"\n").unwrap_or(b))
}

/// A framed message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// The first line (HTTP: the status or request line), without its line end.
    pub first_line: &'a [u8],
    /// HTTP: the status (0 for a request).
    pub status: Option<u16>,
    /// HTTP: the connection ends after this message.
    pub close: bool,
    chunked: bool,
    /// Line framing: CRLF line ends read as LF (so a pattern's `$` ends a line).
    lines: bool,
    raw_body: &'a [u8],
}

impl<'a> Message<'a> {
    /// HTTP: the body is sent in chunks (a stream read as it comes decodes them itself).
    pub fn is_chunked(&self) -> bool {
        self.chunked
    }

    /// The body: the line(s) without the last line end (CRLF between lines read as LF),
    /// the bytes after the length prefix, the HTTP body with any chunked encoding (and
    /// trailers) removed.
    pub fn body(&self) -> Cow<'a, [u8]> {
        if self.lines && self.raw_body.windows(2).any(|w| w == b"\r\n") {
            let mut out = Vec::with_capacity(self.raw_body.len());
            for (i, &b) in self.raw_body.iter().enumerate() {
                if !(b == b'\r' && self.raw_body.get(i + 1) == Some(&b'\n')) {
                    out.push(b);
                }
            }
            return Cow::Owned(out);
        }
        if !self.chunked {
            return Cow::Borrowed(self.raw_body);
        }
        let mut out = Vec::new();
        let mut rest = self.raw_body;
        // The framer validated the chunks: each round takes one, bounded by the bytes.
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            let n = chunk_size(trim_cr(&rest[..i])).unwrap_or(0) as usize;
            rest = &rest[i + 1..];
            if n == 0 || n > rest.len() {
                break;
            }
            out.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            rest = rest.strip_prefix(b"\r").unwrap_or(rest);
            rest = rest.strip_prefix(b"\n").unwrap_or(rest);
        }
        Cow::Owned(out)
    }
}
