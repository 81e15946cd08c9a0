//! Reading a results directory back for reports. CSV columns are found by header name and
//! unknown or missing columns are tolerated, so other writers may append columns freely.
//! Optional files (monitor.csv, verify.json, deliveries.csv, delivery.hlog, sweep files)
//! become optional sections.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;

use crate::results::Summary;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("{0}: line {1}: {2}")]
    Bad(PathBuf, usize, String),
}

fn read_text(path: &Path) -> Result<Option<String>, ReadError> {
    read_lines(path, Lines::All)
}

/// How much of a line-oriented file to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// Everything (a finished run's files).
    All,
    /// Up to the last newline: a file the run is still appending to, whose last line
    /// may be half written (the live view reads a running run).
    Complete,
}

fn read_lines(path: &Path, lines: Lines) -> Result<Option<String>, ReadError> {
    match std::fs::read_to_string(path) {
        Ok(mut t) => {
            if lines == Lines::Complete {
                t.truncate(t.rfind('\n').map_or(0, |i| i + 1));
            }
            Ok(Some(t))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ReadError::Io(path.to_path_buf(), e)),
    }
}

/// A numeric CSV: every cell parsed as f64 (non-numbers become NaN), columns by name.
#[derive(Debug, Clone, Default)]
pub struct Table {
    pub cols: Vec<String>,
    pub rows: Vec<Vec<f64>>,
}

impl Table {
    pub fn parse(text: &str) -> Table {
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let cols: Vec<String> = lines
            .next()
            .unwrap_or("")
            .split(',')
            .map(|c| c.trim().to_string())
            .collect();
        let rows = lines
            .map(|l| {
                l.split(',')
                    .map(|c| c.trim().parse::<f64>().unwrap_or(f64::NAN))
                    .collect()
            })
            .collect();
        Table { cols, rows }
    }

    pub fn read(path: &Path) -> Result<Option<Table>, ReadError> {
        Table::read_lines(path, Lines::All)
    }

    pub fn read_lines(path: &Path, lines: Lines) -> Result<Option<Table>, ReadError> {
        Ok(read_lines(path, lines)?.map(|t| Table::parse(&t)))
    }

    /// A per-second rate of an intervals.csv counter column: (end time, count / length).
    pub fn rate(&self, col: &str) -> Option<Vec<(f64, f64)>> {
        let t = self.col("t_s")?;
        let v = self.col(col)?;
        let mut prev = 0.0;
        let mut out = Vec::with_capacity(t.len());
        let mut lens = Vec::with_capacity(t.len());
        for (t, v) in t.into_iter().zip(v) {
            let len = t - prev;
            prev = t;
            // A sliver of an interval (the last one, cut by the end of the run) would
            // draw a meaningless spike or dip.
            if len >= 0.2 && v.is_finite() {
                out.push((t, v / len));
                lens.push(len);
            }
        }
        // The last interval, cut short by the end of the run, mostly holds the tail
        // (in-flight work finishing, nothing new started): drawn, it is a plunge that
        // says nothing about the server. The totals still count it.
        if out.len() > 2 {
            let mut sorted = lens.clone();
            sorted.sort_by(f64::total_cmp);
            let typical = sorted[sorted.len() / 2];
            if lens[lens.len() - 1] < 0.9 * typical {
                out.pop();
            }
        }
        Some(out)
    }

    pub fn index(&self, name: &str) -> Option<usize> {
        self.cols.iter().position(|c| c == name)
    }

    /// The column's values (NaN where a row is short), or None when there is no such column.
    pub fn col(&self, name: &str) -> Option<Vec<f64>> {
        let i = self.index(name)?;
        Some(
            self.rows
                .iter()
                .map(|r| r.get(i).copied().unwrap_or(f64::NAN))
                .collect(),
        )
    }

    /// (x, y) pairs of two columns, rows with a non-number dropped.
    pub fn xy(&self, x: &str, y: &str) -> Option<Vec<(f64, f64)>> {
        let (xs, ys) = (self.col(x)?, self.col(y)?);
        Some(
            xs.into_iter()
                .zip(ys)
                .filter(|(a, b)| a.is_finite() && b.is_finite())
                .collect(),
        )
    }
}

/// One interval of an hlog, reduced to what the charts need (values in µs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencyPoint {
    /// End of the interval, seconds after the start.
    pub t_s: f64,
    pub count: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
}

/// The logs of one file by tag (None: untagged lines), in the order tags first appear.
pub type TaggedLogs = Vec<(Option<String>, PhaseLog)>;

/// A phase's latency: per-interval percentiles and the whole-run histogram.
#[derive(Debug, Clone)]
pub struct PhaseLog {
    pub phase: String,
    pub points: Vec<LatencyPoint>,
    pub total: Histogram<u64>,
}

