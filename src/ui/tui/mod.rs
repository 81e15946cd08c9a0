//! `--tui`: a live dashboard on the terminal during a run, drawn with ratatui on crossterm:
//! progress toward the run's bound, throughput in the protocol's unit, a percentile table
//! per phase, a latency histogram of the selected phase, errors by class with the error
//! rate, active sessions and generator CPU (see [`draw`] for the layout).
//!
//! Keys ([`keys`]): `q` or Esc stops the run cleanly (results are still written and the
//! run is recorded as interrupted); Ctrl-C behaves as without the dashboard (a second one
//! stops at once); `p` pauses and resumes drawing while the run goes on; Tab and the arrow
//! keys choose the phase whose histogram is shown; `?` shows the keys.
//!
//! The engine calls the [`Observer`] methods once a second; a thread of the dashboard's own
//! reads the keys and draws again at once when one changes the screen. Both share the
//! model and the terminal behind one lock. The terminal is restored in `finish`, in `Drop`
//! (an engine error unwinds through it) and by a panic hook ([`term::restore`]).

pub mod draw;
pub mod keys;
pub mod model;
pub mod term;

#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use crate::engine::{cpu_time, Observer, Snapshot};
use crate::results::Summary;
use keys::Action;
use model::{Model, Ui};

pub use term::restore;

/// What the engine's thread and the key reader share.
struct Shared {
    model: Model,
    ui: Ui,
    /// `None` once the terminal was given back.
    term: Option<term::Term>,
    /// Paint every cell on the next draw, not only the changed ones: something else wrote
    /// on the screen (the engine's interrupt notice, a warning on stderr).
    repaint: bool,
    /// Frames drawn from intervals, for the periodic repaint.
    frames: u64,
}

/// Intervals between two whole repaints, which wipe out whatever else wrote on the screen.
const REPAINT_EVERY: u64 = 10;

impl Shared {
    /// Draws the frame on the screen: the frozen one while paused, else the live one.
    /// A failed draw (the terminal went away) is not worth stopping the run for.
    fn redraw(&mut self) {
        let Shared {
            model,
            ui,
            term,
            repaint,
            ..
        } = self;
        if let Some(t) = term {
            let shown = ui.paused.as_deref().unwrap_or(model);
            let _ = term::follow_size(t);
            if std::mem::take(repaint) {
                let _ = t.clear();
            }
            let _ = t.draw(|f| draw::render(f, shown, ui));
        }
    }

    /// Carries out a key's action; `stop` and `quit` are the dashboard's flags.
    fn act(&mut self, a: Action, stop: &AtomicBool, quit: &AtomicBool) {
        match a {
            Action::Stop => {
                quit.store(true, Ordering::Relaxed);
                stop.store(true, Ordering::Relaxed);
                self.ui.stopping = true;
            }
            Action::Interrupt => keys::interrupt(),
            Action::Pause => {
                self.ui.paused = match self.ui.paused {
                    Some(_) => None,
                    None => Some(Box::new(self.model.clone())),
                };
            }
            Action::NextPhase | Action::PrevPhase => {
                let step = if a == Action::NextPhase { 1 } else { -1 };
                let shown = self.ui.paused.as_deref().unwrap_or(&self.model);
                if let Some(p) = self.ui.step(shown, step) {
                    self.ui.selected = Some(p);
                }
            }
            Action::Help => self.ui.help = !self.ui.help,
            Action::Redraw => self.repaint = true,
        }
        self.redraw();
    }
}

/// The dashboard observer.
pub struct Dashboard {
    shared: Arc<Mutex<Shared>>,
    /// The run's stop flag, set by q.
    stop: Arc<AtomicBool>,
    /// The user stopped the run with q: it is recorded as interrupted.
    quit: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    reader: Option<JoinHandle<()>>,
    last_cpu: Duration,
    cores: f64,
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Dashboard {
    /// Takes the terminal over; `stop` is the run's stop flag, set when `q` is pressed.
    /// Without a terminal on stdin and stdout: a usage error.
    pub fn new(
        stop: Arc<AtomicBool>,
        title: String,
        faults: Vec<crate::fault::Spec>,
    ) -> anyhow::Result<Dashboard> {
        let term = term::enter()?;
        let mut model = Model::new(title);
        model.faults = faults;
        let shared = Arc::new(Mutex::new(Shared {
            model,
            ui: Ui::default(),
            term: Some(term),
            repaint: false,
            frames: 0,
        }));
        let done = Arc::new(AtomicBool::new(false));
        let quit = Arc::new(AtomicBool::new(false));
        let spawned = {
            let (shared, stop, quit, done) =
                (shared.clone(), stop.clone(), quit.clone(), done.clone());
            std::thread::Builder::new()
                .name("spate-tui-keys".into())
                .spawn(move || {
                    keys::read_loop(&done, |a| match a {
                        // At once, without waiting for a frame being drawn.
                        Action::Interrupt => keys::interrupt(),
                        _ => lock(&shared).act(a, &stop, &quit),
                    });
                })
        };
        let reader = match spawned {
            Ok(r) => r,
            Err(e) => {
                term::restore();
                return Err(e.into());
            }
        };
        Ok(Dashboard {
            shared,
            stop,
            quit,
            done,
            reader: Some(reader),
            last_cpu: cpu_time(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()) as f64,
        })
    }

    /// Stops the key reader and gives the terminal back (idempotent).
    fn close(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        lock(&self.shared).term = None;
        term::restore();
    }
}

impl Observer for Dashboard {
    fn start(&mut self, _dir: &Path, _start: SystemTime) -> anyhow::Result<()> {
        lock(&self.shared).redraw();
        Ok(())
    }

    fn interval(&mut self, snap: &Snapshot<'_>) -> anyhow::Result<()> {
        let now = cpu_time();
        let len = snap.interval_s.max(1e-3);
        let cpu_pct = (now - self.last_cpu).as_secs_f64() / len / self.cores * 100.0;
        self.last_cpu = now;
        let mut s = lock(&self.shared);
        s.model.update(snap, cpu_pct);
        s.frames += 1;
        // The engine says on stderr that it was interrupted when it starts stopping.
        let stopping = self.stop.load(Ordering::Relaxed);
        s.repaint |= s.frames.is_multiple_of(REPAINT_EVERY) || (stopping && !s.ui.stopping);
        s.ui.stopping |= stopping;
        if s.ui.paused.is_none() {
            s.redraw();
        }
        Ok(())
    }

    fn finish(&mut self, summary: &mut Summary) {
        self.close();
        if self.quit.load(Ordering::Relaxed) && summary.interrupted_by.is_none() {
            summary.interrupted = true;
            summary.interrupted_by = Some("q".into());
        }
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        self.close();
    }
}
