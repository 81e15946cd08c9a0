//! A global allocator that counts, for tests that measure the heap rather than read RSS:
//! live bytes and allocations, exact and independent of timing. A test binary installs
//! it with `#[global_allocator] static A: common::counting::Counting = ...;` and reads
//! [`live`] and [`allocs`]; counts cover every thread of the process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);
static ALLOCS: AtomicU64 = AtomicU64::new(0);
/// The most bytes live at once since [`reset_peak`].
static PEAK: AtomicI64 = AtomicI64::new(0);
/// Live bytes in allocations under [`SMALL`].
static LIVE_SMALL: AtomicI64 = AtomicI64::new(0);

/// Allocations of this size and more are a run's, not a session's: the phase histograms
/// (about 190 KiB each, per recording thread, allocated when a thread first records a
/// phase, so their number varies from run to run), results buffers.
pub const SMALL: usize = 32 * 1024;

fn small(size: usize) -> i64 {
    if size < SMALL {
        size as i64
    } else {
        0
    }
}

fn grew(by: i64) {
    let live = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to the system allocator unchanged; only counters move.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        grew(l.size() as i64);
        LIVE_SMALL.fetch_add(small(l.size()), Ordering::Relaxed);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as i64, Ordering::Relaxed);
        LIVE_SMALL.fetch_sub(small(l.size()), Ordering::Relaxed);
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        grew(new as i64 - l.size() as i64);
        LIVE_SMALL.fetch_add(small(new) - small(l.size()), Ordering::Relaxed);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.realloc(p, l, new)
    }
}

/// Bytes allocated and not yet freed.
pub fn live() -> i64 {
    LIVE.load(Ordering::SeqCst)
}

/// The most bytes live at once since the last [`reset_peak`].
pub fn peak() -> i64 {
    PEAK.load(Ordering::SeqCst)
}

/// Starts a new peak from what is live now.
pub fn reset_peak() {
    PEAK.store(live(), Ordering::SeqCst);
}

/// Allocations (and reallocations) so far.
pub fn allocs() -> u64 {
    ALLOCS.load(Ordering::SeqCst)
}

/// The live heap in the middle of a run: samples taken every 20 ms between 40 % and 70 %
/// of its time.
pub struct Plateau {
    /// Their median.
    pub median: i64,
    /// The median of the bytes live in allocations under [`SMALL`].
    pub small: i64,
    pub summary: serde_json::Value,
}

/// Runs `spate ARGS --quiet --out DIR` in this process (DIR a new temporary directory)
/// and returns the live heap in the middle of the run and its summary.json. The run must
/// succeed.
pub fn plateau(args: &[&str]) -> Plateau {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let args: Vec<String> = std::iter::once("spate")
        .chain(args.iter().copied())
        .chain(["--quiet", "--out", out.to_str().unwrap()])
        .map(String::from)
        .collect();
    let mut samples = Vec::with_capacity(1000);
    let t0 = Instant::now();
    let run = std::thread::spawn(move || spate::cli::main(args));
    while !run.is_finished() && samples.len() < 1000 {
        samples.push((
            t0.elapsed().as_secs_f64(),
            live(),
            LIVE_SMALL.load(Ordering::SeqCst),
        ));
        std::thread::sleep(Duration::from_millis(20));
    }
    let code = run.join().unwrap();
    let took = t0.elapsed().as_secs_f64();
    let mid = |f: fn(&(f64, i64, i64)) -> i64| {
        let mut m: Vec<i64> = samples
            .iter()
            .filter(|s| s.0 >= 0.4 * took && s.0 <= 0.7 * took)
            .map(f)
            .collect();
        assert!(m.len() > 10, "{} samples in {took:.1} s", m.len());
        m.sort_unstable();
        m[m.len() / 2]
    };
    assert_eq!(
        format!("{code:?}"),
        format!("{:?}", std::process::ExitCode::SUCCESS)
    );
    let summary =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    Plateau {
        median: mid(|s| s.1),
        small: mid(|s| s.2),
        summary,
    }
}

/// Heap bytes one more session holds: `spate serve LISTEN` in its own process, with 400
/// users `user{i}@example.test` (password `pw{i}`) in a users file, and `run(addr,
/// users_file, k)` (a [`plateau`] of a run of `k` sessions) for `k0` (twice: the first
/// warms up one-off structures) and `k`; the difference over `k - k0`.
pub fn per_session(
    listen: &str,
    (k0, k): (usize, usize),
    run: impl Fn(&str, &Path, usize) -> i64,
) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users.txt");
    let list: String = (0..k.max(400))
        .map(|i| format!("user{i}@example.test pw{i}\n"))
        .collect();
    std::fs::write(&users, list).unwrap();
    let (_server, addr) =
        super::serve_process(listen, &["--users-file".as_ref(), users.as_os_str()]);
    run(&addr, &users, k0);
    let small = run(&addr, &users, k0);
    let large = run(&addr, &users, k);
    (large - small) as f64 / (k - k0) as f64
}

/// Reads from `s` until `want` is in what came, into a stack buffer: a client on the
/// test's thread that allocates nothing while the server's heap is counted.
pub fn read_until(s: &mut std::net::TcpStream, want: &[u8]) {
    use std::io::Read;
    let mut buf = [0u8; 2048];
    let mut have = 0;
    loop {
        let n = s.read(&mut buf[have..]).expect("the server answers");
        assert!(n > 0, "the server closed the session");
        have += n;
        if buf[..have].windows(want.len()).any(|w| w == want) {
            return;
        }
        if have == buf.len() {
            // Keep the tail, where `want` may begin.
            buf.copy_within(have - 64.., 0);
            have = 64;
        }
    }
}
