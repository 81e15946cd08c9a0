//! Dot-stuffing (RFC 5321 4.5.2, RFC 1939 3): the one stuffer for everything spate sends
//! with a terminating dot (SMTP DATA from the client, POP3 multi-line responses from the
//! embedded server), and its reverse for what a client reads.

/// Appends `data` to `out` with SMTP dot-stuffing and CRLF line endings (bare LF becomes
/// CRLF), followed by the terminating `.CRLF`.
pub fn stuff_into(data: &[u8], out: &mut Vec<u8>) {
    out.reserve(data.len() + 8);
    let mut at_line_start = true;
    let mut prev = 0u8;
    for &b in data {
        if at_line_start && b == b'.' {
            out.push(b'.');
        }
        if b == b'\n' && prev != b'\r' {
            out.push(b'\r');
        }
        out.push(b);
        at_line_start = b == b'\n';
        prev = b;
    }
    if !at_line_start {
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b".\r\n");
}

/// [`stuff_into`] a new buffer.
pub fn stuff(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    stuff_into(data, &mut out);
    out
}

/// Removes dot-stuffing (RFC 1939 3): a line starting with "." loses that dot.
pub fn unstuff(data: &[u8], out: &mut Vec<u8>) {
    out.reserve(data.len());
    for line in data.split_inclusive(|&b| b == b'\n') {
        out.extend_from_slice(line.strip_prefix(b".").unwrap_or(line));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_stuffing() {
        let mut out = Vec::new();
        stuff_into(b".hidden\nline\r\n..two", &mut out);
        assert_eq!(out, b"..hidden\r\nline\r\n...two\r\n.\r\n");
    }

    #[test]
    fn stuff_then_unstuff_is_the_crlf_message() {
        let msg = b".a\n..b\r\nc";
        let wire = stuff(msg);
        assert_eq!(wire, b"..a\r\n...b\r\nc\r\n.\r\n");
        let mut back = Vec::new();
        unstuff(&wire[..wire.len() - 3], &mut back);
        assert_eq!(back, b".a\r\n..b\r\nc\r\n");
    }
}