impl PhaseLog {
    fn new(phase: String) -> PhaseLog {
        PhaseLog {
            phase,
            points: Vec::new(),
            total: crate::metrics::new_histogram(),
        }
    }

    /// Parses an HdrHistogram V2 interval log as the results writer makes it:
    /// `#` comments, a quoted legend line, then `start,length,max_ms,base64` rows.
    pub fn read(path: &Path, phase: &str) -> Result<Option<PhaseLog>, ReadError> {
        PhaseLog::read_lines(path, phase, Lines::All)
    }

    pub fn read_lines(
        path: &Path,
        phase: &str,
        lines: Lines,
    ) -> Result<Option<PhaseLog>, ReadError> {
        let Some(logs) = PhaseLog::read_tagged_lines(path, lines)? else {
            return Ok(None);
        };
        let untagged = logs.into_iter().find(|l| l.0.is_none()).map(|l| l.1);
        let mut log = untagged.unwrap_or_else(|| PhaseLog::new(String::new()));
        log.phase = phase.to_string();
        Ok(Some(log))
    }

    /// Every log in one file, by tag (`Tag=x,` lines, x as [`crate::results::encode_tag`]
    /// writes it; None for untagged lines), in the order the tags first appear.
    pub fn read_tagged(path: &Path) -> Result<Option<TaggedLogs>, ReadError> {
        PhaseLog::read_tagged_lines(path, Lines::All)
    }

    fn read_tagged_lines(path: &Path, lines: Lines) -> Result<Option<TaggedLogs>, ReadError> {
        // Streamed line by line: a soak's hlog is tens of megabytes per phase.
        let file = match std::fs::File::open(path) {
            Ok(f) => std::io::BufReader::with_capacity(256 * 1024, f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(ReadError::Io(path.to_path_buf(), e)),
        };
        let mut logs = TaggedLogs::new();
        let mut de = Deserializer::new();
        let bad = |n: usize, m: String| ReadError::Bad(path.to_path_buf(), n + 1, m);
        let mut file = file;
        let mut buf = String::new();
        for n in 0.. {
            buf.clear();
            let got = std::io::BufRead::read_line(&mut file, &mut buf)
                .map_err(|e| ReadError::Io(path.to_path_buf(), e))?;
            if got == 0 || (lines == Lines::Complete && !buf.ends_with('\n')) {
                break;
            }
            let line = buf.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('"') {
                continue;
            }
            let (tag, line) = match line.strip_prefix("Tag=") {
                Some(rest) => {
                    let (tag, line) = rest.split_once(',').unwrap_or((rest, ""));
                    let tag = crate::results::decode_tag(tag)
                        .ok_or_else(|| bad(n, format!("bad tag {tag}")))?;
                    (Some(tag), line)
                }
                None => (None, line),
            };
            let f: Vec<&str> = line.split(',').collect();
            if f.len() < 4 {
                return Err(bad(n, "expected start,length,max,histogram".into()));
            }
            let start: f64 = f[0].parse().map_err(|_| bad(n, "bad start".into()))?;
            let len: f64 = f[1].parse().map_err(|_| bad(n, "bad length".into()))?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(f[3])
                .map_err(|e| bad(n, format!("bad base64: {e}")))?;
            let h: Histogram<u64> = de
                .deserialize(&mut bytes.as_slice())
                .map_err(|e| bad(n, format!("bad histogram: {e:?}")))?;
            if h.is_empty() {
                continue;
            }
            let k = match logs.iter().position(|l| l.0 == tag) {
                Some(k) => k,
                None => {
                    let name = tag.clone().unwrap_or_default();
                    logs.push((tag, PhaseLog::new(name)));
                    logs.len() - 1
                }
            };
            logs[k].1.add(&h, start + len);
        }
        Ok(Some(logs))
    }

    /// Adds one interval ending at `t_s`: its point and its values to the total.
    fn add(&mut self, h: &Histogram<u64>, t_s: f64) {
        // One pass over the recorded values for the percentiles and the totals: a
        // 16-hour soak has ~60,000 intervals per phase, and `Histogram::add` or
        // repeated `value_at_quantile` would scan every bucket of each.
        let n = h.len();
        let targets = [0.5, 0.9, 0.99].map(|q: f64| ((q * n as f64).ceil() as u64).max(1));
        let mut found = [0u64; 3];
        let mut seen = 0u64;
        for v in h.iter_recorded() {
            let value = v.value_iterated_to();
            let c = v.count_at_value();
            seen += c;
            for (k, t) in targets.iter().enumerate() {
                if found[k] == 0 && seen >= *t {
                    found[k] = h.highest_equivalent(value);
                }
            }
            // A value beyond the totals' range is the writer's bug; a report should
            // still be made from the rest.
            let _ = self.total.record_n(value, c);
        }
        self.points.push(LatencyPoint {
            t_s,
            count: n,
            p50: found[0],
            p90: found[1],
            p99: found[2],
            max: h.max(),
        });
    }

    /// The percentile curve, HDR style: x = -log10(1 - q), y in ms.
    pub fn percentile_curve(&self) -> Vec<(f64, f64)> {
        percentile_curve(&self.total)
    }
}

pub fn percentile_curve(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    // Enough resolution to reach the single slowest sample, at most 99.9999%.
    let top = (h.len() as f64).log10().clamp(1.0, 6.0);
    let steps = (top * 40.0) as usize;
    let mut pts: Vec<(f64, f64)> = (0..=steps)
        .map(|i| {
            let x = top * i as f64 / steps as f64;
            let q = 1.0 - 10f64.powf(-x);
            (x, h.value_at_quantile(q) as f64 / 1000.0)
        })
        .collect();
    pts.push((top, h.max() as f64 / 1000.0));
    pts
}

/// One line of errors.jsonl: an error class's count in one interval.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct ErrorLine {
    pub t_s: f64,
    pub phase: String,
    pub kind: String,
    #[serde(default)]
    pub code: u16,
    #[serde(default)]
    pub enhanced: Option<String>,
    #[serde(default)]
    pub text: String,
    pub count: u64,
}

