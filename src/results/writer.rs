//! Incremental writers for the results directory.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use chrono::{DateTime, Local, Utc};
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;

use super::summary::Summary;
use crate::metrics::{Counters, Phase, Shard};

/// What the sent log needs to name a message's addresses: the run's address pools.
pub trait AddressBook: Send + Sync {
    fn run_id(&self) -> &str;
    fn sender(&self, index: u32) -> &str;
    fn recipient(&self, index: u32) -> &str;
}

pub struct Writer {
    dir: PathBuf,
    start: SystemTime,
    intervals: BufWriter<File>,
    postal: BufWriter<File>,
    errors: BufWriter<File>,
    sent: Option<BufWriter<File>>,
    hlogs: HashMap<Phase, HlogFile>,
    /// The columns of intervals.csv that are the protocol's: its service phases'
    /// percentiles and its own counters, as plan.json declares them.
    service: Vec<String>,
    own: Vec<String>,
    minute: Option<(String, Counters)>,
    addresses: Option<Arc<dyn AddressBook>>,
    /// One-second rows (intervals.csv, *.hlog, errors.jsonl) for the detail period, then
    /// a row a minute: the intervals added up, and the active sessions at the last one.
    coarse: Coarse<(Shard, i64)>,
}

/// Length of one row once the detail period is over.
pub const COARSE_S: f64 = 60.0;

/// Rows of a second for `detail_s` seconds, then of a minute, so that a soak of days keeps
/// its files bounded: what every interval file of the results directory follows.
pub struct Coarse<T> {
    detail_s: f64,
    /// The minute being gathered: its start, its length so far, its intervals added up.
    open: Option<(f64, f64, T)>,
}

/// A row gathered from several intervals: its start, its length and their sum.
pub type Gathered<T> = (f64, f64, T);

impl<T: Default> Coarse<T> {
    pub fn new(detail: Duration) -> Self {
        Coarse {
            detail_s: detail.as_secs_f64(),
            open: None,
        }
    }

    /// Whether the interval `t0_s..t0_s + len_s` is a row of its own. By the interval's
    /// middle: its end drifts a millisecond or so past the second.
    pub fn is_detail(&self, t0_s: f64, len_s: f64) -> bool {
        t0_s + len_s / 2.0 < self.detail_s
    }

    /// Adds an interval past the detail period to the minute being gathered (`add` adds
    /// it to the sum); returns the minute once it is full.
    pub fn gather(
        &mut self,
        t0_s: f64,
        len_s: f64,
        add: impl FnOnce(&mut T),
    ) -> Option<Gathered<T>> {
        let (_, len, acc) = self.open.get_or_insert_with(|| (t0_s, 0.0, T::default()));
        *len += len_s;
        add(acc);
        // Full at the minute to within half an interval: the ticks' wake-ups jitter, so
        // 60 one-second intervals add up to a few µs under 60 s as often as over it (a
        // minute then took a 61st interval, and rows came every 61 s).
        if *len >= COARSE_S - len_s / 2.0 {
            self.open.take()
        } else {
            None
        }
    }

    /// The minute gathered so far, at the end of the run.
    pub fn rest(&mut self) -> Option<Gathered<T>> {
        self.open.take()
    }
}

fn create(dir: &Path, name: &str) -> io::Result<BufWriter<File>> {
    Ok(BufWriter::with_capacity(
        64 * 1024,
        File::create(dir.join(name))?,
    ))
}

pub fn rfc3339(t: SystemTime) -> String {
    DateTime::<Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// As [`rfc3339`] (UTC, microseconds, `Z`), on the stack: the sent log writes one per
/// message and allocates nothing for it. Times before 1970 are written as 1970.
pub fn rfc3339_micros(t: SystemTime) -> [u8; 27] {
    let us = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    let (secs, micros) = (us / 1_000_000, us % 1_000_000);
    let (days, sod) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let mut out = *b"0000-00-00T00:00:00.000000Z";
    let mut put = |at: usize, width: usize, mut v: u64| {
        for i in (0..width).rev() {
            out[at + i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, 4, year as u64);
    put(5, 2, month as u64);
    put(8, 2, day as u64);
    put(11, 2, sod / 3600);
    put(14, 2, sod / 60 % 60);
    put(17, 2, sod % 60);
    put(20, 6, micros);
    out
}

/// Writes `data` to `path` atomically (temporary file, fsync, rename).
pub fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    replace(path, data, true)
}

/// Writes `data` to `path` through a temporary file and a rename, so a reader (or a
/// killed run) sees the old or the new content, never half; `sync` also makes it durable.
fn replace(path: &Path, data: &[u8], sync: bool) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = File::create(&tmp)?;
        f.write_all(data)?;
        if sync {
            f.sync_data()?;
        }
    }
    std::fs::rename(tmp, path)
}

