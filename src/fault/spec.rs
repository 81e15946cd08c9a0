//! What a `--fault` says: when (`at`, `for`, `every`), and what — a signal to the server's
//! processes (by PID or a PID file read at the moment, optionally narrowed to a command
//! name among those processes and their descendants) with an optional restart command, or
//! a command of its own with an optional undo. Everything is checked before the run
//! starts: a fault that cannot be applied is one line and exit 2. A signal never reaches a
//! process outside the trees the fault names: a command name alone is refused, since it
//! would match every process of that name on the host.

use std::path::PathBuf;
use std::time::Duration;

use crate::units::{fmt_duration, parse_duration};
use crate::UsageError;

/// One scheduled fault, as given.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// The text given (shown in the summary and faults.jsonl).
    pub text: String,
    /// When it starts, from the run's start.
    pub at: Duration,
    /// How long it lasts: at its end a stopped process is continued, the restart or undo
    /// command runs. None: a moment (the restart, if any, follows the signal at once).
    pub lasts: Option<Duration>,
    /// It comes again this long after each start, until the run ends.
    pub every: Option<Duration>,
    pub action: Action,
    /// `optional=yes`: the run goes on and may pass when it cannot be applied.
    pub optional: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Signal {
        signal: Signal,
        target: Target,
        /// Run (with `sh -c`) at the fault's end, or right after the signal.
        restart: Option<String>,
    },
    /// Run a command at the start and `undo` at the end (a full disk, a directory outage:
    /// the test bed's own commands).
    Command { run: String, undo: Option<String> },
    /// A toxic of the network between spate and the server, in force from the start to
    /// the end (or the run's end); see `fault::proxy`.
    Net(super::proxy::Toxic),
    /// A fault another shard applies: measured here, nothing done.
    Nothing,
}

/// Whose processes a signal goes to: the roots (the system under test's processes), or
/// with a name the processes of that name among the roots and their descendants. PID
/// files and the descendants are looked up at the moment of the fault (after a restart,
/// the server's PID is another).
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub roots: Vec<Root>,
    pub name: Option<String>,
}

/// One process a fault's scope starts from.
#[derive(Debug, Clone, PartialEq)]
pub enum Root {
    Pid(u32),
    PidFile(PathBuf),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Kill,
    Term,
    Int,
    Hup,
    Quit,
    Stop,
    Cont,
    Usr1,
    Usr2,
}

impl Signal {
    const ALL: [(Signal, &'static str, libc::c_int); 9] = [
        (Signal::Kill, "KILL", libc::SIGKILL),
        (Signal::Term, "TERM", libc::SIGTERM),
        (Signal::Int, "INT", libc::SIGINT),
        (Signal::Hup, "HUP", libc::SIGHUP),
        (Signal::Quit, "QUIT", libc::SIGQUIT),
        (Signal::Stop, "STOP", libc::SIGSTOP),
        (Signal::Cont, "CONT", libc::SIGCONT),
        (Signal::Usr1, "USR1", libc::SIGUSR1),
        (Signal::Usr2, "USR2", libc::SIGUSR2),
    ];

    fn parse(s: &str) -> Option<Signal> {
        let s = s.to_ascii_uppercase();
        let s = s.strip_prefix("SIG").unwrap_or(&s);
        Self::ALL
            .iter()
            .find(|(_, n, _)| *n == s)
            .map(|(sig, ..)| *sig)
    }

    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(s, ..)| *s == self)
            .map_or("?", |x| x.1)
    }

    pub fn number(self) -> libc::c_int {
        Self::ALL
            .iter()
            .find(|(s, ..)| *s == self)
            .map_or(0, |x| x.2)
    }
}

/// What `--fault` accepts, for its errors.
const SYNTAX: &str = "expected 'at=DURATION [for=DURATION] [every=DURATION]' and one of \
    'signal=NAME pid=N[,N..]|pidfile=PATH.. [name=COMMAND] [restart=CMD]', 'run=CMD [undo=CMD]' \
    or 'net=latency:D|loss:P|bandwidth:RATE|blackhole|refuse|reset|cut:BYTES' or \
    'kernel=loss:P|partition|reject|rate:RATE netns=NAME' (root, in the server's namespace); \
    optional=yes lets the run pass when it cannot be applied \
    (quote a command with spaces: restart='scripts/testbed restart postfix')";

