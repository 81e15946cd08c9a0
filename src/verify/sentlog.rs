//! Reader of sent.log (written by results/writer.rs): one line per message the server
//! accepted or may have, `seq at digest bytes from recipients outcome` separated by tabs,
//! after a `# spate sent log v2 run=<id>` comment and a header line. A v1 log has no
//! outcome column: every line is an accepted message.
//!
//! A sent log can hold millions of lines, so each message is a small fixed record and
//! addresses are interned once.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

/// Addresses (lowercased) to small ids and back.
#[derive(Debug, Default)]
pub struct Interner {
    names: Vec<Box<str>>,
    ids: HashMap<Box<str>, u32>,
}

impl Interner {
    /// The id of `name` (lowercased), adding it if new.
    pub fn intern(&mut self, name: &str) -> u32 {
        let key = name.trim().to_ascii_lowercase();
        if let Some(&id) = self.ids.get(key.as_str()) {
            return id;
        }
        let id = self.names.len() as u32;
        let key: Box<str> = key.into_boxed_str();
        self.names.push(key.clone());
        self.ids.insert(key, id);
        id
    }

    /// The id of `name` if it was interned.
    pub fn get(&self, name: &str) -> Option<u32> {
        let name = name.trim();
        // Called for every file a Maildir poll lists: no copy when there is nothing to lower.
        if !name.bytes().any(|b| b.is_ascii_uppercase()) {
            return self.ids.get(name).copied();
        }
        self.ids.get(name.to_ascii_lowercase().as_str()).copied()
    }

