//! Kernel faults in a network namespace: `kernel=loss:P|partition|reject|rate:RATE
//! netns=NAME`. The server runs in namespace NAME (the test bed's, a test's own); the
//! fault puts an nftables table `inet spate_fault` into it (random loss with `numgen`,
//! a partition that drops, or one that refuses with resets) or a tbf rate cap on its
//! links, and takes it out again at the fault's end. Loopback inside the namespace is
//! left alone, and nothing is ever changed in spate's own namespace. These machines'
//! kernels have no netem: delay and reordering come from the proxy (`net=`).

use std::path::Path;

/// What the kernel is told to do to the namespace's traffic.
#[derive(Debug, Clone, PartialEq)]
pub enum Kernel {
    /// Each packet in or out dropped with this probability (percent).
    Loss(u8),
    /// Every packet in or out dropped: connections hear nothing.
    Partition,
    /// Every packet in refused (TCP: a reset; others: ICMP unreachable).
    Reject,
    /// Every link's sending capped at this rate (tc's syntax: 1mbit, 500kbit).
    Rate(String),
}

/// The table every rule goes into, removed whole at the fault's end.
const TABLE: &str = "spate_fault";

impl Kernel {
    pub fn parse(v: &str) -> Result<Kernel, String> {
        let (kind, arg) = v.split_once(':').unwrap_or((v, ""));
        match (kind, arg) {
            ("loss", p) => {
                let n = p
                    .trim()
                    .strip_suffix('%')
                    .unwrap_or(p.trim())
                    .parse::<f64>()
                    .ok()
                    .filter(|n| *n > 0.0 && *n <= 100.0)
                    .ok_or_else(|| format!("kernel=loss:{p}: expected a share, 1% to 100%"))?;
                Ok(Kernel::Loss(n.round().max(1.0) as u8))
            }
            ("partition", "") => Ok(Kernel::Partition),
            ("reject", "") => Ok(Kernel::Reject),
            ("rate", r)
                if !r.is_empty()
                    && r.trim_end_matches(|c: char| c.is_ascii_alphabetic())
                        .parse::<f64>()
                        .is_ok_and(|n| n > 0.0)
                    && ["bit", "kbit", "mbit", "gbit", "bps", "kbps", "mbps"]
                        .iter()
                        .any(|u| r.ends_with(u)) =>
            {
                Ok(Kernel::Rate(r.to_string()))
            }
            _ => Err(format!(
                "kernel={v}: expected loss:P%, partition, reject or rate:RATE (e.g. rate:1mbit)"
            )),
        }
    }

    fn tool(&self) -> &'static str {
        match self {
            Kernel::Rate(_) => "tc",
            _ => "nft",
        }
    }

    /// Whether it can be applied now: root, the namespace, the tool.
    pub fn check(&self, netns: &str) -> Result<(), String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("kernel= changes a network namespace: it needs root".into());
        }
        if !Path::new("/run/netns").join(netns).exists() {
            return Err(format!(
                "no network namespace '{netns}' (ip netns list): kernel= acts only inside the server's namespace"
            ));
        }
        let tool = self.tool();
        let found = std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
            || Path::new("/usr/sbin").join(tool).is_file();
        if !found {
            let pkg = if tool == "nft" {
                "nftables"
            } else {
                "iproute2"
            };
            return Err(format!("{tool} not found: install the {pkg} package"));
        }
        Ok(())
    }

    /// The shell commands that apply it in `netns` and take it out again.
    pub fn commands(&self, netns: &str) -> (String, String) {
        let ns = shlex::try_quote(netns).map_or_else(|_| "''".into(), |q| q.into_owned());
        let exec = format!("ip netns exec {ns}");
        let links = "$(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -vx lo)";
        match self {
            // The loop goes to sh on its standard input (a quoted here-document): the awk
            // program's own quotes cannot end it, as they ended an `sh -c '…'`.
            Kernel::Rate(rate) => (
                format!(
                    "{exec} sh <<'SPATE_TC'\nfor d in {links}; do tc qdisc replace dev \"$d\" root tbf rate {rate} burst 32kbit latency 400ms || exit 1; done\nSPATE_TC"
                ),
                format!(
                    "{exec} sh <<'SPATE_TC'\nfor d in {links}; do tc qdisc del dev \"$d\" root 2>/dev/null; done; true\nSPATE_TC"
                ),
            ),
            _ => {
                let (input, output) = match self {
                    Kernel::Loss(p) => (
                        format!("iifname != \"lo\" numgen random mod 100 < {p} drop"),
                        Some(format!("oifname != \"lo\" numgen random mod 100 < {p} drop")),
                    ),
                    Kernel::Partition => (
                        "iifname != \"lo\" drop".to_string(),
                        Some("oifname != \"lo\" drop".to_string()),
                    ),
                    _ => (
                        "iifname != \"lo\" meta l4proto tcp reject with tcp reset\n  add rule inet spate_fault in iifname != \"lo\" reject".to_string(),
                        None,
                    ),
                };
                let mut rules = format!(
                    "add table inet {TABLE}\nadd chain inet {TABLE} in {{ type filter hook input priority -10 ; policy accept ; }}\nadd rule inet {TABLE} in {input}\n"
                );
                if let Some(out) = output {
                    rules.push_str(&format!(
                        "add chain inet {TABLE} out {{ type filter hook output priority -10 ; policy accept ; }}\nadd rule inet {TABLE} out {out}\n"
                    ));
                }
                (
                    format!("{exec} nft -f - <<'SPATE_NFT'\n{rules}SPATE_NFT"),
                    format!("{exec} nft delete table inet {TABLE}"),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_their_rules() {
        assert_eq!(Kernel::parse("loss:5%"), Ok(Kernel::Loss(5)));
        assert_eq!(Kernel::parse("partition"), Ok(Kernel::Partition));
        assert_eq!(
            Kernel::parse("rate:1mbit"),
            Ok(Kernel::Rate("1mbit".into()))
        );
        for bad in [
            "loss:0%",
            "loss:x",
            "rate:fast",
            "rate:10",
            "delay:5ms",
            "partition:1",
        ] {
            assert!(Kernel::parse(bad).is_err(), "{bad}");
        }
        let (run, undo) = Kernel::Loss(30).commands("srv");
        assert!(
            run.starts_with("ip netns exec srv nft -f - <<'SPATE_NFT'\n"),
            "{run}"
        );
        assert!(run.contains("numgen random mod 100 < 30 drop"), "{run}");
        assert!(run.contains("oifname != \"lo\""), "{run}");
        assert_eq!(undo, "ip netns exec srv nft delete table inet spate_fault");
        let (run, _) = Kernel::Reject.commands("my ns");
        assert!(run.starts_with("ip netns exec 'my ns' nft"), "{run}");
        assert!(run.contains("reject with tcp reset"), "{run}");
        let (run, undo) = Kernel::Rate("1mbit".into()).commands("srv");
        assert!(run.contains("tbf rate 1mbit"), "{run}");
        assert!(undo.contains("tc qdisc del"), "{undo}");
        // The commands are valid shell: sh parses them (-n: reads, runs nothing).
        for cmd in [&run, &undo] {
            let ok = std::process::Command::new("sh")
                .args(["-n", "-c", cmd])
                .status()
                .unwrap()
                .success();
            assert!(ok, "{cmd}");
        }
    }
}
