//! Processes from /proc: CPU %, resident memory, I/O bytes and open descriptors, summed
//! over every process of a name (Postfix runs many `smtpd`s that come and go) or for one
//! PID. One pass over /proc per sample serves every name group.

use std::collections::HashMap;
use std::path::Path;

/// Clock ticks per second and page size, read once.
pub struct Sys {
    pub hz: f64,
    pub page: f64,
}

impl Sys {
    pub fn get() -> Sys {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        Sys {
            hz: if hz > 0 { hz as f64 } else { 100.0 },
            page: if page > 0 { page as f64 } else { 4096.0 },
        }
    }
}

/// What /proc/<pid>/stat says about one process.
#[derive(Debug, Clone, PartialEq)]
pub struct Stat {
    pub comm: String,
    /// R, S, D, Z (zombie: exited, not yet reaped), ...
    pub state: char,
    /// The parent's PID.
    pub ppid: u32,
    /// utime + stime, in clock ticks.
    pub cpu_ticks: u64,
    /// Start time after boot, in clock ticks.
    pub start_ticks: u64,
    pub rss_pages: u64,
}

/// Parses the text of /proc/<pid>/stat. The command name sits in parentheses and may
/// itself contain spaces and parentheses, so fields are counted from the last ')'.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let f: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // f[0] is field 3 (state); field n is f[n - 3].
    let num = |n: usize| f.get(n - 3).and_then(|s| s.parse::<u64>().ok());
    Some(Stat {
        comm,
        state: f.first()?.chars().next()?,
        ppid: u32::try_from(num(4)?).ok()?,
        cpu_ticks: num(14)? + num(15)?,
        start_ticks: num(22)?,
        rss_pages: num(24)?,
    })
}

/// read_bytes and write_bytes of /proc/<pid>/io (storage I/O caused by the process).
pub fn parse_io(text: &str) -> (u64, u64) {
    let mut r = (0, 0);
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("read_bytes:") {
            r.0 = v.trim().parse().unwrap_or(0);
        } else if let Some(v) = line.strip_prefix("write_bytes:") {
            r.1 = v.trim().parse().unwrap_or(0);
        }
    }
    r
}

#[derive(Debug, Clone, Copy, Default)]
struct Last {
    cpu_ticks: u64,
    read: u64,
    write: u64,
}

/// How a group picks its processes.
#[derive(Debug, Clone, PartialEq)]
pub enum Selector {
    /// Every process whose command name (as in `ps -o comm`, at most 15 characters) is this.
    Name(String),
    Pid(u32),
}

/// One column group `proc.<name>` (or `self.spate`).
pub struct Group {
    pub prefix: String,
    pub pick: Selector,
    /// All five figures and a count, or only CPU and memory (spate itself).
    full: bool,
    last: HashMap<u32, Last>,
}

impl Group {
    pub fn new(prefix: String, pick: Selector, full: bool) -> Group {
        Group {
            prefix,
            pick,
            full,
            last: HashMap::new(),
        }
    }

    pub fn columns(&self) -> Vec<String> {
        let m: &[&str] = if self.full {
            &[
                "cpu_pct",
                "rss_mb",
                "read_kbps",
                "write_kbps",
                "fds",
                "count",
            ]
        } else {
            &["cpu_pct", "rss_mb"]
        };
        m.iter().map(|m| format!("{}.{m}", self.prefix)).collect()
    }

    fn matches(&self, pid: u32, st: &Stat) -> bool {
        match &self.pick {
            Selector::Pid(p) => *p == pid,
            Selector::Name(n) => name_matches(n, &st.comm),
        }
    }
}

/// Whether a process whose command name is `comm` is named `name` (the kernel truncates
/// command names to 15 bytes).
fn name_matches(name: &str, comm: &str) -> bool {
    comm == name || (name.len() > 15 && name.as_bytes()[..15] == *comm.as_bytes())
}