/// A fault's KEY=VALUE words, each read and checked on its own, at= given, every=
/// longer than for=.
struct Keys {
    at: Duration,
    lasts: Option<Duration>,
    every: Option<Duration>,
    signal: Option<Signal>,
    roots: Vec<Root>,
    name: Option<String>,
    restart: Option<String>,
    run: Option<String>,
    undo: Option<String>,
    net: Option<super::proxy::Toxic>,
    kernel: Option<super::kernel::Kernel>,
    netns: Option<String>,
    optional: bool,
}

impl Keys {
    fn read(words: &[String], bad: &dyn Fn(String) -> UsageError) -> Result<Keys, UsageError> {
        let mut at = None;
        let (mut lasts, mut every) = (None, None);
        let (mut signal, mut name, mut restart, mut run, mut undo) = (None, None, None, None, None);
        let mut roots = Vec::new();
        let mut net = None;
        let (mut kernel, mut netns) = (None, None);
        let mut optional = false;
        for w in words {
            let Some((k, v)) = w.split_once('=') else {
                return Err(bad(format!("'{w}' is not KEY=VALUE; {SYNTAX}")));
            };
            let dur = |v: &str| parse_duration(v).map_err(|e| bad(format!("{k}: {e}")));
            match k {
                "at" => at = Some(dur(v)?),
                "for" => lasts = Some(dur(v)?).filter(|d| !d.is_zero()),
                "every" => every = Some(dur(v)?),
                "signal" => {
                    signal = Some(Signal::parse(v).ok_or_else(|| {
                        bad(format!(
                    "unknown signal '{v}' (KILL, TERM, INT, HUP, QUIT, STOP, CONT, USR1, USR2)"
                ))
                    })?)
                }
                "pid" => {
                    let pids: Result<Vec<u32>, _> = v.split(',').map(str::parse).collect();
                    match pids {
                        Ok(p) if !p.is_empty() && !p.contains(&0) => {
                            roots.extend(p.into_iter().map(Root::Pid))
                        }
                        _ => return Err(bad(format!("pid '{v}' is not a list of PIDs"))),
                    }
                }
                "pidfile" if !v.is_empty() => roots.push(Root::PidFile(PathBuf::from(v))),
                "name" if !v.is_empty() => {
                    if name.replace(v.to_string()).is_some() {
                        return Err(bad("give name= once".into()));
                    }
                }
                "restart" if !v.trim().is_empty() => restart = Some(v.to_string()),
                "run" if !v.trim().is_empty() => run = Some(v.to_string()),
                "undo" if !v.trim().is_empty() => undo = Some(v.to_string()),
                "net" => net = Some(super::proxy::Toxic::parse(v).map_err(bad)?),
                "kernel" => kernel = Some(super::kernel::Kernel::parse(v).map_err(bad)?),
                "netns" if !v.is_empty() => netns = Some(v.to_string()),
                "optional" => {
                    optional = match v {
                        "yes" | "true" => true,
                        "no" | "false" => false,
                        _ => return Err(bad(format!("optional={v}: yes or no"))),
                    }
                }
                "name" | "pidfile" | "restart" | "run" | "undo" | "netns" => {
                    return Err(bad(format!("{k} is empty")))
                }
                _ => return Err(bad(format!("unknown key '{k}'; {SYNTAX}"))),
            }
        }
        let at = at.ok_or_else(|| bad(format!("no at=; {SYNTAX}")))?;
        if let Some(e) = every {
            if e.is_zero() || lasts.is_some_and(|l| l >= e) {
                return Err(bad(format!(
                    "every={} must be longer than for={}",
                    fmt_duration(e),
                    fmt_duration(lasts.unwrap_or_default())
                )));
            }
        }
        Ok(Keys {
            at,
            lasts,
            every,
            signal,
            roots,
            name,
            restart,
            run,
            undo,
            net,
            kernel,
            netns,
            optional,
        })
    }
}

impl Spec {
    /// Parses one `--fault` text and checks that it can be applied now (its processes
    /// exist, its PID file is readable).
    pub fn parse(text: &str) -> Result<Spec, UsageError> {
        Spec::read(text, true)
    }

    /// Parses one `--fault` text without looking for its processes: a scenario's, checked
    /// before the steps that start the server have run.
    pub fn syntax(text: &str) -> Result<Spec, UsageError> {
        Spec::read(text, false)
    }

