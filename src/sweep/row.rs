//! One row of sweep.csv: a finished step's figures.

use std::path::Path;

use serde::Serialize;

use crate::results::Summary;

/// What is swept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Param {
    Users,
    Rate,
    Size,
    MessagesPerConnection,
    Value,
}

/// One row of sweep.csv.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Row {
    pub step: usize,
    pub param: String,
    pub value: u64,
    pub repeat: u32,
    pub test_time_s: f64,
    pub latency_mean_ms: f64,
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
    pub throughput_per_s: f64,
    pub errors: u64,
    pub net_kbps: Option<f64>,
    pub disk_kbps: Option<f64>,
    pub disk_ms: Option<f64>,
    pub cpu_pct: Option<f64>,
    /// Resident memory of the monitored processes (or the host's memory in use), MB.
    /// In sweep.json only: sweep.csv keeps E4's columns.
    pub mem_mb: Option<f64>,
    /// CPU of the monitored server processes per accepted unit (message, visit,
    /// stanza), µs: None when no server process was followed. In sweep.json only.
    pub cpu_us_per_unit: Option<f64>,
    /// The phase the latency columns are of (XMPP: the last copy of a multicast, else a
    /// message's arrival, ...).
    pub latency_phase: String,
    /// Mean total time of the step's ping probe (ping.json written by a --before-step
    /// hook with `spate ping --json "$SPATE_STEP_DIR/ping.json"`), ms.
    pub ping_ms: Option<f64>,
    pub dir: String,
    /// The run's verdict (`server`, `generator`, `undetermined`): a step whose generator
    /// was the limit says nothing about the server. In sweep.json only.
    pub bound_by: String,
    /// See [`table::Analysis::cpu_basis`].
    #[serde(skip)]
    pub cpu_basis: String,
}

pub const CSV_HEADER: &str = "step,param,value,repeat,test_time_s,latency_mean_ms,latency_p50_ms,latency_p99_ms,throughput_per_s,errors,net_kbps,disk_kbps,disk_ms,cpu_pct";

impl Row {
    pub fn csv(&self) -> String {
        let o = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
        format!(
            "{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{},{},{},{},{}",
            self.step,
            self.param,
            self.value,
            self.repeat,
            self.test_time_s,
            self.latency_mean_ms,
            self.latency_p50_ms,
            self.latency_p99_ms,
            self.throughput_per_s,
            self.errors,
            o(self.net_kbps),
            o(self.disk_kbps),
            o(self.disk_ms),
            o(self.cpu_pct)
        )
    }

    /// The figures of one finished step.
    pub fn from_summary(
        step: usize,
        param: &str,
        value: u64,
        repeat: u32,
        s: &Summary,
        dir: &Path,
    ) -> Row {
        // A unit's latency from its schedule; where a unit gets no answer (an XMPP
        // stanza), the time to its recipients.
        let lat = s.latency_phase();
        let ms = |us: f64| (us / 1000.0 * 1000.0).round() / 1000.0;
        let Server {
            window_s,
            net,
            disk,
            disk_ms,
            cpu,
            mem,
            basis,
        } = Server::of(s);
        let cpu_us_per_unit = cpu
            .filter(|_| basis != "host" && s.totals.accepted > 0)
            .map(|pct| (pct / 100.0 * window_s * 1e6 / s.totals.accepted as f64).round());
        let bound_by = s
            .extra
            .get("bound_by")
            .and_then(|b| b["bound_by"].as_str())
            .unwrap_or("undetermined")
            .to_string();
        Row {
            bound_by,
            step,
            param: param.to_string(),
            value,
            repeat,
            test_time_s: s.elapsed_s,
            latency_mean_ms: lat.map_or(0.0, |p| ms(p.mean_us)),
            latency_p50_ms: lat.map_or(0.0, |p| ms(p.p50_us as f64)),
            latency_p99_ms: lat.map_or(0.0, |p| ms(p.p99_us as f64)),
            throughput_per_s: (s.messages_per_s * 1000.0).round() / 1000.0,
            errors: s.totals.rejected + s.totals.failed,
            net_kbps: net,
            disk_kbps: disk,
            disk_ms,
            cpu_pct: cpu,
            cpu_us_per_unit,
            latency_phase: lat.map_or(String::new(), |p| p.phase.clone()),
            mem_mb: mem,
            ping_ms: ping_ms(dir),
            cpu_basis: basis,
            dir: dir
                .file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into_owned()),
        }
    }
}

/// What the monitor saw of the server during a step (summary.json's `extra.monitor`).
struct Server {
    /// The window the means are over: the load's own (after the logins), or the run.
    window_s: f64,
    net: Option<f64>,
    disk: Option<f64>,
    disk_ms: Option<f64>,
    cpu: Option<f64>,
    mem: Option<f64>,
    /// `host`, or the process groups the CPU and memory are of.
    basis: String,
}

