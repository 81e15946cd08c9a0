//! `--metrics-listen ADDR`: a run's live figures as a Prometheus endpoint, an observer.
//!
//! The observer adds each interval into cumulative totals (counters, and the HDR
//! histogram of every phase), renders them as text ([`text`]) once per interval, and a
//! small server ([`http`]) answers `GET /metrics` with the latest rendering. The listener
//! is bound when the observer is made, before the run starts, and closed when the
//! observer drops at the end of the run: after its final figures have been rendered and
//! summary.json written, and, with `--metrics-linger`, once a scraper has read them.

pub mod http;
pub mod text;

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use crate::engine::{Observer, PlanHead, Signals, Snapshot};
use crate::metrics::Shard;
use crate::opts::OutputArgs;
use crate::results::ShardOf;
use crate::results::Summary;
use http::{Limits, Page, Server};
use text::{Gauges, Labels};

/// The live metrics observer for these options, or None without `--metrics-listen`.
/// `head` and `shard` give the labels (run id, shard, protocol).
pub fn observer(
    output: &OutputArgs,
    head: &PlanHead,
    shard: Option<&ShardOf>,
) -> anyhow::Result<Option<Metrics>> {
    let Some(addr) = output.metrics_listen else {
        return Ok(None);
    };
    let linger = crate::units::parse_duration(&output.metrics_linger)?;
    let addr = super::shard_addr(addr, shard, "--metrics-listen")?;
    let shard = shard.map_or((0, 1), |s| (s.index, s.count));
    let mut m = Metrics::listen(
        addr,
        linger,
        Labels::new(&head.run_id, shard, head.protocol),
    )?;
    m.quiet = output.quiet;
    if !m.quiet {
        eprintln!("spate: metrics at http://{}/metrics", m.local_addr());
    }
    Ok(Some(m))
}

/// Serves the run's cumulative figures, rendered once per interval.
pub struct Metrics {
    labels: Labels,
    totals: Shard,
    active: i64,
    page: Arc<Page>,
    /// The buffer the next rendering goes into (the previous page's, reused).
    scratch: String,
    linger: Duration,
    /// Says nothing about the linger (`--quiet`).
    quiet: bool,
    finished: bool,
    /// While the final figures linger: Ctrl-C or SIGTERM ends the wait.
    signals: Option<tokio::task::JoinHandle<()>>,
    server: Server,
}

impl Metrics {
    /// Listens on `addr` now and serves zeros until the first interval.
    pub fn listen(addr: SocketAddr, linger: Duration, labels: Labels) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(addr)
            .with_context(|| format!("cannot listen on {addr} (--metrics-listen)"))?;
        let page = Arc::new(Page::default());
        let server = Server::start(listener, page.clone(), Limits::default())
            .context("cannot start the metrics server")?;
        let mut m = Metrics {
            labels,
            totals: Shard::default(),
            active: 0,
            page,
            scratch: String::new(),
            linger,
            quiet: false,
            finished: false,
            signals: None,
            server,
        };
        m.publish(0.0);
        Ok(m)
    }

    /// Where it listens (the port chosen when `addr` had port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    fn publish(&mut self, elapsed_s: f64) {
        let g = Gauges {
            active: self.active,
            elapsed_s,
            finished: self.finished,
        };
        text::render(&mut self.scratch, &self.labels, &self.totals, g);
        self.page.publish(&mut self.scratch, self.finished);
    }

    /// Waits for a scrape of the final figures, at most `--metrics-linger`.
    fn linger(&self) {
        if !self.quiet {
            eprintln!(
                "spate: serving the final figures until a scrape reads them (at most {}; Ctrl-C ends the wait)",
                crate::units::fmt_duration(self.linger)
            );
        }
        let wait = || self.page.wait_last_served(self.linger);
        // The engine drops its observers on a runtime thread: a multi-threaded runtime
        // hands that thread's other tasks (a parallel scenario step) to another meanwhile.
        use tokio::runtime::{Handle, RuntimeFlavor};
        match Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(wait),
            _ => wait(),
        };
    }
}

impl Observer for Metrics {
    /// Says where the endpoint listens, for a scraper's file-based discovery (and for
    /// shards, which each listen on a port of their own).
    fn start(
        &mut self,
        dir: &std::path::Path,
        _start: std::time::SystemTime,
    ) -> anyhow::Result<()> {
        let at = serde_json::json!({
            "address": self.local_addr().to_string(),
            "url": format!("http://{}/metrics", self.local_addr()),
        });
        crate::results::write_atomic(&dir.join("metrics.json"), format!("{at:#}\n").as_bytes())
            .context("cannot write metrics.json")
    }

    fn interval(&mut self, snap: &Snapshot<'_>) -> anyhow::Result<()> {
        self.totals.add(snap.interval);
        self.active = snap.active;
        self.publish(snap.t_s);
        Ok(())
    }

    /// The last interval has been added: the same figures, marked final.
    fn finish(&mut self, summary: &mut Summary) {
        self.finished = true;
        self.publish(summary.elapsed_s);
        if !self.linger.is_zero() {
            let page = self.page.clone();
            self.signals = tokio::runtime::Handle::try_current().ok().map(|rt| {
                rt.spawn(async move {
                    Signals::new().recv().await;
                    page.release();
                })
            });
        }
    }
}

impl Drop for Metrics {
    /// The run is over (summary.json is written by now): with a linger, the final figures
    /// stay up until one scrape has read them (or a signal comes); then the server stops.
    fn drop(&mut self) {
        let unread = self.finished && !self.page.wait_last_served(Duration::ZERO);
        if unread && !self.linger.is_zero() {
            self.linger();
        }
        if let Some(t) = self.signals.take() {
            t.abort();
        }
    }
}