    fn read(text: &str, check: bool) -> Result<Spec, UsageError> {
        let bad = |what: String| UsageError(format!("--fault '{text}': {what}"));
        let words = shlex::split(text).ok_or_else(|| bad("unbalanced quotes".into()))?;
        let Keys {
            at,
            lasts,
            every,
            signal,
            roots,
            name,
            restart,
            run,
            undo,
            net,
            kernel,
            netns,
            optional,
        } = Keys::read(&words, &bad)?;
        let target = match (roots.is_empty(), name) {
            (true, None) => None,
            (true, Some(n)) => {
                return Err(bad(format!(
                    "name={n} alone would signal every process named {n} on this host: \
                     give the tree it is in with pid= or pidfile= (the server's master; \
                     name= then picks among it and its descendants)"
                )))
            }
            (false, name) => Some(Target { roots, name }),
        };
        let spec = |action| {
            Ok(Spec {
                text: text.to_string(),
                at,
                lasts,
                every,
                action,
                optional,
            })
        };
        // Keys of a process fault, which neither kernel= nor net= takes.
        let process = signal.is_some()
            || target.is_some()
            || run.is_some()
            || restart.is_some()
            || undo.is_some();
        if let Some(k) = kernel {
            if process || net.is_some() {
                return Err(bad(
                    "kernel= is a fault of its own: give it with netns= only".into(),
                ));
            }
            let ns = netns.ok_or_else(|| {
                bad("kernel= needs netns=NAME, the network namespace the server runs in (spate never changes its own)".into())
            })?;
            if lasts.is_none() {
                return Err(bad(
                    "kernel= needs for=DURATION: how long the fault lasts".into()
                ));
            }
            if check {
                k.check(&ns).map_err(bad)?;
            }
            let (run, undo) = k.commands(&ns);
            return spec(Action::Command {
                run,
                undo: Some(undo),
            });
        }
        if netns.is_some() {
            return Err(bad("netns= goes with kernel=".into()));
        }
        if let Some(toxic) = net {
            if process {
                return Err(bad(
                    "net= is a fault of its own: give it without signal=, pid=, run=, restart= or undo="
                        .into(),
                ));
            }
            return spec(Action::Net(toxic));
        }
        if run.is_some() && (signal.is_some() || restart.is_some()) {
            return Err(bad(
                "run= is a fault of its own: give it with undo=, not with signal= or restart="
                    .into(),
            ));
        }
        let action = match (target, run) {
            (None, Some(run)) => Action::Command { run, undo },
            (Some(_), Some(_)) => return Err(bad("run= takes no pid=, pidfile= or name=".into())),
            (Some(target), None) => {
                if undo.is_some() {
                    return Err(bad("undo= goes with run=; a signal's is restart=".into()));
                }
                if check {
                    check_target(&target).map_err(bad)?;
                }
                Action::Signal {
                    signal: signal.unwrap_or(Signal::Kill),
                    target,
                    restart,
                }
            }
            (None, None) if signal.is_some() => {
                return Err(bad("signal= needs pid= or pidfile=".into()))
            }
            (None, None) => return Err(bad(format!("nothing to do; {SYNTAX}"))),
        };
        spec(action)
    }

    /// Whether an occurrence is in force during (`from`, `to`] (seconds from the run's
    /// start); a fault of a moment (no `for=`) is in the interval it happens in.
    pub fn during(&self, from: f64, to: f64) -> bool {
        let (at, lasts) = (self.at.as_secs_f64(), self.lasts.map(|l| l.as_secs_f64()));
        let every = self.every.map(|e| e.as_secs_f64()).filter(|e| *e > 0.0);
        let first = match every {
            Some(e) => ((from - at - lasts.unwrap_or(0.0)) / e).floor().max(0.0) as u32,
            None => 0,
        };
        (first..first.saturating_add(3)).any(|n| {
            let Some((start, end)) = self.occurrence(n) else {
                return false;
            };
            let (start, end) = (start.as_secs_f64(), end.as_secs_f64());
            match lasts {
                Some(_) => start < to && end > from,
                None => start > from && start <= to,
            }
        })
    }

    /// The fault's occurrence `n` (0-based): its start and end from the run's start.
    pub fn occurrence(&self, n: u32) -> Option<(Duration, Duration)> {
        if n > 0 && self.every.is_none() {
            return None;
        }
        let start = self.at + self.every.unwrap_or_default() * n;
        Some((start, start + self.lasts.unwrap_or_default()))
    }
}