impl ErrorLine {
    /// The class as a short label: `rcpt 451 4.3.0` or `connect timeout`.
    pub fn class(&self) -> String {
        class_label(&self.phase, &self.kind, self.code, self.enhanced.as_deref())
    }
}

pub fn class_label(phase: &str, kind: &str, code: u16, enhanced: Option<&str>) -> String {
    if code != 0 {
        match enhanced {
            Some(e) => format!("{phase} {code} {e}"),
            None => format!("{phase} {code}"),
        }
    } else {
        format!("{phase} {kind}")
    }
}

/// Everything a report shows about one run.
#[derive(Debug, Clone)]
pub struct Run {
    pub dir: PathBuf,
    pub summary: Summary,
    pub plan: Option<serde_json::Value>,
    pub intervals: Table,
    pub phases: Vec<PhaseLog>,
    pub errors: Vec<ErrorLine>,
    pub monitor: Option<Table>,
    pub verify: Option<serde_json::Value>,
    pub deliveries: Option<Table>,
    pub delivery: Option<PhaseLog>,
    /// `spate rr`'s response time per request class (classes.hlog), named by class.
    pub classes: Vec<PhaseLog>,
    /// The run is still going (the live view): its summary is not final.
    pub running: bool,
}

fn read_json(path: &Path) -> Result<Option<serde_json::Value>, ReadError> {
    match read_text(path)? {
        None => Ok(None),
        Some(t) => serde_json::from_str(&t)
            .map(Some)
            .map_err(|e| ReadError::Bad(path.to_path_buf(), e.line(), e.to_string())),
    }
}

impl Run {
    pub fn read(dir: &Path) -> anyhow::Result<Run> {
        Run::read_lines(dir, Lines::All)
    }