impl Server {
    fn of(s: &Summary) -> Server {
        let mon = s.extra.get("monitor");
        // The load's own window when the logins were a phase of their own (XMPP): the
        // server's figures without the login storm; else the whole run.
        let window = mon
            .and_then(|m| m.get("after_setup"))
            .filter(|w| w.is_object());
        let window_s = window
            .and_then(|w| w["seconds"].as_f64())
            .unwrap_or(s.elapsed_s);
        let mean = match window {
            Some(w) => w.get("mean"),
            None => mon.and_then(|m| m.get("mean")),
        }
        .and_then(|m| m.as_object());
        let sum_of = |pred: &dyn Fn(&str) -> bool| {
            mean.map(|m| {
                m.iter()
                    .filter(|(k, _)| pred(k))
                    .filter_map(|(_, v)| v.as_f64())
                    .sum::<f64>()
            })
        };
        let net = sum_of(&|k| {
            k.starts_with("net.") && (k.ends_with(".rx_kbps") || k.ends_with(".tx_kbps"))
        });
        let disk = sum_of(&|k| {
            k.starts_with("disk.") && (k.ends_with(".read_kbps") || k.ends_with(".write_kbps"))
        });
        // Time per transfer: the mean over disks that did any I/O.
        let disk_ms = mean.map(|m| {
            let v: Vec<f64> = m
                .iter()
                .filter(|(k, _)| k.starts_with("disk.") && k.ends_with(".ms_per_io"))
                .filter_map(|(_, v)| v.as_f64())
                .filter(|v| *v > 0.0)
                .collect();
            if v.is_empty() {
                0.0
            } else {
                v.iter().sum::<f64>() / v.len() as f64
            }
        });
        let basis = mon
            .and_then(|m| m.get("cpu_basis"))
            .and_then(|b| b.as_str())
            .unwrap_or("host")
            .to_string();
        let (cpu, mem) = if basis == "host" {
            (
                sum_of(&|k| k == "host.cpu.user_pct" || k == "host.cpu.system_pct"),
                sum_of(&|k| k == "host.mem.used_mb"),
            )
        } else {
            let of =
                |m: &str| -> Vec<String> { basis.split('+').map(|g| format!("{g}.{m}")).collect() };
            let (c, r) = (of("cpu_pct"), of("rss_mb"));
            (
                sum_of(&|k| c.iter().any(|g| g == k)),
                sum_of(&|k| r.iter().any(|g| g == k)),
            )
        };
        Server {
            window_s,
            net,
            disk,
            disk_ms,
            cpu,
            mem,
            basis,
        }
    }
}

/// The mean total time of a ping probe from `dir/ping.json`, if there is one.
fn ping_ms(dir: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(dir.join("ping.json")).ok()?;
    let j: serde_json::Value = serde_json::from_str(&text).ok()?;
    j["total"]["mean_ms"].as_f64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn row_takes_server_cpu_when_processes_are_monitored() {
        let header = crate::results::SummaryHeader {
            run_id: "x".into(),
            command: vec![],
            protocol: "smtp".into(),
            words: crate::results::UnitWords::before_declared("smtp"),
            target: "t".into(),
            started: std::time::SystemTime::now(),
        };
        let mut s = header.summary(
            &crate::metrics::Shard::default(),
            2.0,
            true,
            false,
            (Duration::ZERO, "process"),
        );
        s.extra.insert(
            "monitor".into(),
            serde_json::json!({
                "cpu_basis": "proc.smtpd+proc.cleanup",
                "mean": {
                    "host.cpu.user_pct": 30.0, "host.cpu.system_pct": 10.0,
                    "proc.smtpd.cpu_pct": 12.0, "proc.cleanup.cpu_pct": 3.0,
                    "proc.smtpd.rss_mb": 20.0, "proc.cleanup.rss_mb": 5.0, "host.mem.used_mb": 900.0,
                    "self.spate.cpu_pct": 50.0,
                    "disk.vda.read_kbps": 1.0, "disk.vda.write_kbps": 9.0, "disk.vda.ms_per_io": 2.0,
                    "disk.vdb.read_kbps": 0.0, "disk.vdb.write_kbps": 0.0, "disk.vdb.ms_per_io": 0.0,
                    "net.lo.rx_kbps": 100.0, "net.lo.tx_kbps": 100.0
                }
            }),
        );
        let r = Row::from_summary(1, "users", 4, 1, &s, Path::new("/x/step-01-users-4"));
        assert_eq!(r.cpu_pct, Some(15.0));
        // No unit was accepted: no cost per unit rather than a division by zero.
        assert_eq!(r.cpu_us_per_unit, None);
        assert_eq!(r.mem_mb, Some(25.0));
        assert_eq!(r.disk_kbps, Some(10.0));
        assert_eq!(r.disk_ms, Some(2.0));
        assert_eq!(r.net_kbps, Some(200.0));
        assert_eq!(r.dir, "step-01-users-4");
        assert_eq!(r.csv().split(',').count(), CSV_HEADER.split(',').count());
        s.extra.clear();
        let r = Row::from_summary(1, "users", 4, 1, &s, Path::new("d"));
        assert!(r.cpu_pct.is_none());
        assert!(r.csv().ends_with(",,,,"));
    }
}
