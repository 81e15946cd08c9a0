//! A population's profile: what one simulated user does in a day (actions per day by
//! class), how its client connects (a desktop client that stays logged in, a mobile one
//! that logs in for each look), the messages it sends (sizes and recipient counts as
//! tables of shares), how much of the day falls in its busiest hour, and the quality of
//! service the profile's users expect (threshold rules). Built-in profiles live in
//! `profiles/*.toml`, each with the sources of its figures; a user's own is a file in
//! the same format.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::UsageError;

/// What a user can do, each a class of its own: a unit of work, timed as a phase of
/// this name, and a QoS rule's subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    Send,
    Check,
    Read,
    Flag,
    Move,
    Delete,
    Search,
}

impl Action {
    pub const ALL: [Action; 7] = [
        Action::Send,
        Action::Check,
        Action::Read,
        Action::Flag,
        Action::Move,
        Action::Delete,
        Action::Search,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Action::Send => "send",
            Action::Check => "check",
            Action::Read => "read",
            Action::Flag => "flag",
            Action::Move => "move",
            Action::Delete => "delete",
            Action::Search => "search",
        }
    }
}

/// Actions per user per day, by class.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PerDay {
    /// Messages sent (SMTP submission; with `save_sent`, a copy APPENDed to Sent).
    #[serde(default)]
    pub send: f64,
    /// Looks at INBOX: SELECT (a mobile client) or the end of IDLE (a desktop one), then
    /// FETCH of the headers of what is new.
    #[serde(default)]
    pub check: f64,
    /// Messages opened: FETCH of a whole message, which marks it \Seen.
    #[serde(default)]
    pub read: f64,
    /// Messages flagged: STORE +FLAGS (\Flagged).
    #[serde(default)]
    pub flag: f64,
    /// Messages filed: MOVE to Archive (COPY, STORE \Deleted, EXPUNGE without MOVE).
    #[serde(default, rename = "move")]
    pub moves: f64,
    /// Messages deleted: STORE +FLAGS (\Deleted), then EXPUNGE.
    #[serde(default)]
    pub delete: f64,
    /// Searches of INBOX by a header (SEARCH HEADER Subject).
    #[serde(default)]
    pub search: f64,
}

impl PerDay {
    pub fn get(&self, a: Action) -> f64 {
        match a {
            Action::Send => self.send,
            Action::Check => self.check,
            Action::Read => self.read,
            Action::Flag => self.flag,
            Action::Move => self.moves,
            Action::Delete => self.delete,
            Action::Search => self.search,
        }
    }

    pub fn total(&self) -> f64 {
        Action::ALL.iter().map(|a| self.get(*a)).sum()
    }
}

/// The messages a user sends.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Messages {
    /// Share (%) of messages by size: `{ "2k" = 30.71, "100k" = 9.79 }`.
    pub sizes: BTreeMap<String, f64>,
    /// Share (%) of messages by number of recipients: `{ "1" = 85.73, "2" = 1.66 }`.
    pub recipients: BTreeMap<String, f64>,
    /// A copy of each sent message is APPENDed to the sender's Sent mailbox, as desktop
    /// clients do.
    #[serde(default)]
    pub save_sent: bool,
}

/// What a user's mailboxes hold before the day starts: what `spate populate` fills them
/// to, and what a population run checks for.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Store {
    /// Messages in INBOX.
    #[serde(default)]
    pub inbox: u32,
    /// Messages in Archive (where the users file what they keep).
    #[serde(default)]
    pub archive: u32,
    /// Share (%) of them already read (\Seen).
    #[serde(default)]
    pub seen: f64,
}

/// How a user's client reaches its mailbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Client {
    /// Logs in when its user starts and stays logged in, INBOX selected, in IDLE between
    /// actions (when the server has IDLE).
    Desktop,
    /// Connects and logs in for each action, and logs out after it.
    Mobile,
}

/// A profile as written.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    /// One sentence: who these users are.
    pub about: String,
    /// Where the figures come from.
    #[serde(default)]
    pub sources: Vec<String>,
    /// Share (%) of a day's actions that fall in its busiest hour: a population run
    /// simulates that hour.
    pub peak_hour_share: f64,
    /// Actions per user per day.
    pub per_day: PerDay,
    /// Share (%) of users by client: `desktop`, `mobile`.
    pub clients: BTreeMap<String, f64>,
    pub messages: Messages,
    /// What the mailboxes hold when the day starts.
    #[serde(default)]
    pub store: Store,
    /// Quality of service: threshold rules over the phases of the actions (`p95(send) <
    /// 5s`) and the run's figures (`errors.rate < 1%`); the command that judges them
    /// checks them (this layer knows no rule language).
    #[serde(default)]
    pub qos: Vec<String>,
}

