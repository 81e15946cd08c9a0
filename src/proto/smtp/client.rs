//! The client's commands, encoded into a reused buffer (no allocation per command).

use std::io::Write as _;

/// `EHLO name` or, for LMTP, `LHLO name`.
pub fn hello(out: &mut Vec<u8>, lmtp: bool, name: &str) {
    out.extend_from_slice(if lmtp { b"LHLO " } else { b"EHLO " });
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `MAIL FROM:<from>`, with the message size when the server takes SIZE (RFC 1870).
pub fn mail(out: &mut Vec<u8>, from: &str, size: Option<usize>) {
    let _ = write!(out, "MAIL FROM:<{from}>");
    if let Some(n) = size {
        let _ = write!(out, " SIZE={n}");
    }
    out.extend_from_slice(b"\r\n");
}

/// `RCPT TO:<to>`, with DSN's NOTIFY when asked for (RFC 3461).
pub fn rcpt(out: &mut Vec<u8>, to: &str, notify: Option<&str>) {
    let _ = write!(out, "RCPT TO:<{to}>");
    if let Some(n) = notify {
        let _ = write!(out, " NOTIFY={n}");
    }
    out.extend_from_slice(b"\r\n");
}

pub const DATA: &[u8] = b"DATA\r\n";

/// `BDAT <size> LAST` (RFC 3030): the whole message in one chunk follows.
pub fn bdat_last(out: &mut Vec<u8>, size: usize) {
    let _ = write!(out, "BDAT {size} LAST\r\n");
}
pub const RSET: &[u8] = b"RSET\r\n";
pub const QUIT: &[u8] = b"QUIT\r\n";
pub const STARTTLS: &[u8] = b"STARTTLS\r\n";

/// `AUTH MECH` with an optional initial response.
pub fn auth(out: &mut Vec<u8>, mechanism: &str, initial: Option<&str>) {
    out.extend_from_slice(b"AUTH ");
    out.extend_from_slice(mechanism.as_bytes());
    if let Some(ir) = initial {
        out.push(b' ');
        out.extend_from_slice(ir.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
}

/// One SASL response line.
pub fn response(out: &mut Vec<u8>, line: &str) {
    out.extend_from_slice(line.as_bytes());
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_encode_as_rfc_5321_writes_them() {
        let mut b = Vec::new();
        hello(&mut b, true, "x.test");
        mail(&mut b, "a@x", Some(1024));
        rcpt(&mut b, "b@y", Some("SUCCESS,FAILURE"));
        rcpt(&mut b, "c@y", None);
        auth(&mut b, "PLAIN", Some("AGEAYg=="));
        assert_eq!(
            String::from_utf8(b).unwrap(),
            "LHLO x.test\r\nMAIL FROM:<a@x> SIZE=1024\r\nRCPT TO:<b@y> NOTIFY=SUCCESS,FAILURE\r\n\
             RCPT TO:<c@y>\r\nAUTH PLAIN AGEAYg==\r\n"
        );
    }
}
