//! Histograms by label in one HdrHistogram interval log, one tagged line per label and
//! interval (`Tag=hit,0.000,1.000,…`): rr's request classes. Rows follow `--detail` as
//! the phase logs do, so their size is bounded on a run of days.

use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;

use super::writer::{Coarse, HlogFile};

pub struct TaggedLog {
    file: HlogFile,
    /// The labels as written (see [`encode_tag`]), in the order of the histograms.
    tags: Vec<String>,
    coarse: Coarse<Vec<Histogram<u64>>>,
}

impl TaggedLog {
    /// Creates `path` for histograms labelled `labels`; `what` names the values.
    pub fn create(
        path: &Path,
        what: &str,
        start: SystemTime,
        labels: &[String],
        detail: Duration,
    ) -> io::Result<Self> {
        Ok(TaggedLog {
            file: HlogFile::create(path, what, start)?,
            tags: labels.iter().map(|l| encode_tag(l)).collect(),
            coarse: Coarse::new(detail),
        })
    }

    /// Takes one interval's histograms, one per label in order (a label without values
    /// in it writes no line).
    pub fn interval(&mut self, t0_s: f64, len_s: f64, hists: &[Histogram<u64>]) -> io::Result<()> {
        if self.coarse.is_detail(t0_s, len_s) {
            return self.row(t0_s, len_s, hists);
        }
        let full = self.coarse.gather(t0_s, len_s, |sums| {
            if sums.is_empty() {
                sums.extend(hists.iter().map(|_| crate::metrics::new_histogram()));
            }
            for (sum, h) in sums.iter_mut().zip(hists) {
                // Same bounds; a value past them is dropped rather than the whole minute.
                let _ = sum.add(h);
            }
        });
        match full {
            Some((t0, len, sums)) => self.row(t0, len, &sums),
            None => Ok(()),
        }
    }

    fn row(&mut self, t0_s: f64, len_s: f64, hists: &[Histogram<u64>]) -> io::Result<()> {
        for (tag, h) in self.tags.iter().zip(hists) {
            if !h.is_empty() {
                self.file.append_tagged(Some(tag), t0_s, len_s, h)?;
            }
        }
        Ok(())
    }

    /// Writes the minute gathered so far and syncs the file.
    pub fn finish(mut self) -> io::Result<()> {
        if let Some((t0, len, sums)) = self.coarse.rest() {
            self.row(t0, len, &sums)?;
        }
        self.file.finish()
    }
}

/// A label as an hlog tag: bytes other than ASCII letters, digits and `_.:-` as `%XX`
/// (a tag ends at a comma, and tools split on spaces).
pub fn encode_tag(label: &str) -> String {
    let mut out = String::with_capacity(label.len());
    for b in label.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The label of a tag written by [`encode_tag`]; None when it is not such a tag.
pub fn decode_tag(tag: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(tag.len());
    let mut rest = tag.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip_and_have_no_separator() {
        for label in ["hit", "miss-2", "a,b c", "100%", "ünï"] {
            let t = encode_tag(label);
            assert!(!t.contains([',', ' ', '=']), "{t}");
            assert_eq!(decode_tag(&t).as_deref(), Some(label));
        }
        assert_eq!(encode_tag("a,b"), "a%2Cb");
        assert_eq!(decode_tag("bad%2"), None);
    }

    /// 130 one-second intervals with a detail period of 2 s: per tag, 2 rows of a second,
    /// then rows of a minute (the last partial); a tag with no value in a row has no line.
    #[test]
    fn tagged_rows_follow_the_detail_period_and_add_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("classes.hlog");
        let labels = vec!["hit".to_string(), "a miss".to_string()];
        let mut log = TaggedLog::create(
            &path,
            "test",
            SystemTime::UNIX_EPOCH,
            &labels,
            Duration::from_secs(2),
        )
        .unwrap();
        for i in 0..130u64 {
            let mut hit = crate::metrics::new_histogram();
            hit.record(100 + i).unwrap();
            let mut miss = crate::metrics::new_histogram();
            if i >= 100 {
                miss.record(5_000 + i).unwrap();
            }
            log.interval(i as f64, 1.0, &[hit, miss]).unwrap();
        }
        log.finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\nTag=a%20miss,62.000,60.000,"), "{text}");
        let logs = crate::report::data::PhaseLog::read_tagged(&path)
            .unwrap()
            .unwrap();
        let (tags, logs): (Vec<_>, Vec<_>) = logs.into_iter().unzip();
        assert_eq!(tags, [Some("hit".to_string()), Some("a miss".to_string())]);
        let ends = |l: &crate::report::data::PhaseLog| -> Vec<f64> {
            l.points.iter().map(|p| p.t_s).collect()
        };
        assert_eq!(ends(&logs[0]), [1.0, 2.0, 62.0, 122.0, 130.0]);
        assert_eq!(ends(&logs[1]), [122.0, 130.0]);
        assert_eq!((logs[0].total.len(), logs[1].total.len()), (130, 30));
        assert_eq!(logs[1].points[0].count, 22);
        assert_eq!(logs[0].total.max(), logs[0].total.highest_equivalent(229));
    }
}
