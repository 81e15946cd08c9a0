//! Between a sweep's steps: the `--before-step` hook, and the wait until the server is
//! idle (no connection to its port, an empty queue) followed by the cool-down.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::{Args, Sweep};
use crate::units;

/// Runs `cmd` (with {value} replaced) through sh; fails the sweep when it fails. The
/// hook gets SPATE (this spate binary, for a probe like `"$SPATE" ping ...`),
/// SPATE_STEP_DIR (the step's results directory, created) and SPATE_SWEEP_VALUE.
pub(super) fn hook(
    cmd: &str,
    value: u64,
    step_dir: &Path,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    let cmd = cmd.replace("{value}", &value.to_string());
    std::fs::create_dir_all(step_dir)
        .with_context(|| format!("cannot create {}", step_dir.display()))?;
    use std::os::unix::process::CommandExt as _;
    let mut c = std::process::Command::new("sh");
    c.process_group(0)
        .arg("-c")
        .arg(&cmd)
        .env("SPATE_STEP_DIR", step_dir)
        .env("SPATE_SWEEP_VALUE", value.to_string());
    if let Ok(exe) = std::env::current_exe() {
        c.env("SPATE", exe);
    }
    let mut child = c
        .spawn()
        .with_context(|| format!("--before-step: cannot run '{cmd}'"))?;
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait()? {
            if st.success() {
                return Ok(());
            }
            anyhow::bail!("--before-step '{cmd}' failed ({st})");
        }
        if stop.load(Ordering::Relaxed) {
            // The whole group: sh may have children of its own.
            // SAFETY: kill(2) with a negative pid signals the process group we created.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGTERM) };
            let _ = child.wait();
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(600) {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("--before-step '{cmd}' still running after 10 minutes");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Established TCP connections from or to `port` (/proc/net/tcp and tcp6).
pub fn connections_on(port: u16) -> usize {
    let mut n = 0;
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let c: Vec<&str> = line.split_whitespace().collect();
            if c.len() < 4 || c[3] != "01" {
                continue;
            }
            let port_of = |s: &str| {
                s.rsplit_once(':')
                    .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
            };
            if port_of(c[1]) == Some(port) || port_of(c[2]) == Some(port) {
                n += 1;
            }
        }
    }
    n
}

/// Waits until nothing is connected to the target and the queue (if any) is empty.
async fn wait_idle(port: u16, queue: Option<&Path>, max: Duration) -> bool {
    let start = Instant::now();
    loop {
        let busy = connections_on(port) > 0
            || queue
                .is_some_and(|q| crate::monitor::queue::Queue::new(q.to_path_buf()).total() > 0);
        if !busy {
            return true;
        }
        if start.elapsed() >= max {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Between steps: until the server is idle (with --until-idle), then the cool-down;
/// false when the sweep was stopped meanwhile.
pub(super) async fn pause(sw: &Sweep, args: &Args, port: u16, stop: &AtomicBool) -> bool {
    let pause = async {
        let queue = sw.queue.as_deref();
        if args.until_idle && !wait_idle(port, queue, sw.idle_max).await {
            eprintln!(
                "spate sweep: server still busy after {}, going on",
                units::fmt_duration(sw.idle_max)
            );
        }
        tokio::time::sleep(sw.cool).await;
    };
    let stopped = async {
        while !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::select! {
        _ = pause => true,
        _ = stopped => false,
    }
}
