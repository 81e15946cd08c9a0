//! Server side: the DATA body decoder (RFC 5321 4.1.1.4, 4.5.2).
//!
//! Feed it the bytes that follow the `354` reply, in chunks of any size; it removes dot
//! stuffing, finds the terminating `CRLF.CRLF`, and stops consuming exactly there so that
//! pipelined commands after the dot stay in the caller's buffer. The message is capped:
//! past `max` bytes it stops storing but keeps scanning to the end, so the server can
//! answer `552` at the right moment instead of mid-stream.
//!
//! Only `CRLF.CRLF` ends the data. A bare LF (or `LF.LF`) never does: that is the SMTP
//! smuggling defence. What happens to bare LFs is the [`BareLf`] policy.

/// What to do with an LF not preceded by CR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BareLf {
    /// Store it as CRLF (what most servers do with sloppy clients).
    #[default]
    Normalize,
    /// Store it as CRLF but report it, so the server can refuse the message (550 5.6.0).
    Reject,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    LineStart,
    Mid,
    Cr,
    Dot,
    DotCr,
    Done,
}

/// How far one `feed` got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fed {
    /// Bytes of the input consumed (everything, or up to and including the final LF).
    pub consumed: usize,
    /// The terminating `CRLF.CRLF` was seen.
    pub done: bool,
}

#[derive(Debug)]
pub struct DataDecoder {
    state: State,
    out: Vec<u8>,
    size: u64,
    max: u64,
    policy: BareLf,
    bare_lf: bool,
}

impl DataDecoder {
    /// `max` is the largest message (after unstuffing) that will be kept; 0 = no cap.
    pub fn new(max: u64, policy: BareLf) -> Self {
        Self::with_buffer(max, policy, Vec::new())
    }

    /// [`DataDecoder::new`], decoding into `out` (cleared first): a buffer that held an
    /// earlier message has room for this one.
    pub fn with_buffer(max: u64, policy: BareLf, mut out: Vec<u8>) -> Self {
        out.clear();
        DataDecoder {
            state: State::LineStart,
            out,
            size: 0,
            max,
            policy,
            bare_lf: false,
        }
    }

    fn emit(&mut self, bytes: &[u8]) {
        self.size += bytes.len() as u64;
        if self.max > 0 && self.size > self.max {
            if !self.out.is_empty() {
                self.out = Vec::new();
            }
            return;
        }
        self.out.extend_from_slice(bytes);
    }

    fn lf(&mut self) {
        self.bare_lf = true;
        self.emit(b"\r\n");
    }

    /// Consumes input up to the end of the data (or all of it).
    pub fn feed(&mut self, input: &[u8]) -> Fed {
        let mut i = 0;
        while i < input.len() {
            if self.state == State::Done {
                break;
            }
            // Fast path: copy a run of ordinary bytes in the middle of a line.
            if self.state == State::Mid {
                let run = memchr::memchr2(b'\r', b'\n', &input[i..]).unwrap_or(input.len() - i);
                if run > 0 {
                    self.emit(&input[i..i + run]);
                    i += run;
                    continue;
                }
            }
            let b = input[i];
            i += 1;
            self.step(b);
        }
        Fed {
            consumed: i,
            done: self.state == State::Done,
        }
    }