/// A target whose roots cannot be reached now is refused before the run. Processes of a
/// name come and go (Postfix starts smtpd and cleanup as mail comes): they are looked for
/// when the fault comes, and a miss is reported then.
fn check_target(t: &Target) -> Result<(), String> {
    for root in &t.roots {
        let pid = match root {
            Root::Pid(p) => *p,
            Root::PidFile(path) => read_pidfile(path)?,
        };
        alive(pid)?;
    }
    Ok(())
}

/// Whether a signal can go to `pid`: it exists and this user may signal it.
fn alive(pid: u32) -> Result<(), String> {
    // SAFETY: signal 0 sends nothing; it only checks that the process exists and may be
    // signalled.
    if unsafe { libc::kill(pid as libc::pid_t, 0) } == 0 {
        return Ok(());
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EPERM) => Err(format!("not permitted to signal process {pid}")),
        _ => Err(format!("no process {pid}")),
    }
}

/// The PID in a PID file (its first line).
pub fn read_pidfile(path: &std::path::Path) -> Result<u32, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .filter(|&p| p > 0)
        .ok_or_else(|| format!("{}: no PID on its first line", path.display()))
}

/// The processes a target names now: its roots (a PID file read now; one that cannot be
/// read while another root is there is skipped, as a server being restarted has none), or
/// with a name the processes of that name among the roots and their descendants.
pub fn resolve(t: &Target) -> Result<Vec<u32>, String> {
    let mut roots = Vec::new();
    let mut first_err = None;
    for root in &t.roots {
        match root {
            Root::Pid(p) => roots.push(*p),
            Root::PidFile(path) => match read_pidfile(path) {
                Ok(p) => roots.push(p),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            },
        }
    }
    if roots.is_empty() {
        return Err(first_err.unwrap_or_else(|| "no process to signal".into()));
    }
    let Some(name) = &t.name else {
        return Ok(roots);
    };
    match crate::monitor::proc::pids_in_trees(&roots, Some(name)) {
        v if v.is_empty() => Err(format!(
            "no process named '{name}' in the tree of {}",
            roots
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        )),
        v => Ok(v),
    }
}

