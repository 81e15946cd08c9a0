//! The shards' HdrHistogram interval logs, read side by side: each interval's histogram
//! added into the merged timeline, and the shards' values checked against their
//! summaries (a truncated or edited log is named, never merged).

use super::*;

/// The start and length of an interval line of an hlog (None for comments and the
/// header), and its histogram (base64); Err(()) for a line that is not one.
fn hlog_line(line: &str) -> Result<Option<(f64, f64, &str)>, ()> {
    if line.starts_with('#') || line.starts_with('"') || line.is_empty() {
        return Ok(None);
    }
    let mut f = line.splitn(4, ',');
    let (Some(start), Some(len), Some(_), Some(b64)) = (f.next(), f.next(), f.next(), f.next())
    else {
        return Err(());
    };
    match (start.parse::<f64>(), len.parse::<f64>()) {
        (Ok(start), Ok(len)) => Ok(Some((start, len, b64.trim()))),
        _ => Err(()),
    }
}

fn corrupt(path: &Path, line: usize) -> anyhow::Error {
    UsageError(format!(
        "{}: line {} is truncated or corrupt",
        path.display(),
        line + 1
    ))
    .into()
}

/// The shard's histogram logs, a phase at a time, with their lines; the phases it has
/// no log of are left out.
fn hlogs(i: &Input) -> impl Iterator<Item = (Phase, PathBuf, HlogLines)> + '_ {
    i.summary.phases.iter().filter_map(|p| {
        let phase = Phase::named(&p.phase);
        let path = i.dir.join(format!("{}.hlog", phase.name()));
        let file = std::fs::File::open(&path).ok()?;
        Some((
            phase,
            path,
            std::io::BufReader::new(file).lines().enumerate(),
        ))
    })
}

type HlogLines = std::iter::Enumerate<std::io::Lines<std::io::BufReader<std::fs::File>>>;

/// Makes the timeline's bucket of every interval in the shard's hlogs (their histograms
/// are read later, in step with the writing: [`HlogCursor`]).
pub(super) fn hlog_buckets(i: &Input, tl: &mut Timeline) -> anyhow::Result<()> {
    for (_, path, lines) in hlogs(i) {
        for (k, line) in lines {
            let line = line.map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
            if let Some((start, len, _)) = hlog_line(&line).map_err(|_| corrupt(&path, k))? {
                tl.at(i.started, start, start + len);
            }
        }
    }
    Ok(())
}

/// One shard's `<phase>.hlog`, read a line at a time in step with the merged timeline:
/// only the line about to be added is held, so a merge's memory does not grow with the
/// length of the run (holding every interval's histograms took ~1 GB for 4 shards of
/// 10 minutes).
pub(super) struct HlogCursor {
    path: PathBuf,
    phase: Phase,
    /// The shard's index in the inputs.
    input: usize,
    started: SystemTime,
    lines: HlogLines,
    /// The next interval: its bucket, its line number, its histogram (base64).
    next: Option<(i64, usize, String)>,
    /// Values added so far.
    values: u64,
}

impl HlogCursor {
    /// Every cursor of every shard, each at its first interval.
    pub(super) fn open_all(inputs: &[Input], tl: &Timeline) -> anyhow::Result<Vec<HlogCursor>> {
        let mut all = Vec::new();
        for (input, i) in inputs.iter().enumerate() {
            for (phase, path, lines) in hlogs(i) {
                let mut c = HlogCursor {
                    path,
                    phase,
                    input,
                    started: i.started,
                    lines,
                    next: None,
                    values: 0,
                };
                c.advance(tl)?;
                all.push(c);
            }
        }
        Ok(all)
    }

    /// Reads up to the next interval line.
    fn advance(&mut self, tl: &Timeline) -> anyhow::Result<()> {
        self.next = None;
        for (k, line) in self.lines.by_ref() {
            let line = line.map_err(|e| UsageError(format!("{}: {e}", self.path.display())))?;
            let Some((start, len, b64)) = hlog_line(&line).map_err(|_| corrupt(&self.path, k))?
            else {
                continue;
            };
            let (key, _) = tl.key(self.started, start, start + len);
            self.next = Some((key, k, b64.to_string()));
            break;
        }
        Ok(())
    }

    /// Adds every interval of this log up to bucket `key` into `into`.
    pub(super) fn take_until(
        &mut self,
        key: i64,
        into: &mut Shard,
        de: &mut Deserializer,
        tl: &Timeline,
    ) -> anyhow::Result<()> {
        while let Some((k, line, b64)) = self.next.take() {
            if k > key {
                self.next = Some((k, line, b64));
                break;
            }
            let bad = || corrupt(&self.path, line);
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(&b64)
                .map_err(|_| bad())?;
            let h: hdrhistogram::Histogram<u64> = de
                .deserialize(&mut std::io::Cursor::new(bytes))
                .map_err(|_| bad())?;
            self.values += h.len();
            into.record_hist(self.phase, &h);
            self.advance(tl)?;
        }
        Ok(())
    }
}

/// Each shard's phase counts must be what its hlogs held: a truncated or missing log
/// is refused.
pub(super) fn check_values(inputs: &[Input], cursors: &[HlogCursor]) -> anyhow::Result<()> {
    for (idx, i) in inputs.iter().enumerate() {
        for p in &i.summary.phases {
            let phase = Phase::named(&p.phase);
            let got: u64 = cursors
                .iter()
                .filter(|c| c.input == idx && c.phase == phase)
                .map(|c| c.values)
                .sum();
            if got != p.count {
                return bad(format!(
                    "{}/{}.hlog: {got} values, summary.json says {}: a truncated or missing histogram log",
                    i.dir.display(),
                    p.phase,
                    p.count
                ));
            }
        }
    }
    Ok(())
}
