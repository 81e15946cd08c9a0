//! Reading what verification needs out of a received message: headers (unfolded), the
//! tracking header, spate Message-IDs, traces returned inside a bounce, DSN recipients and
//! the delivery time a server stamped.

use crate::message::TRACE_HEADER;

/// The parsed `X-Spate-Trace` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    pub run: String,
    pub seq: u64,
    pub digest: Option<[u8; 16]>,
}

/// Every header as (name, unfolded value), in order.
pub fn headers(head: &[u8]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in head.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            break;
        }
        let text = String::from_utf8_lossy(line);
        if line[0] == b' ' || line[0] == b'\t' {
            if let Some(last) = out.last_mut() {
                last.1.push(' ');
                last.1.push_str(text.trim());
            }
        } else if let Some((name, value)) = text.split_once(':') {
            out.push((name.trim().to_string(), value.trim().to_string()));
        }
    }
    out
}

/// The first value of header `name` (case-insensitive).
pub fn header<'a>(hs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    hs.iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Parses `run=<id>; seq=<n>; sent=..; digest=<hex>; size=..`.
pub fn parse_trace(value: &str) -> Option<Trace> {
    let mut run = None;
    let mut seq = None;
    let mut digest = None;
    for part in value.split(';') {
        let Some((k, v)) = part.trim().split_once('=') else {
            continue;
        };
        match k.trim() {
            "run" => run = Some(v.trim().to_string()),
            "seq" => seq = v.trim().parse().ok(),
            "digest" => digest = unhex(v.trim()),
            _ => {}
        }
    }
    Some(Trace {
        run: run.filter(|r| !r.is_empty())?,
        seq: seq?,
        digest,
    })
}

fn unhex(s: &str) -> Option<[u8; 16]> {
    let b = s.as_bytes();
    if b.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, pair) in b.chunks(2).enumerate() {
        let v = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(v, 16).ok()?;
    }
    Some(out)
}

/// Every spate Message-ID (`<seq.run@spate.invalid>`) in a header value, as (run, seq).
pub fn spate_message_ids(value: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for part in value.split('<').skip(1) {
        let Some(id) = part.split('>').next() else {
            continue;
        };
        let Some(local) = id.strip_suffix("@spate.invalid") else {
            continue;
        };
        if let Some((seq, run)) = local.split_once('.') {
            if let Ok(seq) = seq.parse() {
                out.push((run.to_string(), seq));
            }
        }
    }
    out
}

/// Every X-Spate-Trace line inside a body (the original's headers returned in a bounce).
pub fn traces_in_body(body: &[u8]) -> Vec<Trace> {
    let needle = TRACE_HEADER.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i + needle.len() < body.len() {
        let Some(pos) = body[i..]
            .windows(needle.len())
            .position(|w| w.eq_ignore_ascii_case(needle))
        else {
            break;
        };
        let start = i + pos + needle.len();
        let end = body[start..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(body.len(), |e| start + e);
        let line = String::from_utf8_lossy(&body[start..end]);
        if let Some(t) = line.trim().strip_prefix(':').and_then(parse_trace) {
            out.push(t);
        }
        i = end;
    }
    out
}

/// The recipients a delivery status notification reports (Final-Recipient fields, else
/// Original-Recipient), lowercased.
pub fn dsn_recipients(body: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(body);
    let pick = |field: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| {
                let (name, value) = l.split_once(':')?;
                if !name.trim().eq_ignore_ascii_case(field) {
                    return None;
                }
                // "rfc822; user@example.test"
                let addr = value.rsplit(';').next()?.trim();
                let addr = addr.trim_start_matches('<').trim_end_matches('>');
                (!addr.is_empty()).then(|| addr.to_ascii_lowercase())
            })
            .collect()
    };
    let finals = pick("Final-Recipient");
    if finals.is_empty() {
        pick("Original-Recipient")
    } else {
        finals
    }
}

/// When the receiving server says it delivered the message: the date of the topmost
/// Received header (or Delivery-Date), in µs since the epoch. Second precision at best.
pub fn header_arrival_us(hs: &[(String, String)]) -> Option<i64> {
    let value = header(hs, "Received")
        .and_then(|v| v.rsplit(';').next())
        .or_else(|| header(hs, "Delivery-Date"))?;
    // Drop a trailing comment such as "(UTC)".
    let value = match value.find('(') {
        Some(i) => &value[..i],
        None => value,
    };
    chrono::DateTime::parse_from_rfc2822(value.trim())
        .ok()
        .map(|d| d.timestamp_micros())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_unfold() {
        let hs = headers(b"To: <a@x>,\r\n <b@x>\r\nSubject: hi\r\n\r\nbody\r\n");
        assert_eq!(header(&hs, "to"), Some("<a@x>, <b@x>"));
        assert_eq!(header(&hs, "SUBJECT"), Some("hi"));
        assert_eq!(header(&hs, "body"), None);
    }

    #[test]
    fn traces_and_ids() {
        let t =
            parse_trace("run=ab12; seq=7; sent=1; digest=000102030405060708090a0b0c0d0e0f; size=3")
                .unwrap();
        assert_eq!((t.run.as_str(), t.seq), ("ab12", 7));
        assert_eq!(t.digest.unwrap()[15], 15);
        assert!(parse_trace("run=; seq=7").is_none());
        assert_eq!(
            spate_message_ids("<x@y> <7.ab12@spate.invalid>"),
            vec![("ab12".to_string(), 7)]
        );
        let body = b"This is a bounce\nx-spate-trace: run=r; seq=9; digest=zz\nFinal-Recipient: rfc822; Ghost@X.test\nAction: failed\n";
        assert_eq!(traces_in_body(body)[0].seq, 9);
        assert_eq!(dsn_recipients(body), vec!["ghost@x.test"]);
    }

    #[test]
    fn received_date() {
        let hs = headers(
            b"Received: from a by b; Sun, 22 Nov 2026 11:17:04 +0000 (UTC)\r\nReceived: x; Sun, 22 Nov 2026 11:17:00 +0000\r\n\r\n",
        );
        let t = header_arrival_us(&hs).unwrap();
        assert_eq!(t % 60_000_000, 4_000_000);
    }
}
