//! The run's intervals as its live view serves them to `spate watch` (`GET
//! /api/intervals?after=N`): each interval's counters, errors and histograms (HdrHistogram
//! V2, compressed, base64, as the *.hlog files hold them), so that the shards of a run
//! add up exactly while they run, as `spate merge` adds them after.
//!
//! The latest [`KEEP`] intervals are kept (a watcher that connects later, or falls that far
//! behind, is told which ones it missed); with them the run's summary so far, and at the
//! end its final one.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use serde_json::json;

use crate::engine::Snapshot;
use crate::results::feed::{encode, KEEP};
use crate::results::Summary;

/// The most bytes of intervals one answer carries (the rest come with the next ask).
const ANSWER_BYTES: usize = 4 << 20;

#[derive(Default)]
struct State {
    dir: Option<PathBuf>,
    started: Option<SystemTime>,
    /// (sequence number from 1, the interval as JSON).
    intervals: VecDeque<(u64, String)>,
    next: u64,
    summary: Option<Summary>,
    ended: bool,
    /// When a watcher last asked, and whether one was given the end.
    asked: Option<Instant>,
    end_given: bool,
}

/// What the live view keeps for watchers.
#[derive(Default)]
pub struct Feed {
    state: Mutex<State>,
    given: Condvar,
}

impl Feed {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The run starts: its results directory (plan.json) and wall-clock origin.
    pub fn start(&self, dir: PathBuf, started: SystemTime) {
        let mut s = self.lock();
        s.dir = Some(dir);
        s.started = Some(started);
    }

    /// One interval, and the summary so far.
    pub fn interval(&self, snap: &Snapshot<'_>) {
        let record = encode(snap.interval, snap.t_s, snap.interval_s, snap.active);
        let mut s = self.lock();
        s.next += 1;
        let seq = s.next;
        s.intervals.push_back((seq, record.to_string()));
        while s.intervals.len() > KEEP {
            s.intervals.pop_front();
        }
        s.summary = Some(snap.summary.clone());
    }

    /// The run is over; `summary` is its final summary.
    pub fn end(&self, summary: &Summary) {
        let mut s = self.lock();
        s.summary = Some(summary.clone());
        s.ended = true;
    }

    /// The run's plan (plan.json), once it started.
    pub fn plan(&self) -> Option<String> {
        let dir = self.lock().dir.clone()?;
        std::fs::read_to_string(dir.join("plan.json")).ok()
    }

    /// The answer to `GET /api/intervals?after=N`: the intervals after N (as many as
    /// fit), the first one kept, the summary so far, and `ended` once the last interval
    /// is in it.
    pub fn after(&self, after: u64) -> String {
        let mut s = self.lock();
        s.asked = Some(Instant::now());
        let mut list = String::from("[");
        let mut last = after;
        for (seq, text) in s.intervals.iter().filter(|(seq, _)| *seq > after) {
            if list.len() + text.len() > ANSWER_BYTES && last > after {
                break;
            }
            if last > after {
                list.push(',');
            }
            list.push_str(text);
            last = *seq;
        }
        list.push(']');
        let ended = s.ended && last == s.next;
        if ended {
            s.end_given = true;
            self.given.notify_all();
        }
        let started_us = s.started.map(|t| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_micros() as u64
        });
        let head = json!({
            "started_us": started_us,
            "first": s.intervals.front().map(|(seq, _)| *seq),
            "last": s.next,
            "ended": ended,
            "summary": s.summary,
        });
        // The intervals, already JSON, go in as they are.
        let head = head.to_string();
        format!("{},\"intervals\":{list}}}", &head[..head.len() - 1])
    }

    /// The run is over: waits (at most `limit`) until a watcher that was asking in the
    /// last few seconds was given the end, so that `spate watch` gets the last intervals
    /// and the final summary before the server stops.
    pub fn wait_given(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut s = self.lock();
        let watched = |s: &State| {
            s.asked
                .is_some_and(|t| t.elapsed() < Duration::from_secs(5))
        };
        while watched(&s) && !s.end_given {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            s = self
                .given
                .wait_timeout(s, left.min(Duration::from_millis(50)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{ErrorKey, ErrorKind, Phase, Shard};
    use crate::results::feed::{decode, MAX_PHASES};
    use serde_json::Value;

    #[test]
    fn an_interval_comes_back_with_its_counts_errors_and_exact_histograms() {
        let connect = Phase::named("connect");
        let mut iv = Shard::default();
        for v in [120, 340, 9_000] {
            iv.record(connect, v);
        }
        iv.counters.attempted = 3;
        iv.counters.accepted = 2;
        iv.counters.failed = 1;
        iv.error(
            ErrorKey {
                phase: connect,
                kind: ErrorKind::named("refused"),
                code: 0,
                detail: None,
                text: "connection refused".into(),
            },
            || "connect: Connection refused".into(),
        );
        let summary = crate::results::SummaryHeader {
            run_id: "test".into(),
            command: vec!["spate".into()],
            protocol: "smtp".into(),
            words: crate::results::UnitWords::before_declared("smtp"),
            target: "127.0.0.1:2525".into(),
            started: SystemTime::UNIX_EPOCH,
        }
        .summary(&iv, 2.0, false, false, (Duration::from_secs(1), "process"));
        let snap = Snapshot {
            t_s: 2.0,
            interval_s: 1.0,
            interval: &iv,
            summary: &summary,
            active: 4,
            planned_s: None,
            planned_count: None,
            setup_done_s: None,
        };
        let feed = Feed::default();
        feed.start(PathBuf::from("/nonexistent"), SystemTime::UNIX_EPOCH);
        feed.interval(&snap);
        feed.interval(&snap);
        let answer: Value = serde_json::from_str(&feed.after(1)).unwrap();
        assert_eq!(answer["first"], 1);
        assert_eq!(answer["last"], 2);
        assert_eq!(answer["ended"], false);
        let list = answer["intervals"].as_array().unwrap();
        assert_eq!(list.len(), 1, "only the one after 1");
        let mut names = Vec::new();
        let back = decode(&list[0], &mut names).unwrap();
        assert_eq!(back.shard.counters, iv.counters);
        assert_eq!((back.t_s, back.len_s, back.active), (2.0, 1.0, 4));
        let h = back.shard.hist_named("connect").unwrap();
        let orig = iv.hist_named("connect").unwrap();
        assert_eq!(h.len(), 3);
        assert_eq!(h.value_at_quantile(0.5), orig.value_at_quantile(0.5));
        assert_eq!(h.max(), orig.max());
        let (k, e) = back.shard.errors.iter().next().unwrap();
        assert_eq!((k.text.as_str(), e.count), ("connection refused", 1));
        feed.end(&summary);
        let end: Value = serde_json::from_str(&feed.after(2)).unwrap();
        assert_eq!(end["ended"], true);
        assert_eq!(end["intervals"].as_array().unwrap().len(), 0);
        // Not a spate run: names without end.
        let mut many: Vec<String> = (0..MAX_PHASES).map(|i| format!("p{i}")).collect();
        assert!(decode(&list[0], &mut many).is_err());
    }
}
