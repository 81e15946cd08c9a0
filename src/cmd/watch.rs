//! `spate watch`: the shards of a run as one live view. It follows every shard's live
//! view (`--web`), adds their intervals up exactly as `spate merge` does after the run
//! (histograms add, counters add, wall-clock seconds), into a results directory of its
//! own that grows as they run; serves that as one page; and tells every shard what its
//! page or the API is told (pause, resume, stop, rate, users).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::ctl::{request, where_is};
use crate::ctx::Ctx;
use crate::engine::{Action, Refused, Signal, Signals};
use crate::results::merge::LiveMerge;
use crate::ui::web::server::Steering;
use crate::ui::web::{Listening, View, TOKEN_VAR};

const EXAMPLES: &str =
    "Each shard must run with --web (shard I listens on the port given plus I). \
spate watch follows their live views, adds their figures up as they go (histograms add, so \
percentiles are exact; intervals line up on wall-clock seconds, as spate merge does after \
the run), and writes the merged run into its own results directory, which grows as they run \
and ends as a merged run with its report. Its page shows that run live; pause, resume, stop, \
rate and users on it (or through spate ctl to its address) are told to every shard, each \
taking its share. A shard that stops answering for --give-up is left out from then on, and \
the merge says so; Ctrl-C ends the watch (the shards go on) with what it has written.
With SPATE_WEB_TOKEN set, it is sent to the shards, and the watch's own page needs it too.

EXAMPLES:
  for i in 0 1; do spate smtp 127.0.0.1:25 --shard $i/2 --start-at +5s --rate 200/s \\
      --duration 10m --web 127.0.0.1:5700 -o run/shard-$i & done
  spate watch 127.0.0.1:5700,127.0.0.1:5701 -o run/watched --web 127.0.0.1:5665
  spate watch run/shard-0 run/shard-1          # their web.json says where";

/// Options of `spate watch`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXAMPLES)]
pub struct Args {
    /// The shards' live views: http://HOST:PORT/, HOST:PORT, or their results
    /// directories (their web.json says where); several, or separated by commas.
    #[arg(required = true, value_name = "SHARD")]
    pub runs: Vec<String>,
    /// The merged run's results directory (default: a new ./spate-results/<time>-watch);
    /// it must be new or empty.
    #[arg(long, short = 'o', value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
    /// Where the merged run's page listens (port 0: a free one). Any address but
    /// loopback needs SPATE_WEB_TOKEN.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:5665")]
    pub web: SocketAddr,
    /// Watch some of the shards only: the merge says which are missing.
    #[arg(long)]
    pub partial: bool,
    /// How long a shard may not answer before it is left out (it was killed, or its
    /// machine is gone).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = crate::units::parse_duration)]
    pub give_up: Duration,
    /// Print nothing but errors and the merged result.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// How often the shards are asked.
const TICK: Duration = Duration::from_secs(1);
/// The largest answer taken from a shard (its live view sends at most 4 MiB at once).
const ANSWER_LIMIT: u64 = 8 << 20;

/// `spate watch`.
pub async fn run(args: Args, _ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let names: Vec<String> = (args.runs.iter())
        .flat_map(|r| r.split(','))
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_string)
        .collect();
    let mut shards = Vec::new();
    for n in &names {
        let addr = where_is(n)?;
        if shards.iter().any(|(_, a)| *a == addr) {
            return crate::usage(format!("{n}: given twice ({addr})"));
        }
        shards.push((n.clone(), addr));
    }
    let listening = Listening::bind(args.web, "--web")?;
    let at = listening.local_addr()?;
    let existed = args.out.as_ref().is_some_and(|o| o.exists());
    // A directory that holds anything a run writes (a web.json included) is refused here.
    let dir = crate::opts::output::results_dir(args.out.as_deref(), false, "watch")?;
    match watch(args, names, shards, listening, &dir).await {
        Ok(Some(code)) => Ok(code),
        failed => {
            // Nothing merged: what this watch made goes: its web.json (the one naming its
            // own address), and the directory when it made it and it is empty.
            View::remove_address(&dir, at);
            if !existed {
                let _ = std::fs::remove_dir(&dir);
            }
            match failed {
                Ok(_) => anyhow::bail!(
                    "no shard answered with its figures before --give-up: nothing merged"
                ),
                Err(e) => Err(e),
            }
        }
    }
}