    fn step(&mut self, b: u8) {
        self.state = match (self.state, b) {
            (State::Done, _) => State::Done,
            (State::LineStart, b'.') => State::Dot,
            (State::LineStart | State::Mid, b'\r') => State::Cr,
            (State::LineStart | State::Mid, b'\n') => {
                self.lf();
                State::LineStart
            }
            (State::LineStart | State::Mid, _) => {
                self.emit(&[b]);
                State::Mid
            }
            (State::Cr, b'\n') => {
                self.emit(b"\r\n");
                State::LineStart
            }
            (State::Cr, b'\r') => {
                self.emit(b"\r");
                State::Cr
            }
            (State::Cr, _) => {
                self.emit(&[b'\r', b]);
                State::Mid
            }
            // A leading dot is removed (unstuffing); what follows is ordinary line content.
            (State::Dot, b'\r') => State::DotCr,
            (State::Dot, b'\n') => {
                self.lf();
                State::LineStart
            }
            (State::Dot, _) => {
                self.emit(&[b]);
                State::Mid
            }
            (State::DotCr, b'\n') => State::Done,
            (State::DotCr, b'\r') => {
                self.emit(b"\r");
                State::Cr
            }
            (State::DotCr, _) => {
                self.emit(&[b'\r', b]);
                State::Mid
            }
        };
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Bytes of message seen so far (after unstuffing), also beyond the cap.
    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn oversized(&self) -> bool {
        self.max > 0 && self.size > self.max
    }

    /// A bare LF was seen and the policy says to refuse the message.
    pub fn refused_bare_lf(&self) -> bool {
        self.bare_lf && self.policy == BareLf::Reject
    }

    pub fn saw_bare_lf(&self) -> bool {
        self.bare_lf
    }

    /// The message (empty if oversized); leaves the decoder empty.
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(input: &[u8], max: u64) -> (Vec<u8>, Fed, DataDecoder) {
        let mut d = DataDecoder::new(max, BareLf::Normalize);
        let p = d.feed(input);
        (d.take(), p, d)
    }

    #[test]
    fn known_answers() {
        let (m, p, _) = decode_all(b"Subject: x\r\n\r\n..dot\r\n.\r\nQUIT\r\n", 0);
        assert_eq!(m, b"Subject: x\r\n\r\n.dot\r\n");
        assert!(p.done);
        assert_eq!(p.consumed, 24, "stops right after the terminator");

        let (m, p, _) = decode_all(b".\r\n", 0);
        assert!(m.is_empty() && p.done && p.consumed == 3);

        let (m, p, _) = decode_all(b"a\r\n.x\r\n", 0);
        assert_eq!(m, b"a\r\nx\r\n");
        assert!(!p.done);
    }

    #[test]
    fn bare_lf_never_ends_data() {
        let (m, p, d) = decode_all(b"a\n.\nb\r\n.\r\n", 0);
        assert!(p.done);
        assert_eq!(m, b"a\r\n\r\nb\r\n");
        assert!(d.saw_bare_lf());
        assert!(!d.refused_bare_lf());
        let mut d = DataDecoder::new(0, BareLf::Reject);
        assert!(d.feed(b"x\ny\r\n.\r\n").done);
        assert!(d.refused_bare_lf());
        // Bare CR is kept as is and does not end the data either.
        let (m, p, _) = decode_all(b"a\r.\rb\r\n.\r\n", 0);
        assert!(p.done);
        assert_eq!(m, b"a\r.\rb\r\n");
    }

    #[test]
    fn oversize_keeps_consuming_to_the_end() {
        let body = vec![b'x'; 1000];
        let mut input = body.clone();
        input.extend_from_slice(b"\r\n.\r\nNOOP\r\n");
        let (m, p, d) = decode_all(&input, 100);
        assert!(p.done);
        assert!(m.is_empty());
        assert!(d.oversized());
        assert_eq!(d.size(), 1002);
        assert_eq!(p.consumed, input.len() - 6);
        // Exactly at the cap is fine.
        let (m, _, d) = decode_all(b"12345678\r\n.\r\n", 10);
        assert!(!d.oversized());
        assert_eq!(m.len(), 10);
    }

    #[test]
    fn stuff_round_trips() {
        let msg = b".a\r\n..b\r\nc\r\n.\r\n";
        let wire = crate::proto::dot::stuff(msg);
        let (m, p, _) = decode_all(&wire, 0);
        assert!(p.done);
        assert_eq!(m, msg);
    }

    proptest::proptest! {
        #[test]
        fn any_split_gives_the_same_result(
            lines in proptest::collection::vec("[.a-z\r\n]{0,12}", 0..12),
            cuts in proptest::collection::vec(0usize..400, 0..8),
        ) {
            let mut input = lines.join("\r\n").into_bytes();
            input.extend_from_slice(b"\r\n.\r\nRSET\r\n");
            let (whole, p, _) = decode_all(&input, 0);
            proptest::prop_assert!(p.done);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (input.len() + 1)).collect();
            cuts.sort_unstable();
            let mut d = DataDecoder::new(0, BareLf::Normalize);
            let mut pos = 0;
            let mut done = false;
            for end in cuts.into_iter().chain([input.len()]) {
                if end < pos || done {
                    continue;
                }
                let pr = d.feed(&input[pos..end]);
                pos += pr.consumed;
                done = pr.done;
            }
            proptest::prop_assert!(done);
            proptest::prop_assert_eq!(pos, p.consumed);
            proptest::prop_assert_eq!(d.take(), whole);
        }

        #[test]
        fn stuffing_round_trips(msg in proptest::collection::vec("[.a-z]{0,6}", 0..10)) {
            let mut m = msg.join("\r\n").into_bytes();
            if !m.is_empty() { m.extend_from_slice(b"\r\n"); }
            let (out, p, _) = decode_all(&crate::proto::dot::stuff(&m), 0);
            proptest::prop_assert!(p.done);
            proptest::prop_assert_eq!(out, m);
        }
    }
}