impl Target {
    /// What it names, for faults.jsonl when it cannot be resolved.
    pub fn text(&self) -> String {
        let roots: Vec<String> = self
            .roots
            .iter()
            .map(|r| match r {
                Root::Pid(p) => format!("PID {p}"),
                Root::PidFile(f) => format!("the PID in {}", f.display()),
            })
            .collect();
        match &self.name {
            None => roots.join(", "),
            Some(n) => format!("processes named {n} under {}", roots.join(", ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn during_says_which_intervals_a_fault_is_in() {
        let s = Spec::syntax("at=10s for=5s every=20s net=blackhole").unwrap();
        let on: Vec<u32> = (0..60)
            .filter(|t| s.during(*t as f64, *t as f64 + 1.0))
            .collect();
        let want: Vec<u32> = (10..15).chain(30..35).chain(50..55).collect();
        assert_eq!(on, want);
        let moment = Spec::syntax("at=3s run=true").unwrap();
        let on: Vec<u32> = (0..10)
            .filter(|t| moment.during(*t as f64, *t as f64 + 1.0))
            .collect();
        assert_eq!(on, vec![2]);
        // Its processes are looked for only by parse().
        assert!(Spec::syntax("at=1s pidfile=/nonexistent/x.pid").is_ok());
        assert!(Spec::parse("at=1s pidfile=/nonexistent/x.pid").is_err());
    }

    fn me() -> String {
        std::process::id().to_string()
    }

    #[test]
    fn a_signal_fault_with_a_restart() {
        let text = format!("at=5s for=3s signal=stop pid={}", me());
        let s = Spec::parse(&text).unwrap();
        assert_eq!(s.at, Duration::from_secs(5));
        assert_eq!(s.lasts, Some(Duration::from_secs(3)));
        assert_eq!(
            s.action,
            Action::Signal {
                signal: Signal::Stop,
                target: Target {
                    roots: vec![Root::Pid(std::process::id())],
                    name: None
                },
                restart: None
            }
        );
        assert_eq!(
            s.occurrence(0),
            Some((Duration::from_secs(5), Duration::from_secs(8)))
        );
        assert_eq!(s.occurrence(1), None);
        let s = Spec::parse(&format!(
            "at=1m every=30s pid={} restart='systemctl restart postfix'",
            me()
        ))
        .unwrap();
        let Action::Signal {
            signal, restart, ..
        } = &s.action
        else {
            panic!()
        };
        assert_eq!(*signal, Signal::Kill, "KILL unless told");
        assert_eq!(restart.as_deref(), Some("systemctl restart postfix"));
        assert_eq!(
            s.occurrence(2),
            Some((Duration::from_secs(120), Duration::from_secs(120)))
        );
        let s = Spec::parse("at=2s for=1s run='touch x' undo='rm x'").unwrap();
        assert_eq!(
            s.action,
            Action::Command {
                run: "touch x".into(),
                undo: Some("rm x".into())
            }
        );
    }

    #[test]
    fn what_cannot_be_applied_is_refused_in_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let nopid = dir.path().join("none.pid");
        let cases = [
            ("for=3s signal=KILL pid=1", "no at="),
            ("at=3s", "nothing to do"),
            ("at=3s signal=KILL", "needs pid="),
            ("at=3s signal=BOOM pid=1", "unknown signal 'BOOM'"),
            ("at=3s pid=x", "not a list of PIDs"),
            ("at=3s pid=0", "not a list of PIDs"),
            ("at=3s pid=4000000", "no process 4000000"),
            ("at=soon pid=1", "at:"),
            ("at=3s for=5s every=5s run=true", "must be longer than"),
            ("at=3s run=true signal=KILL", "a fault of its own"),
            ("at=3s run='a", "unbalanced quotes"),
            ("at=3s bogus", "not KEY=VALUE"),
            ("at=3s colour=red run=true", "unknown key 'colour'"),
            ("at=3s undo=true pid=1", "undo= goes with run="),
            ("at=3s run=", "run is empty"),
        ];
        for (text, want) in cases {
            let e = Spec::parse(text).unwrap_err().to_string();
            assert!(e.starts_with("--fault '"), "{e}");
            assert!(e.contains(want), "{text}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let text = format!("at=1s pidfile={}", nopid.display());
        let e = Spec::parse(&text).unwrap_err().to_string();
        assert!(e.contains("No such file"), "{e}");
        std::fs::write(&nopid, "garbage\n").unwrap();
        let e = Spec::parse(&text).unwrap_err().to_string();
        assert!(e.contains("no PID on its first line"), "{e}");
        std::fs::write(&nopid, format!("{}\n", std::process::id())).unwrap();
        assert!(Spec::parse(&text).is_ok());
        // A name alone would reach every process of that name on the host: refused.
        let e = Spec::parse("at=3s signal=KILL name=smtpd")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("name=smtpd alone would signal every process"),
            "{e}"
        );
        // Within a tree, a name is looked for when the fault comes.
        let s = Spec::parse(&format!("at=3s pid={} name=no-such-process-xyz", me())).unwrap();
        let Action::Signal { target, .. } = &s.action else {
            panic!()
        };
        let e = resolve(target).unwrap_err();
        assert!(
            e.contains("no process named 'no-such-process-xyz' in the tree of"),
            "{e}"
        );
    }

    #[test]
    fn a_name_picks_only_within_the_tree_it_is_given() {
        // Two processes of one name: one below a shell this test starts, one not.
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("spatevictim");
        std::fs::copy("/bin/sleep", &exe).unwrap();
        let mut outside = std::process::Command::new(&exe).arg("30").spawn().unwrap();
        let mut root = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{} 30 & wait", exe.display()))
            .spawn()
            .unwrap();
        let target = Target {
            roots: vec![Root::Pid(root.id())],
            name: Some("spatevictim".into()),
        };
        // The shell may not have started its child yet: wait for it (bounded).
        let mut found = Vec::new();
        for _ in 0..500 {
            if let Ok(v) = resolve(&target) {
                found = v;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = outside.kill();
        let _ = outside.wait();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_ne!(found[0], outside.id(), "the process outside the tree");
        assert_ne!(found[0], root.id(), "the root is sh, not the name");
        let in_tree = crate::monitor::proc::pids_in_trees(&[root.id()], None);
        assert!(in_tree.contains(&root.id()) && in_tree.contains(&found[0]));
        assert!(!in_tree.contains(&outside.id()));
        // SAFETY: kill(2) on the child of the shell this test started.
        unsafe { libc::kill(found[0] as i32, libc::SIGKILL) };
        let _ = root.wait();
    }
}