/// Follows the shards into `dir`; the exit code, or None when nothing was merged.
async fn watch(
    args: Args,
    names: Vec<String>,
    shards: Vec<(String, SocketAddr)>,
    listening: Listening,
    dir: &std::path::Path,
) -> anyhow::Result<Option<ExitCode>> {
    let token = std::env::var(TOKEN_VAR).ok().filter(|t| !t.is_empty());
    let fanout = Arc::new(Fanout {
        shards: shards.clone(),
        token: token.clone(),
        statuses: Mutex::new(vec![Value::Null; shards.len()]),
    });
    let about = serde_json::json!({
        "shards": names,
        "protocol": "",
        "target": format!("{} shards", names.len()),
    });
    let title = format!("spate: {} shards, merged (live)", names.len());
    let view = listening.serve(&title, about, fanout.clone(), None)?;
    view.write_address(dir)?;
    if !args.quiet {
        eprintln!(
            "spate: watching {} shards into {}; live view at http://{}/",
            names.len(),
            dir.display(),
            view.local_addr()
        );
    }
    let signal: Arc<OnceLock<Signal>> = Arc::new(OnceLock::new());
    let mut signals = Signals::new();
    let got = signal.clone();
    let listen = tokio::spawn(async move {
        let _ = got.set(signals.recv().await);
    });
    let merge = LiveMerge::new(&names, dir, args.partial);
    let (give_up, quiet) = (args.give_up, args.quiet);
    let followed = signal.clone();
    let result = tokio::task::spawn_blocking(move || {
        follow(merge, &fanout, &view, give_up, &followed, quiet)
    })
    .await?;
    listen.abort();
    let (summary, dir) = result?;
    let Some(s) = summary else {
        return Ok(None);
    };
    super::merge::print(&s, names.len(), &dir);
    Ok(Some(match signal.get() {
        Some(sig) => ExitCode::from(sig.exit_code()),
        None => ExitCode::SUCCESS,
    }))
}

/// Asks every shard once a tick until all have ended (or stopped answering, or a signal
/// came), merging as it goes; the final summary.
fn follow(
    mut merge: LiveMerge,
    fanout: &Fanout,
    view: &View,
    give_up: Duration,
    signal: &OnceLock<Signal>,
    quiet: bool,
) -> anyhow::Result<(Option<crate::results::Summary>, std::path::PathBuf)> {
    let mut answered = vec![Instant::now(); fanout.shards.len()];
    let mut said_missing = vec![false; fanout.shards.len()];
    while !merge.done() && signal.get().is_none() {
        let tick = Instant::now();
        for (i, (name, addr)) in fanout.shards.iter().enumerate() {
            if !merge.follows(i) {
                continue;
            }
            match fanout.ask_shard(i, *addr, &mut merge) {
                Ok(()) => answered[i] = Instant::now(),
                Err(e) if e.downcast_ref::<crate::UsageError>().is_some() => return Err(e),
                Err(e) if answered[i].elapsed() >= give_up => merge.lost(i, &format!("{e:#}")),
                Err(e) if !quiet && !said_missing[i] => {
                    said_missing[i] = true;
                    eprintln!("spate: watch: {name}: no answer yet ({e:#}); trying again");
                }
                Err(_) => {}
            }
        }
        if merge.write()? {
            view.draw(merge.dir(), merge.t_s(), fanout.actions(), Value::Null);
        }
        std::thread::sleep(TICK.saturating_sub(tick.elapsed()));
    }
    let summary = merge.finish(signal.get().map(|s| s.name()))?;
    if summary.is_some() {
        if let Err(e) = crate::report::write_report(merge.dir()) {
            eprintln!("spate: warning: no HTML report: {e:#}");
        }
        view.last(merge.dir(), fanout.actions(), Value::Null);
    }
    Ok((summary, merge.dir().to_path_buf()))
}

/// Every shard, told the same.
struct Fanout {
    shards: Vec<(String, SocketAddr)>,
    token: Option<String>,
    /// Each shard's latest answer to /api/status.
    statuses: Mutex<Vec<Value>>,
}

impl Fanout {
    fn get(&self, addr: SocketAddr, path: &str) -> anyhow::Result<String> {
        let (code, body) = request(
            addr,
            ("GET", path, ""),
            self.token.as_deref(),
            "spate-watch",
            ANSWER_LIMIT,
        )?;
        match code {
            200 => Ok(body),
            // Asked before the shard's run began (its plan is written then).
            404 if path == "/api/plan" => Ok(String::new()),
            code => anyhow::bail!("{path}: {code} {}", body.trim()),
        }
    }

