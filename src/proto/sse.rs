//! Server-Sent Events (`text/event-stream`, WHATWG HTML §9.2), the push channel of JMAP
//! (RFC 8620 §7.3): the bytes of a response body in, as they arrive, chunked or not;
//! whole events out. A line and an event's data are capped before they are kept.
//!
//! Lines end with CRLF, LF or CR (a CRLF cut between two reads is one line end); a line
//! starting with `:` is a comment (keep-alives); `event:` names the event, each `data:`
//! adds a line to its data; an empty line dispatches it (none when it has no data).

use super::rr::{chunk_size, MAX_CHUNK_LINE};

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Its `event` field, `message` when it has none.
    pub kind: String,
    /// Its `data` lines, joined with LF.
    pub data: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("event-stream line longer than {0} bytes")]
    LineTooLong(usize),
    #[error("event data longer than {0} bytes")]
    EventTooLong(usize),
    #[error("broken chunked encoding: {0}")]
    Chunk(&'static str),
}

/// Where a chunked body stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Not chunked: every byte is the stream's.
    Off,
    /// A chunk-size line, its bytes so far in `size_line`.
    Size,
    /// This many bytes of chunk data to come.
    Data(u64),
    /// The line end after chunk data.
    DataEnd,
    /// Trailer lines up to an empty one.
    Trailer,
    /// The last chunk and its trailer were read: the stream is over.
    Done,
}

/// The incremental decoder of one event stream.
#[derive(Debug, Clone)]
pub struct Decoder {
    chunk: Chunk,
    size_line: Vec<u8>,
    line: Vec<u8>,
    /// The last byte was a CR: an LF right after it ends no second line.
    after_cr: bool,
    /// Nothing decoded yet (a byte-order mark may start the stream).
    first: bool,
    kind: String,
    data: String,
    max: usize,
}

impl Decoder {
    /// A decoder of a body sent `chunked` or not, its lines and each event's data at most
    /// `max` bytes.
    pub fn new(chunked: bool, max: usize) -> Decoder {
        Decoder {
            chunk: if chunked { Chunk::Size } else { Chunk::Off },
            size_line: Vec::new(),
            line: Vec::new(),
            after_cr: false,
            first: true,
            kind: String::new(),
            data: String::new(),
            max,
        }
    }

    /// A chunked body has ended (its last chunk was read): no more events will come.
    pub fn ended(&self) -> bool {
        self.chunk == Chunk::Done
    }

    /// Decodes the next bytes of the body; every event they complete goes to `on_event`,
    /// in order. After an error the stream cannot be read on.
    pub fn feed(&mut self, mut bytes: &[u8], mut on_event: impl FnMut(Event)) -> Result<(), Error> {
        while !bytes.is_empty() {
            let (taken, state) = match self.chunk {
                Chunk::Off => {
                    self.lines(bytes, &mut on_event)?;
                    (bytes.len(), Chunk::Off)
                }
                Chunk::Data(n) => {
                    let take = bytes.len().min(usize::try_from(n).unwrap_or(usize::MAX));
                    self.lines(&bytes[..take], &mut on_event)?;
                    let left = n - take as u64;
                    (
                        take,
                        if left == 0 {
                            Chunk::DataEnd
                        } else {
                            Chunk::Data(left)
                        },
                    )
                }
                Chunk::DataEnd => match bytes[0] {
                    b'\r' => (1, Chunk::DataEnd),
                    b'\n' => (1, Chunk::Size),
                    _ => return Err(Error::Chunk("chunk data not followed by CRLF")),
                },
                Chunk::Size | Chunk::Trailer => {
                    let Some(i) = bytes.iter().position(|&b| b == b'\n') else {
                        self.size_line.extend_from_slice(bytes);
                        // As below: the line's CR is not counted against the cap.
                        if self.size_line.len() > MAX_CHUNK_LINE + 1 {
                            return Err(Error::Chunk("chunk-size or trailer line too long"));
                        }
                        return Ok(());
                    };
                    self.size_line.extend_from_slice(&bytes[..i]);
                    if self.size_line.len() > MAX_CHUNK_LINE + 1 {
                        return Err(Error::Chunk("chunk-size or trailer line too long"));
                    }
                    let line = std::mem::take(&mut self.size_line);
                    let line = line.strip_suffix(b"\r").unwrap_or(&line);
                    let next = match self.chunk {
                        Chunk::Trailer if line.is_empty() => Chunk::Done,
                        Chunk::Trailer => Chunk::Trailer,
                        _ => match chunk_size(line).map_err(|_| Error::Chunk("bad chunk size"))? {
                            0 => Chunk::Trailer,
                            n => Chunk::Data(n),
                        },
                    };
                    (i + 1, next)
                }
                Chunk::Done => return Ok(()),
            };
            self.chunk = state;
            bytes = &bytes[taken..];
        }
        Ok(())
    }