/// The built-in profiles: name and text.
pub const BUILT_IN: &[(&str, &str)] = &[
    (
        "specmail-enterprise",
        include_str!("../../../profiles/specmail-enterprise.toml"),
    ),
    (
        "office-light",
        include_str!("../../../profiles/office-light.toml"),
    ),
    (
        "office-medium",
        include_str!("../../../profiles/office-medium.toml"),
    ),
    (
        "office-heavy",
        include_str!("../../../profiles/office-heavy.toml"),
    ),
    (
        "mobile-poll",
        include_str!("../../../profiles/mobile-poll.toml"),
    ),
];

/// Shares must sum to 100 % within this much.
const SUM_TOLERANCE: f64 = 0.05;

/// A profile ready to draw from.
#[derive(Debug, Clone)]
pub struct Ready {
    pub profile: Profile,
    /// Cumulative shares (0..1) of the actions, in [`Action::ALL`]'s order.
    actions: Vec<(Action, f64)>,
    /// Cumulative shares of the message sizes (bytes).
    sizes: Vec<(u64, f64)>,
    /// Cumulative shares of the recipient counts.
    recipients: Vec<(u32, f64)>,
    /// Share (0..1) of desktop clients.
    pub desktop: f64,
}

fn bad(what: &str, why: impl std::fmt::Display) -> UsageError {
    UsageError(format!("profile {what}: {why}"))
}

/// The cumulative table of `shares` (%, summing to 100), keys parsed by `key`.
fn table<K: Copy>(
    what: &str,
    field: &str,
    shares: impl IntoIterator<Item = (K, f64)>,
    show: impl Fn(K) -> String,
) -> Result<Vec<(K, f64)>, UsageError> {
    let mut out = Vec::new();
    let mut sum = 0.0;
    for (k, pct) in shares {
        if !pct.is_finite() || pct < 0.0 {
            return Err(bad(
                what,
                format!(
                    "{field} '{}' has share {pct}: give a percentage of 0 or more",
                    show(k)
                ),
            ));
        }
        sum += pct;
        out.push((k, sum));
    }
    if (sum - 100.0).abs() > SUM_TOLERANCE {
        return Err(bad(
            what,
            format!("the shares of {field} sum to {sum:.2} %, not 100 %"),
        ));
    }
    for e in &mut out {
        e.1 /= sum;
    }
    Ok(out)
}

fn draw<K: Copy>(t: &[(K, f64)], rng: &mut impl Rng) -> K {
    let x: f64 = rng.random();
    t.iter()
        .find(|(_, c)| x < *c)
        .or(t.last())
        .map(|(k, _)| *k)
        .expect("a table has entries")
}

impl Profile {
    /// Parses a profile written in TOML; `what` names it in errors.
    pub fn parse(what: &str, text: &str) -> Result<Profile, UsageError> {
        toml::from_str(text).map_err(|e| bad(what, one_line(&e.to_string())))
    }

    /// A built-in profile by name, or a file when `name` ends in `.toml` or names a path.
    pub fn load(name: &str) -> Result<Profile, UsageError> {
        if let Some((_, text)) = BUILT_IN.iter().find(|(n, _)| *n == name) {
            return Profile::parse(name, text);
        }
        if name.ends_with(".toml") || name.contains('/') {
            let text = std::fs::read_to_string(name)
                .map_err(|e| UsageError(format!("profile {name}: cannot read it: {e}")))?;
            return Profile::parse(name, &text);
        }
        Err(UsageError(format!(
            "unknown profile '{name}': the built-in ones are {} (spate population --list-profiles), or give a file NAME.toml",
            BUILT_IN.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
        )))
    }