/// The processes of a tree now: each root that is alive and every descendant of one, by
/// PID (sorted). With `name`, only those of that command name (as `--monitor-process`
/// matches them). A process outside the trees is never in the answer, whatever its name.
pub fn pids_in_trees(roots: &[u32], name: Option<&str>) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let all: Vec<(u32, Stat)> = rd
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter_map(|pid: u32| {
            let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            Some((pid, parse_stat(&text)?))
        })
        .collect();
    let mut inside: std::collections::BTreeSet<u32> = roots
        .iter()
        .copied()
        .filter(|r| all.iter().any(|(p, _)| p == r))
        .collect();
    // Parents come and go in any order in /proc: add children until nothing changes.
    loop {
        let before = inside.len();
        for (pid, st) in &all {
            if inside.contains(&st.ppid) {
                inside.insert(*pid);
            }
        }
        if inside.len() == before {
            break;
        }
    }
    all.iter()
        .filter(|(pid, st)| inside.contains(pid) && name.is_none_or(|n| name_matches(n, &st.comm)))
        .map(|(pid, _)| *pid)
        .collect::<std::collections::BTreeSet<u32>>()
        .into_iter()
        .collect()
}

/// Every process group, sampled together.
pub struct Procs {
    pub groups: Vec<Group>,
    sys: Sys,
    /// Uptime (ticks) at the previous sample: a process started after it is new, and all
    /// its CPU and I/O belong to this interval.
    last_uptime_ticks: u64,
    scan: bool,
    /// PIDs that matched no group: looked at again only every few samples. A command
    /// name changes only on exec, and servers exec right after fork, so this saves most
    /// of the /proc reads of a scan at the price of a few seconds' delay in that rare case.
    skip: HashMap<u32, u8>,
}

/// Samples between looks at a process that matched nothing.
const RECHECK: u8 = 5;

fn uptime_ticks(hz: f64) -> u64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0, |s| (s * hz) as u64)
}

impl Procs {
    pub fn new(groups: Vec<Group>) -> Procs {
        let scan = groups.iter().any(|g| matches!(g.pick, Selector::Name(_)));
        let sys = Sys::get();
        Procs {
            last_uptime_ticks: uptime_ticks(sys.hz),
            groups,
            sys,
            scan,
            skip: HashMap::new(),
        }
    }

    pub fn columns(&self) -> Vec<String> {
        self.groups.iter().flat_map(|g| g.columns()).collect()
    }

    /// The PIDs to look at this time: all of /proc when a name is followed.
    fn pids(&self) -> Vec<u32> {
        if self.scan {
            let Ok(rd) = std::fs::read_dir("/proc") else {
                return Vec::new();
            };
            rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        } else {
            self.groups
                .iter()
                .filter_map(|g| match g.pick {
                    Selector::Pid(p) => Some(p),
                    Selector::Name(_) => None,
                })
                .collect()
        }
    }