    pub fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// One message: 32 bytes.
#[derive(Debug, Clone, Copy)]
pub struct Sent {
    pub seq: u64,
    /// When the server's final reply arrived (µs since the Unix epoch); for a message
    /// not accepted, when its end of data went out.
    pub accepted_us: i64,
    pub outcome: SentOutcome,
    pub from: u32,
    rcpt_start: u32,
    rcpt_len: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum SentLogError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a spate sent log (first line should be '# spate sent log v1 run=...')")]
    NotASentLog { path: String },
    #[error("{path} line {line}: {what}")]
    Line {
        path: String,
        line: usize,
        what: String,
    },
}

pub use crate::metrics::SentOutcome;

/// The whole sent log, sorted by seq.
#[derive(Debug, Default)]
pub struct SentLog {
    pub run_id: String,
    pub messages: Vec<Sent>,
    rcpts: Vec<u32>,
    /// Per entry of `rcpts`: written `?rcpt`, a recipient of an accepted LMTP message that
    /// got no final reply of its own (the server may have delivered to it or not).
    unsure: Vec<bool>,
    /// Senders and recipients share one table.
    pub addrs: Interner,
    /// Start of the run (µs since the epoch): summary.json's started_at, else the first
    /// accept time.
    pub start_us: i64,
}

impl SentLog {
    /// Reads DIR/sent.log (and DIR/summary.json's start time when present).
    pub fn read_dir(dir: &Path) -> Result<SentLog, SentLogError> {
        let path = dir.join("sent.log");
        let file = std::fs::File::open(&path).map_err(|source| SentLogError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let mut log = SentLog::parse(std::io::BufReader::new(file), &path.display().to_string())?;
        if let Some(start) = summary_start(dir) {
            log.start_us = start;
        }
        Ok(log)
    }

    /// Parses a sent log from any reader; `path` only names it in errors.
    pub fn parse(reader: impl BufRead, path: &str) -> Result<SentLog, SentLogError> {
        let mut log = SentLog::default();
        let io = |source| SentLogError::Io {
            path: path.to_string(),
            source,
        };
        let bad = |line: usize, what: &str| SentLogError::Line {
            path: path.to_string(),
            line,
            what: what.to_string(),
        };
        let mut lines = reader.lines();
        let first = lines.next().transpose().map_err(io)?.unwrap_or_default();
        let run = first
            .strip_prefix("# spate sent log v1 run=")
            .or_else(|| first.strip_prefix("# spate sent log v2 run="))
            .map(|r| r.split_whitespace().next().unwrap_or(""))
            .filter(|r| !r.is_empty())
            .ok_or_else(|| SentLogError::NotASentLog {
                path: path.to_string(),
            })?;
        log.run_id = run.to_string();
        let mut sorted = true;
        for (i, line) in lines.enumerate() {
            let n = i + 2;
            let line = line.map_err(io)?;
            if line.is_empty() || line.starts_with('#') || line.starts_with("seq\t") {
                continue;
            }
            let mut f = line.split('\t');
            let (Some(seq), Some(at), Some(_digest), Some(_bytes), Some(from), Some(rcpts)) =
                (f.next(), f.next(), f.next(), f.next(), f.next(), f.next())
            else {
                return Err(bad(n, "expected 6 tab-separated fields"));
            };
            let seq: u64 = seq.parse().map_err(|_| bad(n, "bad seq"))?;
            let accepted_us = chrono::DateTime::parse_from_rfc3339(at)
                .map_err(|_| bad(n, "bad time"))?
                .timestamp_micros();
            let outcome = match f.next() {
                None => SentOutcome::Accepted,
                Some(o) => SentOutcome::parse(o)
                    .ok_or_else(|| bad(n, "bad outcome (accepted, indeterminate or unfinished)"))?,
            };
            let from = log.addrs.intern(from);
            let rcpt_start = log.rcpts.len() as u32;
            for r in rcpts.split(',').filter(|r| !r.is_empty()) {
                let (unsure, r) = match r.strip_prefix('?') {
                    Some(r) => (true, r),
                    None => (false, r),
                };
                let id = log.addrs.intern(r);
                log.rcpts.push(id);
                log.unsure.push(unsure);
            }
            let rcpt_len = log.rcpts.len() as u32 - rcpt_start;
            if log.messages.last().is_some_and(|m| m.seq > seq) {
                sorted = false;
            }
            log.messages.push(Sent {
                seq,
                accepted_us,
                outcome,
                from,
                rcpt_start,
                rcpt_len,
            });
        }
        // Sessions finish out of order; lookups by seq need them sorted.
        if !sorted {
            log.messages.sort_unstable_by_key(|m| m.seq);
        }
        log.start_us = log
            .messages
            .iter()
            .map(|m| m.accepted_us)
            .min()
            .unwrap_or(0);
        Ok(log)
    }

    pub fn recipients(&self, m: &Sent) -> &[u32] {
        &self.rcpts[m.rcpt_start as usize..][..m.rcpt_len as usize]
    }

    /// Per recipient of `m` (as [`SentLog::recipients`] lists them): whether its own
    /// final reply never came (LMTP), so its delivery is neither expected nor missing.
    pub fn unsure(&self, m: &Sent) -> &[bool] {
        &self.unsure[m.rcpt_start as usize..][..m.rcpt_len as usize]
    }

    pub fn find(&self, seq: u64) -> Option<&Sent> {
        self.messages
            .binary_search_by_key(&seq, |m| m.seq)
            .ok()
            .map(|i| &self.messages[i])
    }

    /// Deliveries the log names: its messages × their recipients (an upper bound on
    /// those expected: a message not accepted is not expected).
    pub fn deliveries(&self) -> u64 {
        self.rcpts.len() as u64
    }

    /// The messages the server accepted.
    pub fn accepted(&self) -> impl Iterator<Item = &Sent> {
        self.messages
            .iter()
            .filter(|m| m.outcome == SentOutcome::Accepted)
    }
}

/// summary.json's `started_at` in µs since the epoch, if the file is there and has it.
fn summary_start(dir: &Path) -> Option<i64> {
    let text = std::fs::read_to_string(dir.join("summary.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let at = v.get("started_at")?.as_str()?;
    Some(
        chrono::DateTime::parse_from_rfc3339(at)
            .ok()?
            .timestamp_micros(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_sorts() {
        let text = "# spate sent log v1 run=abc — one line per accepted message\n\
            seq\taccepted_at\tdigest\tbytes\tfrom\trecipients\n\
            2\t2026-01-01T00:00:01.000000Z\t00\t10\ts@x.test\tA@x.test,b@x.test\n\
            1\t2026-01-01T00:00:00.500000Z\t00\t10\ts@x.test\ta@x.test\n";
        let log = SentLog::parse(text.as_bytes(), "t").unwrap();
        assert_eq!(log.run_id, "abc");
        assert_eq!(log.messages.len(), 2);
        assert_eq!(log.messages[0].seq, 1);
        assert_eq!(log.deliveries(), 3);
        let m = log.find(2).unwrap();
        let r: Vec<&str> = log
            .recipients(m)
            .iter()
            .map(|&i| log.addrs.name(i))
            .collect();
        assert_eq!(r, ["a@x.test", "b@x.test"]);
        assert_eq!(log.start_us, log.messages[0].accepted_us);
        assert!(log.find(3).is_none());
    }

    #[test]
    fn a_v2_log_says_which_messages_were_not_accepted() {
        let text = "# spate sent log v2 run=abc — one line per message\n\
            seq\tat\tdigest\tbytes\tfrom\trecipients\toutcome\n\
            1\t2026-01-01T00:00:00.500000Z\t00\t10\ts@x.test\ta@x.test\taccepted\n\
            2\t2026-01-01T00:00:01.000000Z\t00\t10\ts@x.test\ta@x.test\tindeterminate\n\
            3\t2026-01-01T00:00:01.000000Z\t00\t10\ts@x.test\ta@x.test\tunfinished\n";
        let log = SentLog::parse(text.as_bytes(), "t").unwrap();
        let o: Vec<SentOutcome> = log.messages.iter().map(|m| m.outcome).collect();
        assert_eq!(
            o,
            [
                SentOutcome::Accepted,
                SentOutcome::Indeterminate,
                SentOutcome::Unfinished
            ]
        );
        assert_eq!(log.accepted().count(), 1);
        let bad = text.replace("\tunfinished", "\tmaybe");
        let e = SentLog::parse(bad.as_bytes(), "t").unwrap_err().to_string();
        assert!(e.contains("line 5") && e.contains("bad outcome"), "{e}");
    }

    #[test]
    fn rejects_other_files() {
        assert!(matches!(
            SentLog::parse("hello\n".as_bytes(), "t"),
            Err(SentLogError::NotASentLog { .. })
        ));
        let text = "# spate sent log v1 run=abc\nx\ty\n";
        assert!(matches!(
            SentLog::parse(text.as_bytes(), "t"),
            Err(SentLogError::Line { line: 2, .. })
        ));
    }
}