/// One HdrHistogram V2 interval log (values in µs, base64 of the compressed histogram),
/// as HdrHistogram's own tools and the report read it. Shared by the phase logs and
/// `spate verify`'s delivery.hlog.
pub struct HlogFile {
    out: BufWriter<File>,
    serializer: V2DeflateSerializer,
    scratch: Vec<u8>,
}

impl HlogFile {
    /// Creates `path` and writes the header; `what` names the values ("phase connect").
    pub fn create(path: &Path, what: &str, start: SystemTime) -> io::Result<Self> {
        let mut f = BufWriter::with_capacity(64 * 1024, File::create(path)?);
        let secs = start
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        writeln!(
            f,
            "#[spate {what}: values in microseconds, Interval_Max in milliseconds]"
        )?;
        writeln!(
            f,
            "#[StartTime: {secs:.3} (seconds since epoch), {}]",
            rfc3339(start)
        )?;
        writeln!(f, "#[BaseTime: {secs:.3} (seconds since epoch)]")?;
        writeln!(f, "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"")?;
        Ok(HlogFile {
            out: f,
            serializer: V2DeflateSerializer::new(),
            scratch: Vec::new(),
        })
    }

    /// Appends the interval that starts `t0_s` seconds after the start time, `len_s` long.
    pub fn append(&mut self, t0_s: f64, len_s: f64, h: &Histogram<u64>) -> io::Result<()> {
        self.append_tagged(None, t0_s, len_s, h)
    }

    /// Appends an interval as [`HlogFile::append`], with `Tag=TAG,` before it when given
    /// (HdrHistogram's tagged lines; the tag has no comma or space: see [`encode_tag`]).
    pub fn append_tagged(
        &mut self,
        tag: Option<&str>,
        t0_s: f64,
        len_s: f64,
        h: &Histogram<u64>,
    ) -> io::Result<()> {
        self.scratch.clear();
        if self.serializer.serialize(h, &mut self.scratch).is_err() {
            return Ok(());
        }
        let encoded = base64::engine::general_purpose::STANDARD.encode(&self.scratch);
        let max_ms = h.max() as f64 / 1000.0;
        if let Some(tag) = tag {
            write!(self.out, "Tag={tag},")?;
        }
        writeln!(self.out, "{t0_s:.3},{len_s:.3},{max_ms:.3},{encoded}")
    }

    /// Flushes and syncs the file.
    pub fn finish(mut self) -> io::Result<()> {
        self.out.flush()?;
        self.out.get_ref().sync_data()
    }
}

impl Writer {
    /// `detail`: how long rows are one second (see [`Writer::interval`]).
    pub fn create(
        dir: &Path,
        plan: &serde_json::Value,
        start: SystemTime,
        addresses: Option<Arc<dyn AddressBook>>,
        detail: Duration,
    ) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        write_atomic(
            &dir.join("plan.json"),
            serde_json::to_string_pretty(plan)?.as_bytes(),
        )?;
        let names = |list: &serde_json::Value, key: &str| -> Vec<String> {
            (list.as_array().into_iter().flatten())
                .filter_map(|v| v.get(key).unwrap_or(v).as_str().map(str::to_string))
                .collect()
        };
        let service = names(&plan["words"]["service"], "phase");
        let own = names(&plan["counters"], "counter");
        let mut intervals = create(dir, "intervals.csv")?;
        let mut head = String::from(
            "t_s,time,attempted,accepted,rejected,failed,bytes,\
             connections,tls_connections,connect_failures,late,dropped,active,errors,\
             response_p50_us,response_p99_us,unfinished,reconnections",
        );
        for p in &service {
            head += &format!(",{p}_p50_us,{p}_p99_us,{p}_max_us");
        }
        for c in &own {
            head += &format!(",{c}");
        }
        writeln!(intervals, "{head}")?;
        let mut postal = create(dir, "postal.csv")?;
        writeln!(
            postal,
            "time,messages,data(K),errors,connections,SSL connections"
        )?;
        // Only message injection has a sent log.
        let sent = match &addresses {
            Some(f) => {
                let mut sent = create(dir, "sent.log")?;
                sent_log_head(&mut sent, f.run_id(), "")?;
                Some(sent)
            }
            None => None,
        };
        Ok(Writer {
            dir: dir.to_path_buf(),
            start,
            intervals,
            postal,
            errors: create(dir, "errors.jsonl")?,
            sent,
            hlogs: HashMap::new(),
            service,
            own,
            minute: None,
            addresses,
            coarse: Coarse::new(detail),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Takes one interval (`t0_s` seconds after start, `len_s` long). During the detail
    /// period it is a row of its own; after it, intervals are added up into one row per
    /// minute (counters add, histograms add, so percentiles stay exact). The sent log
    /// and postal.csv are written as before.
    pub fn interval(&mut self, iv: &Shard, t0_s: f64, len_s: f64, active: i64) -> io::Result<()> {
        let wall = self.start + Duration::from_secs_f64(t0_s + len_s);
        if let (Some(sent), Some(book)) = (&mut self.sent, &self.addresses) {
            write_sent(sent, book.as_ref(), self.start, iv)?;
        }
        let errors: u64 = iv.errors.values().map(|e| e.count).sum();
        self.postal_minute(wall, &iv.counters, errors)?;
        if self.coarse.is_detail(t0_s, len_s) {
            self.row(iv, t0_s, len_s, active)?;
        } else if let Some((t0, len, (acc, act))) = self.coarse.gather(t0_s, len_s, |(acc, act)| {
            acc.add(iv);
            *act = active;
        }) {
            self.row(&acc, t0, len, act)?;
        }
        self.flush()
    }

    /// Writes the minute gathered so far as one row.
    fn flush_coarse(&mut self) -> io::Result<()> {
        if let Some((t0, len, (acc, active))) = self.coarse.rest() {
            self.row(&acc, t0, len, active)?;
        }
        Ok(())
    }

    /// One row of intervals.csv, each phase's histogram log and errors.jsonl.
    fn row(&mut self, iv: &Shard, t0_s: f64, len_s: f64, active: i64) -> io::Result<()> {
        let wall = self.start + Duration::from_secs_f64(t0_s + len_s);
        let c = iv.counters;
        // An interval without samples of a phase has no percentile: an empty cell, not 0.
        let q = |p: &str, q: f64| {
            iv.hist_named(p)
                .map_or(String::new(), |h| h.value_at_quantile(q).to_string())
        };
        let errors: u64 = iv.errors.values().map(|e| e.count).sum();
        let mut row = format!(
            "{:.3},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            t0_s + len_s,
            rfc3339(wall),
            c.attempted,
            c.accepted,
            c.rejected,
            c.failed,
            c.bytes,
            c.connections,
            c.tls_connections,
            c.connect_failures,
            c.late,
            c.dropped,
            active,
            errors,
            q(Phase::RESPONSE.name(), 0.5),
            q(Phase::RESPONSE.name(), 0.99),
            c.unfinished,
            c.reconnections,
        );
        for p in &self.service {
            let max = iv
                .hist_named(p)
                .map_or(String::new(), |h| h.max().to_string());
            row += &format!(",{},{},{max}", q(p, 0.5), q(p, 0.99));
        }
        for name in &self.own {
            row += &format!(",{}", c.own.named(name).unwrap_or(0));
        }
        writeln!(self.intervals, "{row}")?;

        for (phase, h) in iv.hists() {
            let log = match self.hlogs.entry(phase) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => e.insert(HlogFile::create(
                    &self.dir.join(format!("{}.hlog", phase.name())),
                    &format!("phase {}", phase.name()),
                    self.start,
                )?),
            };
            log.append(t0_s, len_s, h)?;
        }

        let at = rfc3339(wall);
        let mut keys: Vec<_> = iv.errors.iter().collect();
        keys.sort_by_key(|(k, _)| (*k).clone());
        for (k, v) in keys {
            let line = serde_json::json!({
                "time": at,
                "t_s": t0_s + len_s,
                "len_s": len_s,
                "phase": k.phase.name(),
                "kind": k.kind.name(),
                "code": k.code,
                "enhanced": k.detail.map(|e| e.to_string()),
                "text": k.text,
                "count": v.count,
                "sample": v.sample,
            });
            writeln!(self.errors, "{line}")?;
        }
        Ok(())
    }

    fn postal_minute(&mut self, wall: SystemTime, c: &Counters, errors: u64) -> io::Result<()> {
        let label = DateTime::<Local>::from(wall - Duration::from_millis(1))
            .format("%H:%M")
            .to_string();
        if let Some((cur, _)) = &self.minute {
            if *cur != label {
                self.flush_minute()?;
            }
        }
        let entry = self
            .minute
            .get_or_insert_with(|| (label, Counters::default()));
        let mut add = *c;
        // Postal's "errors" column counts error events; keep it that way.
        add.failed = errors;
        entry.1.accepted += add.accepted;
        entry.1.bytes += add.bytes;
        entry.1.failed += add.failed;
        entry.1.connections += add.connections;
        entry.1.tls_connections += add.tls_connections;
        Ok(())
    }

    fn flush_minute(&mut self) -> io::Result<()> {
        if let Some((label, m)) = self.minute.take() {
            writeln!(
                self.postal,
                "{label},{},{},{},{},{}",
                m.accepted,
                m.bytes / 1024,
                m.failed,
                m.connections,
                m.tls_connections
            )?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.intervals.flush()?;
        self.postal.flush()?;
        self.errors.flush()?;
        if let Some(s) = &mut self.sent {
            s.flush()?;
        }
        for f in self.hlogs.values_mut() {
            f.out.flush()?;
        }
        Ok(())
    }

    /// Replaces summary.json (atomically; durable only with `sync`, which the end of a
    /// run asks for).
    pub fn write_summary(&self, s: &Summary, sync: bool) -> io::Result<()> {
        replace(
            &self.dir.join("summary.json"),
            serde_json::to_string_pretty(s)?.as_bytes(),
            sync,
        )
    }

    /// Writes the last partial minutes and syncs every file.
    pub fn finish(&mut self) -> io::Result<()> {
        self.flush_coarse()?;
        self.flush_minute()?;
        self.flush()?;
        for f in [&self.intervals, &self.postal, &self.errors]
            .into_iter()
            .chain(self.sent.as_ref())
        {
            f.get_ref().sync_data()?;
        }
        for f in self.hlogs.values() {
            f.out.get_ref().sync_data()?;
        }
        Ok(())
    }
}

/// The sent log's first two lines. v2 has a last column, the message's outcome:
/// `accepted`, or `indeterminate`/`unfinished` (its end of data went out, no final reply
/// came: the server may have it); a v1 log (no such column) lists accepted messages only.
/// In an accepted LMTP message a recipient written `?rcpt` got no reply of its own (the
/// connection died after the replies of others): the server may have delivered to it.
pub fn sent_log_head(w: &mut impl Write, run: &str, note: &str) -> io::Result<()> {
    writeln!(
        w,
        "# spate sent log v2 run={run} — one line per message the server accepted or may have (the end of data sent, no final reply){note}"
    )?;
    writeln!(w, "seq\tat\tdigest\tbytes\tfrom\trecipients\toutcome")
}

/// Appends the interval's messages to the sent log: accepted, and those whose end of data
/// went out without a final reply.
fn write_sent(
    sent: &mut BufWriter<File>,
    book: &dyn AddressBook,
    start: SystemTime,
    iv: &Shard,
) -> io::Result<()> {
    for r in &iv.sent {
        let t = start + Duration::from_micros(r.accepted_us);
        write!(sent, "{}\t", r.seq)?;
        sent.write_all(&rfc3339_micros(t))?;
        sent.write_all(b"\t")?;
        sent.write_all(&hex(&r.digest))?;
        write!(sent, "\t{}\t{}\t", r.size, book.sender(r.from))?;
        let rc = &iv.rcpts[r.rcpt_start as usize..][..r.rcpt_len as usize];
        for (i, idx) in rc.iter().enumerate() {
            if i > 0 {
                sent.write_all(b",")?;
            }
            if idx & crate::metrics::UNSURE_RCPT != 0 {
                sent.write_all(b"?")?;
            }
            sent.write_all(
                book.recipient(idx & !crate::metrics::UNSURE_RCPT)
                    .as_bytes(),
            )?;
        }
        sent.write_all(b"\t")?;
        sent.write_all(r.outcome.name().as_bytes())?;
        sent.write_all(b"\n")?;
    }
    Ok(())
}

/// The lowercase hex of a digest, on the stack: the one hex encoder (the sent log here,
/// the tracking header in `message`).
pub fn hex(d: &[u8; 16]) -> [u8; 32] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 32];
    for (i, b) in d.iter().enumerate() {
        out[2 * i] = DIGITS[usize::from(b >> 4)];
        out[2 * i + 1] = DIGITS[usize::from(b & 15)];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::data::{PhaseLog, Table};

    #[test]
    fn the_stack_timestamp_is_chronos() {
        let mut us: u64 = 0;
        // From 1970 to beyond 2100, leap years and centuries included, odd microseconds.
        while us < 4_200_000_000 * 1_000_000 {
            let t = SystemTime::UNIX_EPOCH + Duration::from_micros(us);
            assert_eq!(std::str::from_utf8(&rfc3339_micros(t)).unwrap(), rfc3339(t));
            us += 86_400_000_000 * 7 + 3_599_999_999 + 13;
        }
        let t = SystemTime::UNIX_EPOCH + Duration::from_micros(951_782_400_000_001);
        assert_eq!(&rfc3339_micros(t), b"2000-02-29T00:00:00.000001Z");
    }

    /// 130 one-second intervals with a detail period of 2 s: 2 rows of a second, then
    /// rows of a minute (the last one partial); counts and histograms add up exactly.
    #[test]
    fn after_the_detail_period_rows_are_a_minute_each() {
        let dir = tempfile::tempdir().unwrap();
        let plan = serde_json::json!({});
        let mut w = Writer::create(
            dir.path(),
            &plan,
            SystemTime::UNIX_EPOCH,
            None,
            Duration::from_secs(2),
        )
        .unwrap();
        for i in 0..130u64 {
            let mut iv = Shard::default();
            iv.counters.attempted = 3;
            iv.counters.accepted = 3;
            for k in 0..3 {
                iv.record(Phase::RESPONSE, 1_000 * (i + 1) + k);
            }
            w.interval(&iv, i as f64, 1.0, 7).unwrap();
        }
        w.finish().unwrap();
        let t = Table::read(&dir.path().join("intervals.csv"))
            .unwrap()
            .unwrap();
        assert_eq!(t.col("t_s").unwrap(), vec![1.0, 2.0, 62.0, 122.0, 130.0]);
        // Intervals a few µs short of a second (jittering ticks) still make a minute of 60.
        let mut c: Coarse<u32> = Coarse::new(Duration::ZERO);
        let rows: Vec<f64> = (0..180)
            .filter_map(|i| c.gather(i as f64 * 0.99999, 0.99999, |n| *n += 1))
            .map(|(_, _, n)| f64::from(n))
            .collect();
        assert_eq!(rows, vec![60.0, 60.0, 60.0]);
        assert_eq!(
            t.col("accepted").unwrap(),
            vec![3.0, 3.0, 180.0, 180.0, 24.0]
        );
        assert_eq!(t.col("active").unwrap(), vec![7.0; 5]);
        let log = PhaseLog::read(&dir.path().join("response.hlog"), "response")
            .unwrap()
            .unwrap();
        assert_eq!(log.points.len(), 5);
        assert_eq!(log.total.len(), 390);
        // The minute from 2 s to 62 s holds seconds 3..=62: its max is exact.
        assert_eq!(log.total.max(), log.total.highest_equivalent(130_002));
        // The first minute's p99, from the seconds it added up (2..62).
        let mut h = crate::metrics::new_histogram();
        for i in 2..62u64 {
            for k in 0..3 {
                h.record(1_000 * (i + 1) + k).unwrap();
            }
        }
        let p99 = t.col("response_p99_us").unwrap()[2];
        assert_eq!(p99 as u64, h.value_at_quantile(0.99));
    }
}