    /// Appends every group's figures for an interval of `dt` seconds.
    pub fn sample(&mut self, dt: f64, out: &mut Vec<f64>) {
        let now_ticks = uptime_ticks(self.sys.hz);
        let dt = dt.max(1e-3);
        // Per group: cpu ticks, rss pages, read, write, fds, count.
        let mut acc = vec![[0f64; 6]; self.groups.len()];
        let mut seen: Vec<Vec<u32>> = vec![Vec::new(); self.groups.len()];
        let mut buf = String::new();
        let pids = self.pids();
        if self.scan {
            let present: std::collections::HashSet<u32> = pids.iter().copied().collect();
            self.skip.retain(|p, _| present.contains(p));
        }
        for pid in pids {
            if let Some(n) = self.skip.get_mut(&pid) {
                if *n > 0 {
                    *n -= 1;
                    continue;
                }
            }
            let dir = Path::new("/proc").join(pid.to_string());
            buf.clear();
            if read_into(&dir.join("stat"), &mut buf).is_err() {
                continue;
            }
            let Some(st) = parse_stat(&buf) else { continue };
            // An exited process waiting to be reaped is gone for every purpose here.
            if matches!(st.state, 'Z' | 'X') {
                continue;
            }
            let mut matched = false;
            for (gi, g) in self.groups.iter_mut().enumerate() {
                if !g.matches(pid, &st) {
                    continue;
                }
                matched = true;
                let (read, write) = if g.full {
                    buf.clear();
                    match read_into(&dir.join("io"), &mut buf) {
                        Ok(()) => parse_io(&buf),
                        Err(_) => (0, 0),
                    }
                } else {
                    (0, 0)
                };
                let cur = Last {
                    cpu_ticks: st.cpu_ticks,
                    read,
                    write,
                };
                let prev = g.last.get(&pid).copied().unwrap_or(
                    if st.start_ticks >= self.last_uptime_ticks {
                        Last::default()
                    } else {
                        cur
                    },
                );
                let a = &mut acc[gi];
                a[0] += cur.cpu_ticks.saturating_sub(prev.cpu_ticks) as f64;
                a[1] += st.rss_pages as f64;
                a[2] += cur.read.saturating_sub(prev.read) as f64;
                a[3] += cur.write.saturating_sub(prev.write) as f64;
                if g.full {
                    a[4] += std::fs::read_dir(dir.join("fd")).map_or(0, |d| d.count()) as f64;
                }
                a[5] += 1.0;
                g.last.insert(pid, cur);
                seen[gi].push(pid);
            }
            if matched {
                self.skip.remove(&pid);
            } else if self.scan {
                self.skip.insert(pid, RECHECK - 1);
            }
        }
        for (gi, g) in self.groups.iter_mut().enumerate() {
            // Forget processes that are gone (a reused PID starts afresh).
            let s = &seen[gi];
            g.last.retain(|p, _| s.contains(p));
            let a = acc[gi];
            out.push(a[0] / self.sys.hz / dt * 100.0);
            out.push(a[1] * self.sys.page / 1_048_576.0);
            if g.full {
                out.push(a[2] / 1024.0 / dt);
                out.push(a[3] / 1024.0 / dt);
                out.push(a[4]);
                out.push(a[5]);
            }
        }
        self.last_uptime_ticks = now_ticks;
    }
}

/// Reads a small /proc file into `buf` (one read call for the usual sizes).
pub fn read_into(path: &Path, buf: &mut String) -> std::io::Result<()> {
    use std::io::Read;
    std::fs::File::open(path)?.read_to_string(buf).map(|_| ())
}

/// Column-safe form of a name: letters, digits, '_' and '-' only.
pub fn sanitize(s: &str) -> String {
    let t: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if t.is_empty() {
        "_".into()
    } else {
        t
    }
}

/// CPU time of the calling thread.
pub fn thread_cpu() -> std::time::Duration {
    // SAFETY: clock_gettime only writes into the struct we pass.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_names() {
        let t = "1234 (my (odd) prog) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 98765 1000000 2048 18446744073709551615";
        let s = parse_stat(t).unwrap();
        assert_eq!(s.comm, "my (odd) prog");
        assert_eq!(s.state, 'S');
        assert_eq!(s.cpu_ticks, 300);
        assert_eq!(s.start_ticks, 98765);
        assert_eq!(s.rss_pages, 2048);
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn io_fields() {
        let t = "rchar: 5\nwchar: 6\nsyscr: 1\nsyscw: 1\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n";
        assert_eq!(parse_io(t), (4096, 8192));
    }

    #[test]
    fn own_process_is_found_by_pid_and_name() {
        let me = std::process::id();
        let st = parse_stat(&std::fs::read_to_string("/proc/self/stat").unwrap()).unwrap();
        let mut p = Procs::new(vec![
            Group::new("proc.me".into(), Selector::Pid(me), true),
            Group::new("proc.byname".into(), Selector::Name(st.comm.clone()), true),
        ]);
        let mut out = Vec::new();
        p.sample(1.0, &mut out);
        assert_eq!(out.len(), 12);
        assert!(out[1] > 1.0, "rss {out:?}");
        assert_eq!(out[5], 1.0);
        assert!(out[11] >= 1.0);
        assert!(out[4] >= 3.0, "fds {out:?}");
    }
}
