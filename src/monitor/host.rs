//! The machine: CPU split (/proc/stat), memory in use (/proc/meminfo), disk throughput and
//! time per transfer per device (/proc/diskstats), network bytes per interface
//! (/proc/net/dev). Devices and interfaces are chosen once, at start.

use std::collections::HashMap;

/// The aggregate `cpu` line: user+nice, system+irq+softirq, iowait, total (all in ticks).
pub fn parse_cpu(stat: &str) -> Option<[u64; 4]> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 5 {
        return None;
    }
    let g = |i: usize| v.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal (guest is already in user).
    let total: u64 = (0..8).map(g).sum();
    Some([g(0) + g(1), g(2) + g(5) + g(6), g(4), total])
}

/// MemTotal − MemAvailable, in kB.
pub fn parse_mem_used_kb(meminfo: &str) -> Option<u64> {
    let field = |name: &str| {
        meminfo
            .lines()
            .find(|l| l.starts_with(name))?
            .split_whitespace()
            .nth(1)?
            .parse::<u64>()
            .ok()
    };
    Some(field("MemTotal:")?.saturating_sub(field("MemAvailable:")?))
}

/// Per device: reads, sectors read, ms reading, writes, sectors written, ms writing.
pub fn parse_diskstats(text: &str) -> HashMap<String, [u64; 6]> {
    let mut m = HashMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 11 {
            continue;
        }
        let n = |i: usize| f[i].parse::<u64>().unwrap_or(0);
        m.insert(f[2].to_string(), [n(3), n(5), n(6), n(7), n(9), n(10)]);
    }
    m
}

/// Per interface: bytes received, bytes sent.
pub fn parse_net_dev(text: &str) -> HashMap<String, [u64; 2]> {
    let mut m = HashMap::new();
    for line in text.lines().skip(2) {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let f: Vec<u64> = rest
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if f.len() >= 9 {
            m.insert(name.trim().to_string(), [f[0], f[8]]);
        }
    }
    m
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Whole disks worth watching: not loop, RAM or optical devices.
fn default_disks() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/sys/block")
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| {
                    !["loop", "ram", "zram", "sr", "fd", "nbd"]
                        .iter()
                        .any(|p| n.starts_with(p))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Interfaces that have carried traffic (idle placeholders like ifb0 are left out).
fn default_ifaces(net: &HashMap<String, [u64; 2]>) -> Vec<String> {
    let mut v: Vec<String> = net
        .iter()
        .filter(|(_, b)| b[0] + b[1] > 0)
        .map(|(n, _)| n.clone())
        .collect();
    v.sort();
    v
}

pub struct Host {
    disks: Vec<String>,
    ifaces: Vec<String>,
    cpu: Option<[u64; 4]>,
    disk: HashMap<String, [u64; 6]>,
    net: HashMap<String, [u64; 2]>,
}

impl Host {
    /// `disks`/`ifaces` empty = choose automatically.
    pub fn new(disks: &[String], ifaces: &[String]) -> Host {
        let net = parse_net_dev(&read("/proc/net/dev"));
        let disk = parse_diskstats(&read("/proc/diskstats"));
        Host {
            disks: if disks.is_empty() {
                default_disks()
                    .into_iter()
                    .filter(|d| disk.contains_key(d))
                    .collect()
            } else {
                disks.to_vec()
            },
            ifaces: if ifaces.is_empty() {
                default_ifaces(&net)
            } else {
                ifaces.to_vec()
            },
            cpu: parse_cpu(&read("/proc/stat")),
            disk,
            net,
        }
    }

    pub fn columns(&self) -> Vec<String> {
        let mut c: Vec<String> = [
            "host.cpu.user_pct",
            "host.cpu.system_pct",
            "host.cpu.iowait_pct",
            "host.mem.used_mb",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for d in &self.disks {
            let d = super::proc::sanitize(d);
            for m in ["read_kbps", "write_kbps", "ms_per_io"] {
                c.push(format!("disk.{d}.{m}"));
            }
        }
        for i in &self.ifaces {
            let i = super::proc::sanitize(i);
            for m in ["rx_kbps", "tx_kbps"] {
                c.push(format!("net.{i}.{m}"));
            }
        }
        c
    }

    pub fn sample(&mut self, dt: f64, out: &mut Vec<f64>) {
        let dt = dt.max(1e-3);
        let cpu = parse_cpu(&read("/proc/stat"));
        match (self.cpu, cpu) {
            (Some(a), Some(b)) if b[3] > a[3] => {
                let total = (b[3] - a[3]) as f64;
                for i in 0..3 {
                    out.push(b[i].saturating_sub(a[i]) as f64 / total * 100.0);
                }
            }
            _ => out.extend([0.0; 3]),
        }
        self.cpu = cpu.or(self.cpu);
        out.push(parse_mem_used_kb(&read("/proc/meminfo")).unwrap_or(0) as f64 / 1024.0);

        let disk = parse_diskstats(&read("/proc/diskstats"));
        for d in &self.disks {
            let (a, b) = (self.disk.get(d), disk.get(d));
            let (Some(a), Some(b)) = (a, b) else {
                out.extend([0.0; 3]);
                continue;
            };
            let dd = |i: usize| b[i].saturating_sub(a[i]) as f64;
            out.push(dd(1) * 512.0 / 1024.0 / dt);
            out.push(dd(4) * 512.0 / 1024.0 / dt);
            let ios = dd(0) + dd(3);
            out.push(if ios > 0.0 {
                (dd(2) + dd(5)) / ios
            } else {
                0.0
            });
        }
        self.disk = disk;

        let net = parse_net_dev(&read("/proc/net/dev"));
        for i in &self.ifaces {
            match (self.net.get(i), net.get(i)) {
                (Some(a), Some(b)) => {
                    out.push(b[0].saturating_sub(a[0]) as f64 / 1024.0 / dt);
                    out.push(b[1].saturating_sub(a[1]) as f64 / 1024.0 / dt);
                }
                _ => out.extend([0.0; 2]),
            }
        }
        self.net = net;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers() {
        let c = parse_cpu("cpu  100 5 50 1000 20 3 2 0 0 0\ncpu0 1 2 3 4\n").unwrap();
        assert_eq!(c, [105, 55, 20, 1180]);
        let m = "MemTotal:  2000000 kB\nMemFree: 100 kB\nMemAvailable:  500000 kB\n";
        assert_eq!(parse_mem_used_kb(m), Some(1_500_000));
        let d = parse_diskstats(" 254 0 vda 10 1 800 30 20 2 1600 40 0 60 70\n");
        assert_eq!(d["vda"], [10, 800, 30, 20, 1600, 40]);
        let n = parse_net_dev("h1\nh2\n  lo: 100 2 0 0 0 0 0 0 200 3 0 0 0 0 0 0\n");
        assert_eq!(n["lo"], [100, 200]);
    }

    #[test]
    fn live_sample_is_sane() {
        let mut h = Host::new(&[], &[]);
        let cols = h.columns();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut out = Vec::new();
        h.sample(0.05, &mut out);
        assert_eq!(out.len(), cols.len());
        assert!(out.iter().all(|v| v.is_finite() && *v >= 0.0));
        assert!(out[0] + out[1] + out[2] <= 100.5);
        assert!(out[3] > 10.0, "memory used {}", out[3]);
        assert!(cols.iter().any(|c| c == "net.lo.rx_kbps"), "{cols:?}");
    }
}