    /// A run's files as they are now: `Lines::Complete` while the run still writes them.
    pub fn read_lines(dir: &Path, lines: Lines) -> anyhow::Result<Run> {
        if !dir.join("summary.json").exists() {
            let subs = result_subdirs(dir);
            if subs.is_empty() {
                anyhow::bail!(
                    "{}: not a spate results directory (no summary.json)",
                    dir.display()
                );
            }
            let names: Vec<String> = subs
                .iter()
                .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect();
            anyhow::bail!(
                "{}: no summary.json here, but in its subdirectories {}: report on one of those",
                dir.display(),
                names.join(", ")
            );
        }
        let summary = Summary::read(dir)?;
        let intervals = Table::read_lines(&dir.join("intervals.csv"), lines)?.unwrap_or_default();
        // Decoding every interval's histogram is the bulk of the work on a long run:
        // one thread per phase log.
        let logs: Vec<Result<Option<PhaseLog>, ReadError>> = std::thread::scope(|s| {
            let handles: Vec<_> = summary
                .phases
                .iter()
                .map(|p| {
                    let path = dir.join(format!("{}.hlog", p.phase));
                    s.spawn(move || PhaseLog::read_lines(&path, &p.phase, lines))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(Ok(None)))
                .collect()
        });
        let mut phases = Vec::new();
        for log in logs {
            if let Some(log) = log? {
                if !log.points.is_empty() {
                    phases.push(log);
                }
            }
        }
        let mut errors = Vec::new();
        let epath = dir.join("errors.jsonl");
        if let Some(text) = read_lines(&epath, lines)? {
            for (n, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let e: ErrorLine = serde_json::from_str(line)
                    .map_err(|e| ReadError::Bad(epath.clone(), n + 1, e.to_string()))?;
                errors.push(e);
            }
        }
        Ok(Run {
            dir: dir.to_path_buf(),
            summary,
            plan: read_json(&dir.join("plan.json"))?,
            intervals,
            phases,
            errors,
            monitor: Table::read_lines(&dir.join("monitor.csv"), lines)?,
            verify: read_json(&dir.join("verify.json"))?,
            deliveries: Table::read_lines(&dir.join("deliveries.csv"), lines)?,
            delivery: PhaseLog::read_lines(&dir.join("delivery.hlog"), "delivery", lines)?
                .filter(|l| !l.points.is_empty()),
            classes: PhaseLog::read_tagged_lines(&dir.join("classes.hlog"), lines)?
                .unwrap_or_default()
                .into_iter()
                .filter_map(|(tag, log)| tag.map(|_| log))
                .collect(),
            running: false,
        })
    }

    pub fn phase(&self, name: &str) -> Option<&PhaseLog> {
        self.phases.iter().find(|p| p.phase == name)
    }

    /// The phase that stands for "latency" in headlines: a message's service time.
    /// What the phase named `name` times: as the run's plan.json declared it, or, for a
    /// run written before plans declared their phases, as this spate's protocols do.
    pub fn phase_times(&self, name: &str) -> Option<&str> {
        let declared = self.plan.as_ref().and_then(|plan| {
            plan["phases"]
                .as_array()?
                .iter()
                .find(|p| p["phase"] == name)?["times"]
                .as_str()
        });
        declared.or_else(|| {
            crate::metrics::Phase::find(&crate::session::all_phases(), name).map(|p| p.describe())
        })
    }

    /// The phase a report leads with: the one that times the server's work on a unit
    /// (as the protocol declared), else the response time, else the first.
    pub fn main_phase(&self) -> Option<&PhaseLog> {
        self.summary
            .service_phase()
            .and_then(|p| self.phase(&p.phase))
            .or(self.phases.first())
    }

    /// A per-second rate of an intervals.csv counter column (see [`Table::rate`]).
    pub fn rate(&self, col: &str) -> Option<Vec<(f64, f64)>> {
        self.intervals.rate(col)
    }

    /// Per-interval accepted/s of the full intervals (the first and last are often partial
    /// and are left out when there are enough others): the spread that says what noise is.
    pub fn steady_throughput(&self) -> Vec<f64> {
        self.steady_rate("accepted")
    }

    /// Per-interval rates of a counter column, without the partial first and last.
    pub fn steady_rate(&self, col: &str) -> Vec<f64> {
        let r: Vec<f64> = self
            .rate(col)
            .unwrap_or_default()
            .into_iter()
            .map(|p| p.1)
            .collect();
        if r.len() >= 5 {
            r[1..r.len() - 1].to_vec()
        } else {
            r
        }
    }
}

/// Subdirectories of `dir` that hold a summary.json, sorted by name.
pub fn result_subdirs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.join("summary.json").is_file())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A sweep directory: sweep.csv (one row per step and repeat), sweep.json (the fit).
#[derive(Debug, Clone)]
pub struct Sweep {
    pub dir: PathBuf,
    pub table: Table,
    pub meta: serde_json::Value,
    pub steps: Vec<PathBuf>,
}

impl Sweep {
    pub fn is_sweep(dir: &Path) -> bool {
        dir.join("sweep.csv").is_file()
    }

    pub fn read(dir: &Path) -> anyhow::Result<Sweep> {
        let table = Table::read(&dir.join("sweep.csv"))?.unwrap_or_default();
        let meta = read_json(&dir.join("sweep.json"))?.unwrap_or(serde_json::Value::Null);
        Ok(Sweep {
            dir: dir.to_path_buf(),
            table,
            meta,
            steps: result_subdirs(dir),
        })
    }

    /// The swept parameter's name (sweep.json, else the first `param` cell).
    pub fn param(&self) -> String {
        if let Some(p) = self.meta.get("param").and_then(|v| v.as_str()) {
            return p.to_string();
        }
        "parameter".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_leave_out_slivers_and_the_cut_last_interval() {
        let t = Table::parse("t_s,accepted\n1.0,100\n2.0,110\n3.0,90\n3.5,20\n3.52,0\n");
        let r = t.rate("accepted").unwrap();
        assert_eq!(r, vec![(1.0, 100.0), (2.0, 110.0), (3.0, 90.0)]);
        // A run of one short interval keeps it: there is nothing else to draw.
        let t = Table::parse("t_s,accepted\n0.5,40\n");
        assert_eq!(t.rate("accepted").unwrap(), vec![(0.5, 80.0)]);
        assert!(t.rate("missing").is_none());
    }
}
