//! What the live view shows, and the thread that draws it: the run's report, read from
//! its results directory as the run writes it (complete lines only) and drawn by the
//! report's own code, so the page is the report, live, and ends as the report.
//!
//! Drawing is done only while a page watches, at most once per interval, and never more
//! than a tenth of the time: a run so long that its report takes 300 ms to draw is drawn
//! every 3 s.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::report::data::{Lines, Run};

/// One drawing of the run, as the page gets it.
#[derive(Debug, Clone, Default)]
pub struct Frame {
    /// Counts the drawings: a page waits for a newer one.
    pub generation: u64,
    /// The report's body (HTML).
    pub body: Arc<String>,
    /// The run is over: this is its report, and nothing follows.
    pub ended: bool,
    /// Seconds into the run it shows.
    pub t_s: f64,
}

/// The frames, the pages that watch them, and a wake-up for each new one.
#[derive(Default)]
pub struct Live {
    frame: Mutex<Frame>,
    changed: Condvar,
    /// Pages connected to the event stream.
    watchers: AtomicUsize,
    /// Pages that were sent the last frame (the run waits for them, a little, at its end).
    got_last: AtomicUsize,
}

impl Live {
    fn lock(&self) -> MutexGuard<'_, Frame> {
        self.frame.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn current(&self) -> Frame {
        self.lock().clone()
    }

    fn publish(&self, body: String, t_s: f64, ended: bool) {
        let mut f = self.lock();
        f.generation += 1;
        f.body = Arc::new(body);
        f.t_s = t_s;
        f.ended |= ended;
        drop(f);
        self.changed.notify_all();
    }

    /// A frame newer than `seen`, waiting at most `limit`; None when none came.
    pub fn next_after(&self, seen: u64, limit: Duration) -> Option<Frame> {
        let f = self.lock();
        let (f, _) = self
            .changed
            .wait_timeout_while(f, limit, |f| f.generation <= seen)
            .unwrap_or_else(|p| p.into_inner());
        (f.generation > seen).then(|| f.clone())
    }

    /// A page starts or stops watching.
    pub fn watch(&self) -> Watching<'_> {
        self.watchers.fetch_add(1, Ordering::SeqCst);
        Watching(self)
    }

    pub fn watchers(&self) -> usize {
        self.watchers.load(Ordering::SeqCst)
    }

    /// A page was sent the last frame.
    pub fn got_last(&self) {
        self.got_last.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_all();
    }

    /// Waits (at most `limit`) until every watching page was sent the last frame.
    pub fn wait_delivered(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut f = self.lock();
        while self.got_last.load(Ordering::SeqCst) < self.watchers() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            f = self
                .changed
                .wait_timeout(f, left.min(Duration::from_millis(50)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// A page watching; it stops when this drops.
pub struct Watching<'a>(&'a Live);

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        self.0.watchers.fetch_sub(1, Ordering::SeqCst);
        self.0.changed.notify_all();
    }
}

/// What the drawing thread is asked to draw.
pub struct Ask {
    pub dir: PathBuf,
    pub t_s: f64,
    /// What the run was told so far (summary.json's `extra.control` to be).
    pub control: serde_json::Value,
    /// The `--threshold` rules judged on the figures so far (none: null).
    pub thresholds: serde_json::Value,
    /// The run is over and its files complete: the last frame.
    pub last: bool,
}

/// How often the drawing thread looks for a page that came to watch.
const POLL: Duration = Duration::from_millis(200);

/// The drawing thread: it ends when the sender drops, or after the last drawing.
pub fn drawer(live: Arc<Live>) -> std::io::Result<mpsc::Sender<Ask>> {
    let (tx, rx) = mpsc::channel::<Ask>();
    std::thread::Builder::new()
        .name("spate-web-draw".into())
        .spawn(move || {
            let mut not_before = Instant::now();
            // The latest ask not drawn yet (nobody watched, or too soon): a page that
            // connects gets it within a poll, not at the next interval.
            let mut pending: Option<Ask> = None;
            loop {
                let mut take = |ask: Ask| {
                    let last = pending.as_ref().is_some_and(|p| p.last);
                    pending = Some(Ask {
                        last: ask.last || last,
                        ..ask
                    });
                };
                match rx.recv_timeout(POLL) {
                    Ok(ask) => take(ask),
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                }
                while let Ok(newer) = rx.try_recv() {
                    take(newer);
                }
                let due = pending.as_ref().is_some_and(|a| {
                    a.last || (live.watchers() > 0 && Instant::now() >= not_before)
                });
                let Some(ask) = pending.take_if(|_| due) else {
                    continue;
                };
                let started = Instant::now();
                let body = draw(&ask);
                live.publish(body, ask.t_s, ask.last);
                if ask.last {
                    return;
                }
                // At most a tenth of the time drawing.
                not_before = Instant::now() + started.elapsed() * 9;
            }
        })?;
    Ok(tx)
}

