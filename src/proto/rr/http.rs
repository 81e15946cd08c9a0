//! HTTP/1.1 pieces of the request/response framing: the request a client writes, and the
//! reading of a head (start line and header fields) that the framer has delimited.

use serde::Serialize;

use super::{Error, MAX_HEADERS};

/// How `--frame http` requests are built: method, path, host and extra header lines; the
/// variant is the body.
#[derive(Debug, Clone, Serialize)]
pub struct HttpRequest {
    pub method: String,
    pub path: String,
    pub host: String,
    /// Complete `Name: value` lines, without line ends.
    pub headers: Vec<String>,
}

impl Default for HttpRequest {
    fn default() -> Self {
        HttpRequest {
            method: "POST".into(),
            path: "/".into(),
            host: "localhost".into(),
            headers: Vec::new(),
        }
    }
}

impl HttpRequest {
    /// Whether a response to this request has no body whatever its headers say.
    pub fn is_head(&self) -> bool {
        self.method.eq_ignore_ascii_case("HEAD")
    }

    pub(super) fn encode(&self, body: &[u8], out: &mut Vec<u8>) {
        use std::io::Write as _;
        let _ = write!(
            out,
            "{} {} HTTP/1.1\r\nHost: {}\r\n",
            self.method, self.path, self.host
        );
        for h in &self.headers {
            out.extend_from_slice(h.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        let bodyless = self.method.eq_ignore_ascii_case("GET") || self.is_head();
        if !(body.is_empty() && bodyless) {
            let _ = write!(out, "Content-Length: {}\r\n", body.len());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(body);
    }
}

/// What a head says about the message's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Head {
    /// The response's status (0 for a request).
    pub status: u16,
    pub content_length: Option<u64>,
    pub chunked: bool,
    /// `Connection: close`, or HTTP/1.0 without `Connection: keep-alive`.
    pub close: bool,
}

fn clip(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(&b[..b.len().min(80)]);
    s.trim_end().to_string()
}

/// Reads a head: `head` is its bytes up to and including the empty line. `request` says
/// whether the start line is a request line (else a status line).
pub fn parse_head(head: &[u8], request: bool) -> Result<Head, Error> {
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let start = lines.next().unwrap_or_default();
    let mut h = Head::default();
    let http10 = if request {
        let mut w = start.split(|&b| b == b' ');
        let (m, t, v) = (w.next(), w.next(), w.next());
        match (m, t, v, w.next()) {
            (Some(m), Some(t), Some(v), None)
                if !m.is_empty() && !t.is_empty() && v.starts_with(b"HTTP/1.") =>
            {
                v == b"HTTP/1.0"
            }
            _ => return Err(Error::BadStartLine(clip(start))),
        }
    } else {
        let ok = start.len() >= 12
            && start.starts_with(b"HTTP/1.")
            && start[7].is_ascii_digit()
            && start[8] == b' '
            && start[9..12].iter().all(u8::is_ascii_digit)
            && start.get(12).is_none_or(|&b| b == b' ');
        if !ok {
            return Err(Error::BadStartLine(clip(start)));
        }
        h.status = start[9..12]
            .iter()
            .fold(0u16, |n, &d| n * 10 + u16::from(d - b'0'));
        start[7] == b'0'
    };
    let mut keep_alive = false;
    let mut fields = 0;
    for line in lines {
        if line.is_empty() {
            break;
        }
        fields += 1;
        if fields > MAX_HEADERS {
            return Err(Error::TooManyHeaders);
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Err(Error::BadHeader(clip(line)));
        };
        let name = &line[..colon];
        if name.is_empty() || name.iter().any(|b| b.is_ascii_whitespace()) {
            return Err(Error::BadHeader(clip(line)));
        }
        let value = line[colon + 1..].trim_ascii();
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = content_length(value)?;
            if h.content_length.is_some_and(|m| m != n) {
                return Err(Error::BadContentLength("two different values".into()));
            }
            h.content_length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            let last = value
                .rsplit(|&b| b == b',')
                .next()
                .unwrap_or_default()
                .trim_ascii();
            if last.eq_ignore_ascii_case(b"chunked") {
                h.chunked = true;
            } else if !last.eq_ignore_ascii_case(b"identity") {
                return Err(Error::TransferEncoding(clip(value)));
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if token.eq_ignore_ascii_case(b"close") {
                    h.close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    keep_alive = true;
                }
            }
        }
    }
    if http10 && !keep_alive {
        h.close = true;
    }
    if h.chunked {
        // RFC 9112 §6.3: chunked wins, and the length must not be trusted.
        h.content_length = None;
    }
    Ok(h)
}

fn content_length(v: &[u8]) -> Result<u64, Error> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return Err(Error::BadContentLength(clip(v)));
    }
    Ok(v.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')))
}

/// A chunk-size line (without its line end): the size in hex, extensions ignored.
pub fn chunk_size(line: &[u8]) -> Result<u64, Error> {
    let hex = line
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    if hex.is_empty() || hex.len() > 15 {
        return Err(Error::BadChunk("bad chunk size"));
    }
    let mut n = 0u64;
    for &b in hex {
        let d = (b as char)
            .to_digit(16)
            .ok_or(Error::BadChunk("bad chunk size"))?;
        n = n * 16 + u64::from(d);
    }
    Ok(n)
}
