//! Server monitoring options, shared by every load command (the monitor itself is in
//! `monitor`).

use std::path::PathBuf;

use serde::Serialize;

/// Monitoring options, shared by every load command.
#[derive(Debug, Clone, Default, clap::Args, Serialize)]
pub struct MonitorArgs {
    /// Sample the host (CPU, memory, disks, network) and spate itself every second into
    /// monitor.csv. Implied by every other --monitor-* option.
    #[arg(long, help_heading = "Monitoring")]
    pub monitor: bool,
    /// Follow processes by command name, summed per name, e.g.
    /// master,smtpd,cleanup,qmgr,dovecot,slapd (processes may come and go).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "NAMES",
        help_heading = "Monitoring"
    )]
    pub monitor_process: Vec<String>,
    /// Follow processes by PID (e.g. the embedded server's).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "PIDS",
        help_heading = "Monitoring"
    )]
    pub monitor_pid: Vec<u32>,
    /// Count the messages in a Postfix queue directory (incoming, active, deferred, hold),
    /// e.g. /var/spool/postfix.
    #[arg(long, value_name = "DIR", help_heading = "Monitoring")]
    pub monitor_queue: Option<PathBuf>,
    /// Scrape a Prometheus text endpoint every second (node_exporter, a server's own
    /// metrics), for servers on other machines: http://HOST:PORT/metrics.
    #[arg(long, value_name = "URL", help_heading = "Monitoring")]
    pub monitor_prom: Option<String>,
    /// Series to keep from --monitor-prom: metric names (every label set) or exact
    /// 'name{label="v"}' texts.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "SERIES",
        help_heading = "Monitoring"
    )]
    pub monitor_series: Vec<String>,
    /// Disks to watch [default: every whole disk but loop/ram devices].
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "DEVS",
        help_heading = "Monitoring"
    )]
    pub monitor_disk: Vec<String>,
    /// Network interfaces to watch [default: every interface that has carried traffic].
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "IFACES",
        help_heading = "Monitoring"
    )]
    pub monitor_net: Vec<String>,
    /// Warn when a monitored process's memory grows faster than this (soak runs).
    #[arg(
        long,
        default_value = "10MB/h",
        value_name = "SIZE/h",
        help_heading = "Monitoring"
    )]
    pub leak_warn: String,
    /// A fault on a schedule (repeatable), each event in faults.jsonl and what the load
    /// did before, during and after it in the summary: 'at=30s for=10s signal=STOP
    /// pid=1234' (CONT at the end), 'at=1m signal=KILL pidfile=/run/postfix.pid
    /// restart="postfix start"', 'at=10s every=1m signal=TERM pidfile=/run/postfix.pid
    /// name=smtpd' (name= picks among the PID's process and its descendants, never
    /// elsewhere on the host: a name alone is refused), 'at=20s for=15s run="fill-disk"
    /// undo="free-disk"', 'at=10s for=5s net=blackhole' (through a proxy of spate's own:
    /// latency:D, loss:P, bandwidth:RATE, blackhole, refuse, reset, cut:N), 'at=10s for=5s
    /// kernel=loss:5% netns=srv' (as root, nftables or tc inside the network namespace the
    /// server runs in: loss:P, partition, reject, rate:RATE). Checked before the run: a PID
    /// that is not there is an error (a name is looked for when the fault comes), as is a
    /// namespace that is not there. A fault that fails when it comes fails the run (exit
    /// 1) unless it says optional=yes
    #[arg(long, value_name = "SPEC", help_heading = "Faults")]
    pub fault: Vec<String>,
}

impl MonitorArgs {
    pub fn enabled(&self) -> bool {
        self.monitor
            || !self.monitor_process.is_empty()
            || !self.monitor_pid.is_empty()
            || self.monitor_queue.is_some()
            || self.monitor_prom.is_some()
    }
}