/// The report's body for the run as far as it is written (a page, never an error: what
/// cannot be read yet is said).
fn draw(ask: &Ask) -> String {
    let lines = if ask.last {
        Lines::All
    } else {
        Lines::Complete
    };
    match Run::read_lines(&ask.dir, lines) {
        Ok(mut run) => {
            run.running = !ask.last;
            if run.running && !run.summary.extra.contains_key("faults") {
                // The run's faults so far: the fault observer puts them in the summary
                // only at the end; until then its events are in faults.jsonl.
                if let Some(f) = faults_so_far(&ask.dir) {
                    run.summary.extra.insert("faults".into(), f);
                }
            }
            if ask.control["actions"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
            {
                run.summary
                    .extra
                    .insert("control".into(), ask.control.clone());
            }
            if ask.thresholds.is_array() {
                run.summary
                    .extra
                    .insert("thresholds".into(), ask.thresholds.clone());
            }
            crate::report::html::render_body(&run).1
        }
        Err(e) => format!(
            "<p class=\"sub\">waiting for the run's first figures ({})</p>",
            crate::report::chart::escape(&format!("{e:#}"))
        ),
    }
}

/// The faults applied so far, from faults.jsonl's complete lines, as summary.json's
/// `extra.faults` has them at the end: each occurrence from its first event to its last
/// (a mark at its start while it has one, a lasting fault under way or a moment's).
fn faults_so_far(dir: &std::path::Path) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("faults.jsonl")).ok()?;
    let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    let mut occs: Vec<serde_json::Value> = Vec::new();
    for line in complete.lines() {
        let Ok(e) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let (fault, n) = (e["fault"].as_u64()?, e["occurrence"].as_u64()?);
        let t = e["t_s"].as_f64()?;
        match occs
            .iter_mut()
            .find(|o| o["fault"] == fault + 1 && o["occurrence"] == n)
        {
            Some(o) => {
                o["end_s"] = serde_json::json!(t);
                o["events"].as_array_mut()?.push(e);
            }
            None => occs.push(serde_json::json!({
                "fault": fault + 1,
                "spec": "",
                "occurrence": n,
                "start_s": t,
                "end_s": t,
                "events": [e],
            })),
        }
    }
    (!occs.is_empty()).then(|| serde_json::json!({ "occurrences": occs }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_waits_for_a_newer_frame_and_is_counted_while_it_watches() {
        let live = Arc::new(Live::default());
        assert!(live.next_after(0, Duration::from_millis(10)).is_none());
        let w = live.watch();
        assert_eq!(live.watchers(), 1);
        let other = live.clone();
        let t = std::thread::spawn(move || other.next_after(0, Duration::from_secs(30)));
        live.publish("<p>1</p>".into(), 1.0, false);
        let f = t.join().unwrap().expect("woken by the frame");
        assert_eq!(
            (f.generation, f.body.as_str(), f.ended),
            (1, "<p>1</p>", false)
        );
        live.publish("<p>2</p>".into(), 2.0, true);
        live.got_last();
        live.wait_delivered(Duration::from_secs(30));
        drop(w);
        assert_eq!(live.watchers(), 0);
        assert!(live.current().ended);
    }

    #[test]
    fn faults_under_way_are_drawn_from_their_events() {
        let dir = tempfile::tempdir().unwrap();
        let ev = |fault: u32, n: u32, t: f64, what: &str| {
            format!(
                "{{\"t_s\":{t},\"time\":\"x\",\"fault\":{fault},\"occurrence\":{n},\"event\":\"{what}\",\"what\":\"\",\"ok\":true}}\n"
            )
        };
        let text = ev(0, 0, 2.0, "signal") + &ev(0, 0, 2.5, "restart-done") + &ev(1, 0, 4.0, "run");
        // A half-written line is not read.
        std::fs::write(dir.path().join("faults.jsonl"), text + "{\"t_s\":5").unwrap();
        let f = faults_so_far(dir.path()).unwrap();
        let occs = f["occurrences"].as_array().unwrap();
        assert_eq!(occs.len(), 2, "{f}");
        assert_eq!(
            (occs[0]["start_s"].as_f64(), occs[0]["end_s"].as_f64()),
            (Some(2.0), Some(2.5))
        );
        assert_eq!(occs[0]["events"].as_array().unwrap().len(), 2);
        // One event so far: a mark where it was applied.
        assert_eq!(
            (occs[1]["start_s"].as_f64(), occs[1]["end_s"].as_f64()),
            (Some(4.0), Some(4.0))
        );
        assert!(faults_so_far(&dir.path().join("none")).is_none());
    }

    #[test]
    fn a_directory_without_figures_yet_is_said_not_drawn() {
        let dir = tempfile::tempdir().unwrap();
        let body = draw(&Ask {
            dir: dir.path().to_path_buf(),
            t_s: 0.0,
            control: serde_json::Value::Null,
            thresholds: serde_json::Value::Null,
            last: false,
        });
        assert!(
            body.contains("waiting for the run's first figures"),
            "{body}"
        );
    }
}
