//! `--web [ADDR]`: the run's report in a browser, live, and its controls. An observer:
//! it listens before the run starts ([`server`]), asks its drawing thread ([`live`]) for
//! a new drawing of the report once per interval while a page watches, writes what the
//! run was told (pause, resume, stop, rate, users) to control.jsonl as it happens and
//! into summary.json's `extra.control` at the end, and, the run over, sends the watching
//! pages the final report before it closes.

pub mod feed;
pub mod live;
pub mod server;

use std::io::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::Context as _;

use serde_json::Value;

use crate::engine::{Control, Observer, PlanInfo, Snapshot};
use crate::opts::OutputArgs;
use crate::results::Summary;
use crate::scenario::threshold::{Check, Source};
use feed::Feed;
use live::{Ask, Live};
use server::{Ctx, Server, Steering};

/// The environment variable that holds the token the view needs (all but its page's
/// shell: steering, the status, the intervals, the plan).
pub const TOKEN_VAR: &str = "SPATE_WEB_TOKEN";

/// The page, its styles filled in.
const PAGE: &str = include_str!("page.html");

/// The live view for these options, or None without `--web`; `stop` is the run's stop
/// flag (the page's stop sets it), `checks` its `--threshold` rules (shown as they hold).
pub fn observer(
    output: &OutputArgs,
    plan: &impl PlanInfo,
    stop: &Arc<AtomicBool>,
    checks: &[Check],
) -> anyhow::Result<Option<Web>> {
    let Some(addr) = output.web else {
        return Ok(None);
    };
    let addr = super::shard_addr(addr, plan.workload().shard.as_ref(), "--web")?;
    let listening = Listening::bind(addr, "--web")?;
    let head = plan.head();
    let title = format!(
        "spate: {} load on {} (live)",
        head.protocol.to_uppercase(),
        head.target
    );
    let about = serde_json::json!({
        "run_id": head.run_id,
        "protocol": head.protocol,
        "target": head.target,
    });
    let control = Control::new(plan.workload(), stop.clone());
    let feed = Arc::new(Feed::default());
    let view = listening.serve(&title, about, control.clone(), Some(feed.clone()))?;
    if !output.quiet {
        eprintln!("spate: live view at http://{}/", view.server.local_addr());
    }
    Ok(Some(Web {
        control,
        feed,
        view,
        dir: None,
        log: None,
        finished: false,
        checks: checks.to_vec(),
        command: head.protocol.to_string(),
        thresholds: Value::Null,
    }))
}

/// A listener for a live view, checked: loopback, or a token to read and steer with.
pub struct Listening {
    listener: TcpListener,
    token: Option<String>,
    loopback: bool,
}

