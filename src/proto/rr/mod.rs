//! Request/response framing for `spate rr` and the embedded decision service, sans-I/O:
//! a request body in → the bytes to write; bytes read → where a whole response (or
//! request, on the server side) ends, and what it says.
//!
//! Four framings: `line` (one line, or lines up to one matching a pattern), `len32` and
//! `len16` (a big-endian length prefix), `http` (HTTP/1.1 with Content-Length or chunked
//! transfer encoding). Everything is capped before it is buffered: a length prefix or a
//! Content-Length over the cap, a chunk size over it, a header line or a head that never
//! ends are errors of that one message, decided from the bytes that announce them.
//!
//! - [`Framer`]: incremental; `frame(buf)` answers `Ok(Some(len))` once a whole message
//!   is in `buf`, `Ok(None)` for more, and keeps how far it has scanned between calls.
//! - [`Message`]: a framed message's first line, status, body and `Connection: close`.
//! - [`encode_request`]: a request body framed for the wire.

mod framer;
mod http;
#[cfg(test)]
mod tests;

pub use framer::{Framer, Message};
pub use http::{chunk_size, HttpRequest};

use serde::Serialize;

/// How requests and responses are delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Frame {
    /// One line each way (CRLF written, LF or CRLF read).
    Line,
    /// A 4-byte big-endian length, then that many bytes.
    Len32,
    /// A 2-byte big-endian length, then that many bytes.
    Len16,
    /// HTTP/1.1: the request built from method, path and headers with the variant as its
    /// body; the response by status line, headers, Content-Length or chunked encoding.
    Http,
}

impl Frame {
    pub fn name(self) -> &'static str {
        match self {
            Frame::Line => "line",
            Frame::Len32 => "len32",
            Frame::Len16 => "len16",
            Frame::Http => "http",
        }
    }
}

/// Longest HTTP head (status or request line and headers) accepted, whatever the cap.
pub const MAX_HEAD: usize = 64 * 1024;
/// Longest chunk-size line (with extensions) accepted.
pub const MAX_CHUNK_LINE: usize = 1024;
/// Most header fields in one head.
pub const MAX_HEADERS: usize = 128;

/// Why a message could not be framed or read: an error of that one request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("message longer than {0} bytes")]
    TooLong(usize),
    #[error("length prefix announces {0} bytes, over the cap of {1}")]
    LengthOverCap(u64, usize),
    #[error("HTTP head longer than {0} bytes (a header line that never ends?)")]
    HeadTooLong(usize),
    #[error("more than {MAX_HEADERS} header fields")]
    TooManyHeaders,
    #[error("bad HTTP start line: {0}")]
    BadStartLine(String),
    #[error("bad header line: {0}")]
    BadHeader(String),
    #[error("bad Content-Length: {0}")]
    BadContentLength(String),
    #[error("Content-Length {0} over the cap of {1}")]
    ContentLengthOverCap(u64, usize),
    #[error("broken chunked encoding: {0}")]
    BadChunk(&'static str),
    #[error("chunk of {0} bytes over the cap of {1}")]
    ChunkOverCap(u64, usize),
    #[error("unsupported Transfer-Encoding: {0}")]
    TransferEncoding(String),
}

/// Why a request body cannot be framed (checked once, before any load).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("a line request cannot contain a line break")]
    LineBreak,
    #[error("{0} bytes do not fit a {1} length prefix")]
    TooLong(usize, &'static str),
}

/// Appends `body` framed as a request to `out`.
pub fn encode_request(
    frame: Frame,
    http: &HttpRequest,
    body: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    match frame {
        Frame::Line => {
            if body.iter().any(|&b| b == b'\n' || b == b'\r') {
                return Err(EncodeError::LineBreak);
            }
            out.extend_from_slice(body);
            out.extend_from_slice(b"\r\n");
        }
        Frame::Len32 => {
            let n =
                u32::try_from(body.len()).map_err(|_| EncodeError::TooLong(body.len(), "len32"))?;
            out.extend_from_slice(&n.to_be_bytes());
            out.extend_from_slice(body);
        }
        Frame::Len16 => {
            let n =
                u16::try_from(body.len()).map_err(|_| EncodeError::TooLong(body.len(), "len16"))?;
            out.extend_from_slice(&n.to_be_bytes());
            out.extend_from_slice(body);
        }
        Frame::Http => http.encode(body, out),
    }
    Ok(())
}

/// Appends `body` framed as a response (the embedded server's side). For HTTP `status`
/// and `close` make the head; otherwise they are not on the wire.
pub fn encode_response(frame: Frame, status: u16, close: bool, body: &[u8], out: &mut Vec<u8>) {
    match frame {
        Frame::Line => {
            out.extend(
                body.iter()
                    .map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b }),
            );
            out.extend_from_slice(b"\r\n");
        }
        Frame::Len32 => {
            out.extend_from_slice(&(body.len() as u32).to_be_bytes());
            out.extend_from_slice(body);
        }
        Frame::Len16 => {
            let n = body.len().min(u16::MAX as usize);
            out.extend_from_slice(&(n as u16).to_be_bytes());
            out.extend_from_slice(&body[..n]);
        }
        Frame::Http => {
            let reason = match status {
                200 => "OK",
                400 => "Bad Request",
                403 => "Forbidden",
                _ => "Status",
            };
            out.extend_from_slice(
                format!(
                    "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{}\r\n",
                    body.len(),
                    if close { "Connection: close\r\n" } else { "" }
                )
                .as_bytes(),
            );
            out.extend_from_slice(body);
        }
    }
}
