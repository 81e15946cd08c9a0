//! `--tui`: a live dashboard on the terminal during a run — throughput, latency p50/p99 per
//! phase as sparklines, errors by class, active sessions, generator CPU, elapsed and
//! remaining time. `q` (or Esc) stops the run cleanly (results are still written); Ctrl-C
//! behaves as without the dashboard (a second one stops at once).
//!
//! Raw mode and the alternate screen are done with termios and ANSI sequences directly
//! (libc is already a dependency), rather than pulling in a terminal crate. The terminal is
//! restored in `finish`, in `Drop` (an engine error unwinds through it) and by a panic hook.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, SystemTime};

use crate::engine::{cpu_time, Observer, Snapshot};
use crate::metrics::Phase;
use crate::results::Summary;

/// The terminal settings to put back, while the dashboard owns the terminal.
static SAVED: Mutex<Option<libc::termios>> = Mutex::new(None);
static HOOK: Once = Once::new();

const ENTER: &str = "\x1b[?1049h\x1b[?25l";
const LEAVE: &str = "\x1b[?25h\x1b[?1049l";

/// Puts the terminal back as it was (idempotent; safe from a panic hook).
pub fn restore() {
    let saved = match SAVED.lock() {
        Ok(mut g) => g.take(),
        Err(p) => p.into_inner().take(),
    };
    if let Some(orig) = saved {
        // SAFETY: tcsetattr reads the struct we pass; fd 0 is our stdin.
        unsafe { libc::tcsetattr(0, libc::TCSANOW, &orig) };
        let mut out = std::io::stdout();
        let _ = out.write_all(LEAVE.as_bytes());
        let _ = out.flush();
    }
}

fn enter_raw() -> anyhow::Result<()> {
    // SAFETY: isatty/tcgetattr/tcsetattr only read and write the structs we pass.
    unsafe {
        if libc::isatty(0) != 1 || libc::isatty(1) != 1 {
            return crate::usage("--tui needs a terminal on stdin and stdout");
        }
        let mut orig: libc::termios = std::mem::zeroed();
        if libc::tcgetattr(0, &mut orig) != 0 {
            anyhow::bail!("--tui: cannot read the terminal settings");
        }
        let mut raw = orig;
        libc::cfmakeraw(&mut raw);
        // Keep output processing so that "\n" still returns the carriage.
        raw.c_oflag = orig.c_oflag;
        *SAVED.lock().unwrap_or_else(|p| p.into_inner()) = Some(orig);
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                previous(info);
            }));
        });
        if libc::tcsetattr(0, libc::TCSANOW, &raw) != 0 {
            SAVED.lock().unwrap_or_else(|p| p.into_inner()).take();
            anyhow::bail!("--tui: cannot switch the terminal to raw mode");
        }
    }
    let mut out = std::io::stdout();
    out.write_all(ENTER.as_bytes())?;
    out.flush()?;
    Ok(())
}

fn terminal_width() -> usize {
    // SAFETY: TIOCGWINSZ writes a winsize into the struct we pass.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) } == 0;
    if ok && ws.ws_col >= 40 {
        ws.ws_col as usize
    } else {
        80
    }
}