    /// Asks shard `i` for its plan (once), its new intervals and its status.
    fn ask_shard(&self, i: usize, addr: SocketAddr, merge: &mut LiveMerge) -> anyhow::Result<()> {
        let name = &self.shards[i].0;
        let json = |text: &str, what: &str| -> anyhow::Result<Value> {
            serde_json::from_str(text).map_err(|_| {
                crate::UsageError(format!(
                    "{name}: its {what} is not JSON: not a spate live view"
                ))
                .into()
            })
        };
        if merge.wants_plan(i) {
            let plan = self.get(addr, "/api/plan")?;
            if !plan.is_empty() {
                merge.plan(i, json(&plan, "plan")?)?;
            }
        }
        let status = json(&self.get(addr, "/api/status")?, "status")?;
        self.statuses.lock().unwrap_or_else(|p| p.into_inner())[i] = status;
        if merge.wants_plan(i) {
            return Ok(());
        }
        // Until it has sent everything it holds (an answer carries a few MiB at most).
        for _ in 0..16 {
            let before = merge.after(i);
            let answer = self.get(addr, &format!("/api/intervals?after={before}"))?;
            merge.take(i, &json(&answer, "intervals")?)?;
            if merge.after(i) == before || !merge.follows(i) {
                break;
            }
        }
        Ok(())
    }

    /// Every shard's actions, marked with its shard, in time order (as the merged
    /// summary's `extra.control` has them at the end).
    fn actions(&self) -> Value {
        let statuses = self.statuses.lock().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<Value> = Vec::new();
        for (i, s) in statuses.iter().enumerate() {
            for a in s["actions"].as_array().into_iter().flatten() {
                let mut a = a.clone();
                a["shard"] = i.into();
                all.push(a);
            }
        }
        all.sort_by(|a, b| a["time"].as_str().cmp(&b["time"].as_str()));
        serde_json::json!({ "actions": all })
    }
}

impl Steering for Fanout {
    /// Tells every shard; said when all did it, refused with each refusal otherwise.
    fn apply(&self, action: Action, _by: &str) -> Result<String, Refused> {
        let text = action.to_string();
        let (name, value) = text.split_once(' ').unwrap_or((&text, ""));
        let path = format!("/api/{name}");
        let mut said = Vec::new();
        let mut refused = Vec::new();
        for (shard, addr) in &self.shards {
            let answer = request(
                *addr,
                ("POST", &path, value),
                self.token.as_deref(),
                "spate-watch",
                1 << 20,
            );
            match answer {
                Ok((200, body)) => {
                    let v: Value = serde_json::from_str(&body).unwrap_or_default();
                    said.push(v["said"].as_str().unwrap_or("done").to_string());
                }
                Ok((code, body)) => {
                    let v: Value = serde_json::from_str(&body).unwrap_or_default();
                    let why = v["error"].as_str().map_or(body.trim(), |e| e);
                    refused.push(format!("{shard}: refused ({code}): {why}"));
                }
                Err(e) => refused.push(format!("{shard}: no answer: {e}")),
            }
        }
        match refused.is_empty() {
            true => Ok(format!(
                "{} (told {} shards)",
                said.first().map_or("done", String::as_str),
                said.len()
            )),
            false => Err(Refused(refused.join("; "))),
        }
    }

    /// The shards' statuses as one: paused when every one is, ended when every one is.
    fn status(&self) -> serde_json::Map<String, Value> {
        let statuses = self.statuses.lock().unwrap_or_else(|p| p.into_inner());
        let all = |key: &str| !statuses.is_empty() && statuses.iter().all(|s| s[key] == true);
        let (paused, ended) = (all("paused"), all("ended"));
        let first = statuses.first().cloned().unwrap_or_default();
        let total: u64 = statuses
            .iter()
            .filter_map(|s| s["actions_total"].as_u64())
            .sum();
        drop(statuses);
        let mut m = serde_json::Map::new();
        m.insert("open".into(), first["open"].clone());
        m.insert("paused".into(), paused.into());
        m.insert("rate".into(), first["rate"].clone());
        m.insert("users".into(), first["users"].clone());
        m.insert("ended".into(), ended.into());
        m.insert("actions_total".into(), total.into());
        let actions = self.actions()["actions"].take();
        m.insert("actions".into(), actions);
        m.insert("shards".into(), self.shards.len().into());
        m
    }
}
