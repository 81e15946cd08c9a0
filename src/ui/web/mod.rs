//! `--web [ADDR]`: the run's report in a browser, live, and its controls. An observer:
//! it listens before the run starts ([`server`]), asks its drawing thread ([`live`]) for
//! a new drawing of the report once per interval while a page watches, writes what the
//! run was told (pause, resume, stop, rate, users) to control.jsonl as it happens and
//! into summary.json's `extra.control` at the end, and, the run over, sends the watching
//! pages the final report before it closes.

pub mod live;
pub mod server;

use std::io::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::Context as _;

use crate::engine::{Control, Observer, PlanInfo, Snapshot};
use crate::opts::OutputArgs;
use crate::results::Summary;
use live::{Ask, Live};
use server::{Ctx, Server};

/// The environment variable that holds the token steering needs.
pub const TOKEN_VAR: &str = "SPATE_WEB_TOKEN";

/// The page, its styles filled in.
const PAGE: &str = include_str!("page.html");

/// The live view for these options, or None without `--web`; `stop` is the run's stop
/// flag (the page's stop sets it).
pub fn observer(
    output: &OutputArgs,
    plan: &impl PlanInfo,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<Option<Web>> {
    let Some(addr) = output.web else {
        return Ok(None);
    };
    let addr = super::shard_addr(addr, plan.workload().shard.as_ref(), "--web")?;
    let token = std::env::var(TOKEN_VAR).ok().filter(|t| !t.is_empty());
    let loopback = addr.ip().is_loopback();
    if !loopback && token.is_none() {
        return Err(crate::UsageError(format!(
            "--web {addr}: not a loopback address, so steering the run needs a token: set {TOKEN_VAR} (the page asks for it)"
        ))
        .into());
    }
    let listener = TcpListener::bind(addr).map_err(|e| {
        crate::UsageError(format!(
            "--web {addr}: cannot listen there ({e}): give another address, or port 0 for a free one"
        ))
    })?;
    let head = plan.head();
    let title = format!(
        "spate: {} load on {} (live)",
        head.protocol.to_uppercase(),
        head.target
    );
    let page = PAGE
        .replace(
            "{{CSS}}",
            &format!(
                "{}{}",
                crate::report::html::PAGE_CSS,
                crate::report::chart::CSS
            ),
        )
        .replace("{{TITLE}}", &crate::report::chart::escape(&title));
    let about = serde_json::json!({
        "run_id": head.run_id,
        "protocol": head.protocol,
        "target": head.target,
    });
    let control = Control::new(plan.workload(), stop.clone());
    let live = Arc::new(Live::default());
    let ctx = Arc::new(Ctx::new(
        live.clone(),
        control.clone(),
        token,
        page,
        about,
        loopback,
    ));
    let server = Server::start(listener, ctx).context("cannot start the live view's server")?;
    let draw = live::drawer(live.clone()).context("cannot start the live view's drawing")?;
    if !output.quiet {
        eprintln!("spate: live view at http://{}/", server.local_addr());
    }
    Ok(Some(Web {
        control,
        live,
        draw,
        dir: None,
        log: None,
        finished: false,
        server,
    }))
}

/// The live view of one run.
pub struct Web {
    control: Arc<Control>,
    live: Arc<Live>,
    draw: mpsc::Sender<Ask>,
    dir: Option<PathBuf>,
    /// control.jsonl, made at the first action.
    log: Option<std::fs::File>,
    finished: bool,
    server: Server,
}

impl Web {
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// What the run was told, as summary.json's `extra.control`.
    fn told(&self) -> serde_json::Value {
        serde_json::json!({ "actions": self.control.records() })
    }

    /// Appends the actions since the last call to control.jsonl.
    fn write_actions(&mut self, dir: &Path) -> anyhow::Result<()> {
        let new = self.control.take_new();
        if new.is_empty() {
            return Ok(());
        }
        let path = dir.join("control.jsonl");
        if self.log.is_none() {
            self.log = Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .with_context(|| format!("cannot write {}", path.display()))?,
            );
        }
        let mut text = String::new();
        for r in &new {
            text.push_str(&serde_json::to_string(r)?);
            text.push('\n');
        }
        if let Some(f) = &mut self.log {
            f.write_all(text.as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(())
    }
}

impl Observer for Web {
    fn control(&self) -> Option<Arc<Control>> {
        Some(self.control.clone())
    }

    /// Says where the page is (port 0 picks one).
    fn start(&mut self, dir: &Path, _start: std::time::SystemTime) -> anyhow::Result<()> {
        self.dir = Some(dir.to_path_buf());
        let at = serde_json::json!({
            "address": self.local_addr().to_string(),
            "url": format!("http://{}/", self.local_addr()),
        });
        crate::results::write_atomic(&dir.join("web.json"), format!("{at:#}\n").as_bytes())
            .context("cannot write web.json")
    }

    fn interval(&mut self, snap: &Snapshot<'_>) -> anyhow::Result<()> {
        let Some(dir) = self.dir.clone() else {
            return Ok(());
        };
        self.write_actions(&dir)?;
        let _ = self.draw.send(Ask {
            dir,
            t_s: snap.t_s,
            control: self.told(),
            last: false,
        });
        Ok(())
    }

    fn finish(&mut self, summary: &mut Summary) {
        if let Some(dir) = self.dir.clone() {
            if let Err(e) = self.write_actions(&dir) {
                summary.warnings.push(format!("{e:#}"));
            }
        }
        if !self.control.records().is_empty() {
            summary.extra.insert("control".into(), self.told());
        }
        self.finished = true;
    }
}

impl Drop for Web {
    /// The run is over and its files are complete: the pages that watch get the final
    /// report (waited for, at most a few seconds), then the server stops.
    fn drop(&mut self) {
        let Some(dir) = self.dir.clone() else { return };
        if !self.finished || self.live.watchers() == 0 {
            return;
        }
        let t_s = crate::results::Summary::read(&dir).map_or(0.0, |s| s.elapsed_s);
        let _ = self.draw.send(Ask {
            dir,
            t_s,
            control: self.told(),
            last: true,
        });
        let live = self.live.clone();
        let wait = move || {
            // Drawing a long run's report, then sending it.
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while !live.current().ended && std::time::Instant::now() < deadline {
                live.next_after(live.current().generation, Duration::from_millis(100));
            }
            live.wait_delivered(Duration::from_secs(3));
        };
        // The engine drops its observers on a runtime thread: a multi-threaded runtime
        // hands that thread's other tasks to another meanwhile.
        use tokio::runtime::{Handle, RuntimeFlavor};
        match Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(wait),
            _ => wait(),
        }
    }
}