/// Reads keys until `done`: q/Q/Esc ask for a clean stop, Ctrl-C is turned back into the
/// SIGINT that raw mode swallowed, so the engine's usual interrupt handling applies.
fn key_reader(stop: Arc<AtomicBool>, quit: Arc<AtomicBool>, done: Arc<AtomicBool>) {
    let mut buf = [0u8; 64];
    while !done.load(Ordering::Relaxed) {
        let mut pfd = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll and read use the buffers we pass, with their lengths.
        let n = unsafe { libc::poll(&mut pfd, 1, 100) };
        if n <= 0 || pfd.revents & libc::POLLIN == 0 {
            if n < 0 || pfd.revents & (libc::POLLHUP | libc::POLLERR) != 0 {
                std::thread::sleep(Duration::from_millis(100));
            }
            continue;
        }
        let got = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
        if got <= 0 {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        for &b in &buf[..got as usize] {
            match b {
                b'q' | b'Q' | 0x1b => {
                    quit.store(true, Ordering::Relaxed);
                    stop.store(true, Ordering::Relaxed);
                }
                0x03 => unsafe {
                    libc::kill(libc::getpid(), libc::SIGINT);
                },
                _ => {}
            }
        }
    }
}

const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// A sparkline of the last `width` values, scaled to their maximum.
pub fn sparkline(values: &VecDeque<f64>, width: usize) -> String {
    let skip = values.len().saturating_sub(width);
    let shown: Vec<f64> = values.iter().skip(skip).copied().collect();
    let max = shown.iter().copied().fold(0.0, f64::max);
    shown
        .iter()
        .map(|v| {
            if max <= 0.0 || !v.is_finite() {
                ' '
            } else {
                BARS[((v / max) * 7.0).round().clamp(0.0, 7.0) as usize]
            }
        })
        .collect()
}

const HISTORY: usize = 300;

fn push(q: &mut VecDeque<f64>, v: f64) {
    if q.len() == HISTORY {
        q.pop_front();
    }
    q.push_back(v);
}

fn hms(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    format!("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

fn lat(us: f64) -> String {
    crate::units::fmt_duration(Duration::from_micros(us as u64))
}

/// The dashboard observer.
pub struct Dashboard {
    stop: Arc<AtomicBool>,
    /// The user stopped the run with q: it is recorded as interrupted.
    quit: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
    active_term: bool,
    title: String,
    throughput: VecDeque<f64>,
    active: VecDeque<f64>,
    cpu: VecDeque<f64>,
    phases: BTreeMap<Phase, (VecDeque<f64>, VecDeque<f64>)>,
    last_cpu: Duration,
    cores: f64,
}

impl Dashboard {
    /// Takes the terminal over; `stop` is the run's stop flag, set when `q` is pressed.
    pub fn new(stop: Arc<AtomicBool>, title: String) -> anyhow::Result<Dashboard> {
        enter_raw()?;
        let done = Arc::new(AtomicBool::new(false));
        let quit = Arc::new(AtomicBool::new(false));
        let reader = {
            let (stop, quit, done) = (stop.clone(), quit.clone(), done.clone());
            std::thread::Builder::new()
                .name("spate-tui-keys".into())
                .spawn(move || key_reader(stop, quit, done))?
        };
        Ok(Dashboard {
            stop,
            quit,
            done,
            reader: Some(reader),
            active_term: true,
            title,
            throughput: VecDeque::new(),
            active: VecDeque::new(),
            cpu: VecDeque::new(),
            phases: BTreeMap::new(),
            last_cpu: cpu_time(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()) as f64,
        })
    }

    fn close(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        if self.active_term {
            self.active_term = false;
            restore();
        }
    }

    fn draw(&self, snap: &Snapshot<'_>, cpu_pct: f64) -> String {
        let w = terminal_width();
        let spark = w.saturating_sub(44).clamp(10, HISTORY);
        let s = snap.summary;
        let c = &s.totals;
        let mut o = String::from("\x1b[H\x1b[2J");
        let time = match (snap.planned_s, snap.planned_count) {
            (Some(d), _) => format!("elapsed {}  remaining {}", hms(snap.t_s), hms(d - snap.t_s)),
            (None, Some(n)) => format!(
                "elapsed {}  {:.0}% of {n} messages",
                hms(snap.t_s),
                100.0 * c.attempted as f64 / n.max(1) as f64
            ),
            _ => format!("elapsed {}", hms(snap.t_s)),
        };
        let stopping = if self.stop.load(Ordering::Relaxed) {
            "  STOPPING (finishing work in flight)"
        } else {
            ""
        };
        let _ = writeln!(o, "\x1b[1m{}\x1b[0m", self.title);
        let _ = writeln!(o, "{time}   [q] stop and write results{stopping}\n");
        let _ = writeln!(
            o,
            "{:<16}{:>10.0}/s  {}",
            "throughput",
            self.throughput.back().copied().unwrap_or(0.0),
            sparkline(&self.throughput, spark)
        );
        let _ = writeln!(
            o,
            "{:<16}{:>12}  {}",
            "active sessions",
            snap.active,
            sparkline(&self.active, spark)
        );
        let _ = writeln!(
            o,
            "{:<16}{:>11.0}%  {}",
            "generator CPU",
            cpu_pct,
            sparkline(&self.cpu, spark)
        );
        let _ = writeln!(
            o,
            "{:<16}attempted {}  accepted {}  rejected {}  failed {}  ({:.0} msg/s overall)\n",
            "totals", c.attempted, c.accepted, c.rejected, c.failed, s.messages_per_s
        );
        let half = (spark / 2).max(8);
        let _ = writeln!(
            o,
            "\x1b[1m{:<13}{:>9}  {:<half$} {:>9}\x1b[0m",
            "latency", "p50", "", "p99"
        );
        for (p, (p50, p99)) in &self.phases {
            let _ = writeln!(
                o,
                "{:<13}{:>9}  {:<half$} {:>9}  {}",
                p.name(),
                lat(p50.back().copied().unwrap_or(0.0)),
                sparkline(p50, half),
                lat(p99.back().copied().unwrap_or(0.0)),
                sparkline(p99, half)
            );
        }
        if !s.errors.is_empty() {
            let _ = writeln!(o, "\n\x1b[1merrors by class (total)\x1b[0m");
            for e in s.errors.iter().take(8) {
                let class = crate::report::data::class_label(
                    &e.phase,
                    &e.kind,
                    e.code,
                    e.enhanced.as_deref(),
                );
                let text: String = e.text.chars().take(w.saturating_sub(36)).collect();
                let _ = writeln!(o, "{:>9}  {:<22} {}", e.count, class, text);
            }
            if s.errors.len() > 8 {
                let _ = writeln!(o, "  … {} more classes", s.errors.len() - 8);
            }
        }
        o
    }
}

impl Observer for Dashboard {
    fn start(&mut self, _dir: &Path, _start: SystemTime) -> anyhow::Result<()> {
        let mut out = std::io::stdout();
        let _ = write!(out, "\x1b[H\x1b[2J{}\nstarting…\n", self.title);
        let _ = out.flush();
        Ok(())
    }

    fn interval(&mut self, snap: &Snapshot<'_>) -> anyhow::Result<()> {
        let len = snap.interval_s.max(1e-3);
        push(
            &mut self.throughput,
            snap.interval.counters.accepted as f64 / len,
        );
        push(&mut self.active, snap.active as f64);
        let now = cpu_time();
        let cpu_pct = (now - self.last_cpu).as_secs_f64() / len / self.cores * 100.0;
        self.last_cpu = now;
        push(&mut self.cpu, cpu_pct);
        for &p in Phase::ALL {
            if let Some(h) = snap.interval.hist(p) {
                let e = self.phases.entry(p).or_default();
                push(&mut e.0, h.value_at_quantile(0.5) as f64);
                push(&mut e.1, h.value_at_quantile(0.99) as f64);
            }
        }
        if self.active_term {
            let screen = self.draw(snap, cpu_pct);
            let mut out = std::io::stdout();
            let _ = out.write_all(screen.as_bytes());
            let _ = out.flush();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparkline_scales_to_the_window() {
        let v: VecDeque<f64> = [0.0, 1.0, 2.0, 4.0, 8.0].into_iter().collect();
        assert_eq!(sparkline(&v, 10), "▁▂▃▅█");
        assert_eq!(sparkline(&v, 2), "▅█");
        assert_eq!(sparkline(&VecDeque::from(vec![0.0, 0.0]), 5), "  ");
    }
}