impl Listening {
    /// Listens on `addr` (given as `option`): a usage error (exit 2) when it is not
    /// loopback and no token is set, or when it cannot listen there.
    pub fn bind(addr: SocketAddr, option: &str) -> anyhow::Result<Listening> {
        let token = std::env::var(TOKEN_VAR).ok().filter(|t| !t.is_empty());
        let loopback = addr.ip().is_loopback();
        if !loopback && token.is_none() {
            return Err(crate::UsageError(format!(
                "{option} {addr}: not a loopback address, so steering the run needs a token: set {TOKEN_VAR} (the page asks for it)"
            ))
            .into());
        }
        let listener = TcpListener::bind(addr).map_err(|e| {
            crate::UsageError(format!(
                "{option} {addr}: cannot listen there ({e}): give another address, or port 0 for a free one"
            ))
        })?;
        Ok(Listening {
            listener,
            token,
            loopback,
        })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves the page titled `title` for what `control` steers (and `feed` gives to
    /// watchers), with its drawing thread.
    pub fn serve(
        self,
        title: &str,
        about: serde_json::Value,
        control: Arc<dyn Steering>,
        feed: Option<Arc<Feed>>,
    ) -> anyhow::Result<View> {
        // With a token, the page's shell names no run: what it shows comes with the token.
        let shell_title = match self.token {
            Some(_) => "spate: live view",
            None => title,
        };
        let page = PAGE
            .replace(
                "{{CSS}}",
                &format!(
                    "{}{}",
                    crate::report::html::PAGE_CSS,
                    crate::report::chart::CSS
                ),
            )
            .replace("{{TITLE}}", &crate::report::chart::escape(shell_title));
        let live = Arc::new(Live::default());
        let ctx = Arc::new(Ctx::new(
            live.clone(),
            control,
            feed,
            self.token,
            (page, title.to_string()),
            about,
            self.loopback,
        ));
        let server =
            Server::start(self.listener, ctx).context("cannot start the live view's server")?;
        let draw = live::drawer(live.clone()).context("cannot start the live view's drawing")?;
        Ok(View { live, draw, server })
    }
}

/// A page served and drawn: the server, the drawing thread and what they share.
pub struct View {
    live: Arc<Live>,
    draw: mpsc::Sender<Ask>,
    server: Server,
}

impl View {
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// Removes `dir`'s web.json when it is the one [`View::write_address`] wrote for the
    /// page at `addr` (never a file this view did not write).
    pub fn remove_address(dir: &Path, addr: SocketAddr) {
        let path = dir.join("web.json");
        let ours = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|v| v["address"] == addr.to_string());
        if ours {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Writes where the page is into `dir`'s web.json.
    pub fn write_address(&self, dir: &Path) -> anyhow::Result<()> {
        let at = serde_json::json!({
            "address": self.local_addr().to_string(),
            "url": format!("http://{}/", self.local_addr()),
        });
        crate::results::write_atomic(&dir.join("web.json"), format!("{at:#}\n").as_bytes())
            .context("cannot write web.json")
    }

    /// Asks for a drawing of `dir` at `t_s` seconds, with what the run was told and its
    /// thresholds so far.
    pub fn draw(&self, dir: &Path, t_s: f64, control: Value, thresholds: Value) {
        let _ = self.draw.send(Ask {
            dir: dir.to_path_buf(),
            t_s,
            control,
            thresholds,
            last: false,
        });
    }

    /// The run is over and `dir`'s files are complete: the pages that watch get the
    /// final report (waited for, at most a few seconds).
    pub fn last(&self, dir: &Path, control: Value, thresholds: Value) {
        if self.live.watchers() == 0 {
            return;
        }
        let t_s = crate::results::Summary::read(dir).map_or(0.0, |s| s.elapsed_s);
        let _ = self.draw.send(Ask {
            dir: dir.to_path_buf(),
            t_s,
            control,
            thresholds,
            last: true,
        });
        let live = self.live.clone();
        outside_the_runtime(move || {
            // Drawing a long run's report, then sending it.
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while !live.current().ended && std::time::Instant::now() < deadline {
                live.next_after(live.current().generation, Duration::from_millis(100));
            }
            live.wait_delivered(Duration::from_secs(3));
        });
    }
}

/// Runs `wait` (which blocks) so that the tokio runtime, if this thread is one of its
/// workers, hands its other tasks to another thread meanwhile.
fn outside_the_runtime(wait: impl FnOnce()) {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(wait),
        _ => wait(),
    }
}

/// The live view of one run.
pub struct Web {
    control: Arc<Control>,
    feed: Arc<Feed>,
    view: View,
    dir: Option<PathBuf>,
    /// control.jsonl, made at the first action.
    log: Option<std::fs::File>,
    finished: bool,
    /// The `--threshold` rules, judged every interval for the page.
    checks: Vec<Check>,
    command: String,
    /// Their latest verdicts (null without rules).
    thresholds: Value,
}

impl Web {
    /// Judges the `--threshold` rules on the summary so far: each one's verdict, and
    /// `measured: false` while its figure does not exist yet.
    fn judge(&mut self, summary: &Summary) {
        if self.checks.is_empty() {
            return;
        }
        let Ok(figures) = serde_json::to_value(summary) else {
            return;
        };
        let verdicts: Vec<Value> = (self.checks.iter())
            .map(|c| {
                let v = c.judge(Source::Summary(&figures), &c.path, &self.command);
                let mut j = serde_json::to_value(&v).unwrap_or_default();
                j["measured"] = v.value.is_some().into();
                j
            })
            .collect();
        self.thresholds = Value::Array(verdicts);
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.view.local_addr()
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
    fn start(&mut self, dir: &Path, start: std::time::SystemTime) -> anyhow::Result<()> {
        self.dir = Some(dir.to_path_buf());
        self.feed.start(dir.to_path_buf(), start);
        self.view.write_address(dir)
    }

    fn interval(&mut self, snap: &Snapshot<'_>) -> anyhow::Result<()> {
        let Some(dir) = self.dir.clone() else {
            return Ok(());
        };
        self.feed.interval(snap);
        self.write_actions(&dir)?;
        self.judge(snap.summary);
        self.view
            .draw(&dir, snap.t_s, self.told(), self.thresholds.clone());
        Ok(())
    }

    fn finish(&mut self, summary: &mut Summary) {
        // The status's time stops at the run's end, watched or not.
        self.control.finished(summary.elapsed_s);
        if let Some(dir) = self.dir.clone() {
            if let Err(e) = self.write_actions(&dir) {
                summary.warnings.push(format!("{e:#}"));
            }
        }
        if !self.control.records().is_empty() {
            summary.extra.insert("control".into(), self.told());
        }
        self.judge(summary);
        self.feed.end(summary);
        self.finished = true;
    }
}

impl Drop for Web {
    /// The run is over and its files are complete: the pages that watch get the final
    /// report, and a `spate watch` that follows the run its last intervals and final
    /// summary (each waited for, at most a few seconds); then the server stops.
    fn drop(&mut self) {
        let Some(dir) = self.dir.clone() else { return };
        if !self.finished {
            return;
        }
        self.view.last(&dir, self.told(), self.thresholds.clone());
        let feed = self.feed.clone();
        outside_the_runtime(move || feed.wait_given(Duration::from_secs(5)));
    }
}

#[cfg(test)]
mod tests {
    use super::View;

    #[test]
    fn only_a_web_json_naming_this_views_address_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("web.json");
        let ours: std::net::SocketAddr = "127.0.0.1:5665".parse().unwrap();
        // Another view's (a shard's, a second watch's), or not JSON at all: left as it is.
        for theirs in ["{\"address\": \"127.0.0.1:9\"}\n", "not json\n", "{}\n"] {
            std::fs::write(&path, theirs).unwrap();
            View::remove_address(dir.path(), ours);
            assert_eq!(std::fs::read_to_string(&path).unwrap(), theirs);
        }
        // The one it wrote goes, and the directory's other files stay beside it.
        let notes = dir.path().join("notes.txt");
        std::fs::write(&notes, "mine").unwrap();
        std::fs::write(&path, "{\"address\": \"127.0.0.1:5665\"}\n").unwrap();
        View::remove_address(dir.path(), ours);
        assert!(!path.exists());
        assert_eq!(std::fs::read_to_string(&notes).unwrap(), "mine");
        // Nothing there any more: nothing happens, the rest stays.
        View::remove_address(dir.path(), ours);
        assert_eq!(std::fs::read_to_string(&notes).unwrap(), "mine");
        assert!(dir.path().exists());
    }
}