    /// The stream's own bytes (the body without its chunked encoding).
    fn lines(&mut self, mut bytes: &[u8], on_event: &mut impl FnMut(Event)) -> Result<(), Error> {
        if std::mem::take(&mut self.after_cr) && bytes.first() == Some(&b'\n') {
            bytes = &bytes[1..];
        }
        while let Some(i) = bytes.iter().position(|&b| b == b'\r' || b == b'\n') {
            self.push(&bytes[..i])?;
            let line = std::mem::take(&mut self.line);
            self.field(&line, on_event)?;
            self.line = line;
            self.line.clear();
            let crlf = bytes[i] == b'\r' && bytes.get(i + 1) == Some(&b'\n');
            self.after_cr = bytes[i] == b'\r' && i + 1 == bytes.len();
            bytes = &bytes[i + if crlf { 2 } else { 1 }..];
        }
        self.push(bytes)
    }

    fn push(&mut self, part: &[u8]) -> Result<(), Error> {
        if self.line.len() + part.len() > self.max {
            return Err(Error::LineTooLong(self.max));
        }
        self.line.extend_from_slice(part);
        Ok(())
    }

    /// One whole line.
    fn field(&mut self, line: &[u8], on_event: &mut impl FnMut(Event)) -> Result<(), Error> {
        let line = match std::mem::replace(&mut self.first, false) {
            true => line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line),
            false => line,
        };
        if line.is_empty() {
            let kind = std::mem::take(&mut self.kind);
            if !self.data.is_empty() {
                let mut data = std::mem::take(&mut self.data);
                data.pop();
                let kind = if kind.is_empty() {
                    "message".into()
                } else {
                    kind
                };
                on_event(Event { kind, data });
            }
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        let value = String::from_utf8_lossy(value);
        match name {
            b"event" => self.kind = value.into_owned(),
            b"data" => {
                if self.data.len() + value.len() + 1 > self.max {
                    return Err(Error::EventTooLong(self.max));
                }
                self.data.push_str(&value);
                self.data.push('\n');
            }
            // `id` and `retry` serve reconnection, which the caller decides itself.
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Decoder, Error, Event};

    /// A stream as RFC 8620 §7.3's example and the embedded server send it: a comment, a
    /// state event, a ping, an event of two data lines, mixed line ends, a field with no
    /// value, one with no space after its colon, unknown fields, an event with no data.
    const STREAM: &[u8] = b"\xef\xbb\xbf: hello\r\n\r\n\
event: state\ndata: {\"@type\":\"StateChange\",\"changed\":{\"a1\":{\"Email\":\"s2\"}}}\n\n\
event: ping\r\ndata: {\"interval\":30}\r\n\r\n\
id: 7\rretry: 1000\rdata:first\rdata\rdata:  third\r\r\
event: lonely\n\n\
data: last\n\n";

    fn want() -> Vec<Event> {
        let e = |kind: &str, data: &str| Event {
            kind: kind.into(),
            data: data.into(),
        };
        vec![
            e(
                "state",
                "{\"@type\":\"StateChange\",\"changed\":{\"a1\":{\"Email\":\"s2\"}}}",
            ),
            e("ping", "{\"interval\":30}"),
            e("message", "first\n\n third"),
            e("message", "last"),
        ]
    }

    fn decode(chunked: bool, pieces: &[&[u8]]) -> Result<Vec<Event>, Error> {
        let mut d = Decoder::new(chunked, 4096);
        let mut out = Vec::new();
        for p in pieces {
            d.feed(p, |e| out.push(e))?;
        }
        Ok(out)
    }

    fn chunked(body: &[u8], size: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for c in body.chunks(size) {
            out.extend_from_slice(format!("{:x};ext=1\r\n", c.len()).as_bytes());
            out.extend_from_slice(c);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\nX-Trailer: 1\r\n\r\n");
        out
    }

    #[test]
    fn events_decode_the_same_however_the_bytes_are_split() {
        assert_eq!(decode(false, &[STREAM]).unwrap(), want());
        for i in 0..=STREAM.len() {
            for j in i..=STREAM.len() {
                let got = decode(false, &[&STREAM[..i], &STREAM[i..j], &STREAM[j..]]).unwrap();
                assert_eq!(got, want(), "cut at {i} and {j}");
            }
        }
    }

    #[test]
    fn a_chunked_body_decodes_the_same_however_it_is_chunked_and_split() {
        for size in [1, 2, 7, 64, STREAM.len()] {
            let wire = chunked(STREAM, size);
            for i in 0..=wire.len() {
                let mut d = Decoder::new(true, 4096);
                let mut out = Vec::new();
                d.feed(&wire[..i], |e| out.push(e)).unwrap();
                assert!(!d.ended() || i == wire.len());
                d.feed(&wire[i..], |e| out.push(e)).unwrap();
                assert_eq!(out, want(), "chunks of {size}, cut at {i}");
                assert!(d.ended());
            }
        }
    }

    #[test]
    fn a_cr_line_end_then_lf_in_the_next_read_is_one_line_end() {
        // "data: a\r" | "\ndata: b\r\n\r\n": one event of two lines, not two events.
        let got = decode(false, &[b"data: a\r", b"\ndata: b\r\n\r\n"]).unwrap();
        assert_eq!(got[0].data, "a\nb");
        assert_eq!(got.len(), 1);
    }

    proptest::proptest! {
        /// Any bytes (of the stream's own alphabet), chunked or not, cut anywhere: the
        /// events and the error are those of the bytes fed at once; no event over the cap.
        #[test]
        fn any_split_decodes_the_same(
            data in proptest::collection::vec(proptest::sample::select(
                b"data:event: \r\n:0a1;ping".to_vec()), 0..200),
            chunked: bool,
            cap in 4usize..64,
            c1: usize,
            c2: usize,
        ) {
            let run = |pieces: &[&[u8]]| {
                let mut d = Decoder::new(chunked, cap);
                let mut out = Vec::new();
                for p in pieces {
                    if let Err(e) = d.feed(p, |e| out.push(e)) {
                        return (out, Some(e), d.ended());
                    }
                }
                (out, None, d.ended())
            };
            let whole = run(&[&data]);
            proptest::prop_assert!(whole.0.iter().all(|e| e.data.len() <= cap));
            let n = data.len().max(1);
            let mut cuts = [(c1 % n).min(data.len()), (c2 % n).min(data.len())];
            cuts.sort_unstable();
            let split = run(&[&data[..cuts[0]], &data[cuts[0]..cuts[1]], &data[cuts[1]..]]);
            proptest::prop_assert_eq!(split, whole);
        }
    }

    #[test]
    fn long_lines_and_events_and_broken_chunks_are_errors() {
        let mut d = Decoder::new(false, 16);
        let long = [b'x'; 17];
        assert_eq!(d.feed(&long, |_| {}), Err(Error::LineTooLong(16)));
        let mut d = Decoder::new(false, 16);
        let r = d.feed(b"data: 01234567\ndata: 01234567\n", |_| {});
        assert_eq!(r, Err(Error::EventTooLong(16)));
        let mut d = Decoder::new(true, 16);
        assert!(matches!(d.feed(b"zz\r\n", |_| {}), Err(Error::Chunk(_))));
        let mut d = Decoder::new(true, 16);
        assert!(matches!(d.feed(b"1\r\nab", |_| {}), Err(Error::Chunk(_))));
        let mut d = Decoder::new(true, 16);
        let endless = vec![b'1'; 2000];
        assert!(matches!(d.feed(&endless, |_| {}), Err(Error::Chunk(_))));
    }
}