    /// Checks every figure and builds the tables draws are made from.
    pub fn ready(self) -> Result<Ready, UsageError> {
        let what = self.name.clone();
        let what = what.as_str();
        if !(self.peak_hour_share > 0.0 && self.peak_hour_share <= 100.0) {
            return Err(bad(
                what,
                format!(
                    "peak_hour_share {}: give the share (%) of a day's actions in its busiest hour, above 0 and at most 100",
                    self.peak_hour_share
                ),
            ));
        }
        for a in Action::ALL {
            let v = self.per_day.get(a);
            if !v.is_finite() || v < 0.0 {
                return Err(bad(
                    what,
                    format!(
                        "per_day.{} = {v}: give a number of actions of 0 or more",
                        a.name()
                    ),
                ));
            }
        }
        if self.per_day.total() <= 0.0 {
            return Err(bad(
                what,
                "per_day has no action: give at least one rate above 0",
            ));
        }
        let actions = table(
            what,
            "per_day",
            Action::ALL.map(|a| (a, self.per_day.get(a) / self.per_day.total() * 100.0)),
            |a| a.name().to_string(),
        )?;
        for k in self.clients.keys() {
            if k != "desktop" && k != "mobile" {
                return Err(bad(
                    what,
                    format!("clients.{k}: the clients spate simulates are desktop and mobile"),
                ));
            }
        }
        let clients = table(
            what,
            "clients",
            self.clients.iter().map(|(k, v)| (k.as_str(), *v)),
            |k| k.to_string(),
        )?;
        let desktop = clients
            .iter()
            .scan(0.0, |prev, (k, c)| {
                let share = c - *prev;
                *prev = *c;
                Some((*k, share))
            })
            .filter(|(k, _)| *k == "desktop")
            .map(|(_, s)| s)
            .sum();
        let mut sizes = Vec::new();
        for (k, v) in &self.messages.sizes {
            let b = crate::units::parse_size(k)
                .map_err(|e| bad(what, format!("messages.sizes: {e}")))?;
            if b == 0 || b > 64 * 1024 * 1024 {
                return Err(bad(
                    what,
                    format!("messages.sizes '{k}': give a size from 1 byte to 64M"),
                ));
            }
            sizes.push((b, *v));
        }
        sizes.sort_by_key(|s| s.0);
        let sizes = table(what, "messages.sizes", sizes, |b| b.to_string())?;
        let mut recipients = Vec::new();
        for (k, v) in &self.messages.recipients {
            let n: u32 = k
                .parse()
                .ok()
                .filter(|n| (1..=1000).contains(n))
                .ok_or_else(|| {
                    bad(
                        what,
                        format!("messages.recipients '{k}': give a count from 1 to 1000"),
                    )
                })?;
            recipients.push((n, *v));
        }
        recipients.sort_by_key(|r| r.0);
        let recipients = table(what, "messages.recipients", recipients, |n| n.to_string())?;
        if !(0.0..=100.0).contains(&self.store.seen) {
            return Err(bad(
                what,
                format!(
                    "store.seen {}: give a share (%) from 0 to 100",
                    self.store.seen
                ),
            ));
        }
        Ok(Ready {
            profile: self,
            actions,
            sizes,
            recipients,
            desktop,
        })
    }
}

impl Ready {
    /// Actions one user does per second of real time at the busiest hour, `time_scale`
    /// simulated seconds to the real one.
    pub fn rate_per_user(&self, time_scale: f64) -> f64 {
        self.profile.per_day.total() * self.profile.peak_hour_share / 100.0 / 3600.0 * time_scale
    }

    pub fn action(&self, rng: &mut impl Rng) -> Action {
        draw(&self.actions, rng)
    }

    pub fn size(&self, rng: &mut impl Rng) -> u64 {
        draw(&self.sizes, rng)
    }

    pub fn recipients(&self, rng: &mut impl Rng) -> u32 {
        draw(&self.recipients, rng)
    }

    /// The largest message the profile sends.
    pub fn largest(&self) -> u64 {
        self.sizes.last().map_or(1, |s| s.0)
    }

    /// Mean message size (bytes) and recipients per message.
    pub fn means(&self) -> (f64, f64) {
        fn mean<K: Copy + Into<f64>>(t: &[(K, f64)]) -> f64 {
            let mut prev = 0.0;
            t.iter()
                .map(|(k, c)| {
                    let s = c - prev;
                    prev = *c;
                    (*k).into() * s
                })
                .sum()
        }
        let sizes: Vec<(f64, f64)> = self.sizes.iter().map(|(b, c)| (*b as f64, *c)).collect();
        (mean(&sizes), mean(&self.recipients))
    }
}

