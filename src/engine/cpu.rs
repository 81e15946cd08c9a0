//! The generator's own CPU time. One process can hold more than the load generator: the
//! demo and a scenario's `[server]` run the embedded server in it, on a runtime of its own
//! whose threads are named [`SERVER_THREAD`]; their CPU is read per thread from
//! /proc/self/task and taken out. Parallel workloads of a scenario share the process and
//! cannot be told apart; a run says so in its basis.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The name of every thread of the embedded server's runtime.
pub const SERVER_THREAD: &str = "spate-server";

/// Runs of the engine going on in this process now (parallel scenario workloads).
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// CPU time (user + system) this process has used, all threads, living or gone.
pub fn process_cpu() -> Duration {
    // SAFETY: getrusage only writes into the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU time of the embedded server's living threads, and whether there are any.
/// (A server thread that has exited leaves its time in the process total: the runtime's
/// workers live as long as the server, only idle blocking-pool threads come and go.)
pub fn server_cpu() -> (Duration, bool) {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return (Duration::ZERO, false);
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut ticks = 0u64;
    let mut any = false;
    for t in tasks.flatten() {
        let p = t.path();
        let named = std::fs::read_to_string(p.join("comm"))
            .is_ok_and(|c| c.trim_end().starts_with(SERVER_THREAD));
        if !named {
            continue;
        }
        any = true;
        if let Some(n) = std::fs::read_to_string(p.join("stat"))
            .ok()
            .and_then(|s| thread_ticks(&s))
        {
            ticks += n;
        }
    }
    (Duration::from_secs_f64(ticks as f64 / hz), any)
}

/// utime + stime (clock ticks) from a /proc/…/stat line; the name field may hold spaces
/// and parentheses, so fields are counted after its last ')'.
fn thread_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    // After ')': state is field 3; utime and stime are fields 14 and 15.
    let utime: u64 = f.nth(11)?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(utime + stime)
}

/// CPU time of the calling thread (one system call: the vDSO does not serve this clock).
pub fn thread_cpu() -> Duration {
    // SAFETY: clock_gettime writes into the struct we pass.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The generator's CPU time: the process's, less the embedded server's threads.
pub fn cpu_time() -> Duration {
    let (server, _) = server_cpu();
    process_cpu().saturating_sub(server)
}

/// Follows one run: its CPU from start to now, and what that figure covers.
pub struct RunCpu {
    start: Duration,
    server_seen: Cell<bool>,
    shared: Cell<bool>,
}

impl RunCpu {
    /// Starts counting (call once per run; [`RunCpu::end`] must follow).
    pub fn start() -> RunCpu {
        let others = RUNNING.fetch_add(1, Ordering::SeqCst);
        RunCpu {
            start: cpu_time(),
            server_seen: Cell::new(server_cpu().1),
            shared: Cell::new(others > 0),
        }
    }

    /// CPU used since the start.
    pub fn used(&self) -> Duration {
        if RUNNING.load(Ordering::SeqCst) > 1 {
            self.shared.set(true);
        }
        let (server, seen) = server_cpu();
        if seen {
            self.server_seen.set(true);
        }
        process_cpu()
            .saturating_sub(server)
            .saturating_sub(self.start)
    }

    /// What [`RunCpu::used`] measures, in words for the summary.
    pub fn basis(&self) -> &'static str {
        match (self.server_seen.get(), self.shared.get()) {
            (false, false) => "process",
            (true, false) => "process less the embedded server's threads",
            (false, true) => "process, shared with workloads running in parallel",
            (true, true) => {
                "process less the embedded server's threads, shared with workloads running in parallel"
            }
        }
    }
}

impl Drop for RunCpu {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_read_after_the_last_parenthesis() {
        let stat = "4242 (spate (x) y) S 1 2 3 4 5 6 7 8 9 10 250 37 0 0 20 0 1 0";
        assert_eq!(thread_ticks(stat), Some(287));
        assert_eq!(thread_ticks("garbage"), None);
    }

    #[test]
    fn a_busy_server_thread_is_taken_out_of_the_generator() {
        let t0 = (process_cpu(), cpu_time());
        let (busy_tx, busy_rx) = std::sync::mpsc::channel::<()>();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let spin = std::thread::Builder::new()
            .name(SERVER_THREAD.into())
            .spawn(move || {
                // Burn 300 ms of this thread's own CPU, however loaded the machine is.
                let mut x = 0u64;
                while thread_cpu() < Duration::from_millis(300) {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
                let _ = busy_tx.send(());
                // Stay alive until measured: an exited thread's time stays in the total.
                let _ = done_rx.recv_timeout(Duration::from_secs(60));
            })
            .unwrap();
        busy_rx.recv_timeout(Duration::from_secs(60)).unwrap();
        let (server, seen) = server_cpu();
        let process = process_cpu() - t0.0;
        let generator = cpu_time().saturating_sub(t0.1);
        let _ = done_tx.send(());
        spin.join().unwrap();
        assert!(seen);
        assert!(server >= Duration::from_millis(250), "{server:?}");
        assert!(process >= Duration::from_millis(250), "{process:?}");
        assert!(
            generator + Duration::from_millis(200) < process,
            "generator {generator:?} of process {process:?}"
        );
    }
}