/// An error of the TOML parser on one line.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `--list-profiles`: each built-in profile with its day, in a few lines.
pub fn list() -> String {
    let mut out = String::new();
    for (name, text) in BUILT_IN {
        let Ok(r) = Profile::parse(name, text).and_then(Profile::ready) else {
            let _ = writeln!(out, "{name}: (does not parse: a bug)");
            continue;
        };
        let p = &r.profile;
        let (size, rcpts) = r.means();
        let _ = writeln!(out, "{name}\n  {}", p.about);
        let day: Vec<String> = Action::ALL
            .iter()
            .filter(|a| p.per_day.get(**a) > 0.0)
            .map(|a| format!("{} {}", a.name(), p.per_day.get(*a)))
            .collect();
        let _ = writeln!(out, "  per user per day: {}", day.join(", "));
        let _ = writeln!(
            out,
            "  busiest hour {} % of the day; desktop clients {:.0} %; messages {:.1} KB and {:.2} recipients on average",
            p.peak_hour_share,
            r.desktop * 100.0,
            size / 1024.0,
            rcpts
        );
        if !p.qos.is_empty() {
            let _ = writeln!(out, "  QoS: {}", p.qos.join("; "));
        }
    }
    out
}

/// `--dump-profile NAME`: the built-in profile's file, to start one's own from.
pub fn dump(name: &str) -> Result<&'static str, UsageError> {
    BUILT_IN
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .ok_or_else(|| {
            UsageError(format!(
                "--dump-profile: no built-in profile '{name}' (spate population --list-profiles)"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn every_built_in_profile_parses_and_its_tables_sum_to_one() {
        for (name, text) in BUILT_IN {
            let r = Profile::parse(name, text).and_then(Profile::ready).unwrap();
            assert_eq!(r.profile.name, *name, "the file names itself");
            assert!(!r.profile.sources.is_empty(), "{name} names its sources");
            assert!(!r.profile.qos.is_empty(), "{name} has QoS rules");
            for t in [r.actions.last().unwrap().1, r.sizes.last().unwrap().1] {
                assert!((t - 1.0).abs() < 1e-9);
            }
        }
    }

    fn minimal() -> String {
        r#"
name = "t"
about = "a test"
peak_hour_share = 15
clients = { desktop = 100 }
qos = ["p95(send) < 5s"]
[per_day]
send = 2
check = 4
[messages]
sizes = { "1k" = 50, "10k" = 50 }
recipients = { "1" = 50, "3" = 50 }
"#
        .to_string()
    }

    #[test]
    fn bad_profiles_say_what_is_wrong_in_one_line() {
        let cases = [
            ("send = 2", "send = -2", "per_day.send = -2"),
            ("send = 2", "sned = 2", "unknown field"),
            ("\"10k\" = 50", "\"10k\" = 40", "sum to 90.00 %"),
            ("desktop = 100", "laptop = 100", "clients.laptop"),
            (
                "peak_hour_share = 15",
                "peak_hour_share = 0",
                "peak_hour_share 0",
            ),
            ("\"3\" = 50", "\"0\" = 50", "recipients '0'"),
            ("send = 2\ncheck = 4", "send = 0", "no action"),
        ];
        for (from, to, says) in cases {
            let text = minimal().replace(from, to);
            assert_ne!(text, minimal(), "{from}");
            let e = Profile::parse("t", &text)
                .and_then(Profile::ready)
                .unwrap_err()
                .0;
            assert!(e.contains(says), "{to}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        assert!(Profile::load("no-such")
            .unwrap_err()
            .0
            .contains("office-medium"));
    }

    #[test]
    fn draws_follow_the_shares() {
        let r = Profile::parse("t", &minimal())
            .and_then(Profile::ready)
            .unwrap();
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let n = 60_000;
        let sends = (0..n)
            .filter(|_| r.action(&mut rng) == Action::Send)
            .count();
        // 2 of 6 actions a day are sends.
        assert!(
            (sends as f64 / n as f64 - 1.0 / 3.0).abs() < 0.01,
            "{sends}"
        );
        let big = (0..n).filter(|_| r.size(&mut rng) == 10 * 1024).count();
        assert!((big as f64 / n as f64 - 0.5).abs() < 0.01, "{big}");
        assert_eq!(r.means().1, 2.0);
        // 6 a day, 15 % of them in the busiest hour, 60 simulated seconds to the real one.
        assert!((r.rate_per_user(60.0) - 6.0 * 0.15 / 60.0).abs() < 1e-12);
    }
}
