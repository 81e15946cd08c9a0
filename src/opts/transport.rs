//! How client commands reach a server: TLS (STARTTLS or implicit), what to trust, a client
//! certificate, source addresses and the deadline of each step.

use std::net::IpAddr;
use std::time::Duration;

use serde::Serialize;

use crate::session::{self, Endpoint, TlsMode};
use crate::{usage, UsageError};

#[cfg(test)]
mod sources_tests {
    use super::parse_sources;

    #[test]
    fn sources_are_addresses_ranges_or_networks() {
        let a = |t: &str| -> Vec<String> {
            parse_sources(t)
                .unwrap()
                .addrs
                .iter()
                .map(|a| a.to_string())
                .collect()
        };
        assert_eq!(a("127.0.0.2"), ["127.0.0.2"]);
        assert_eq!(
            a("127.0.0.254-127.0.1.1"),
            ["127.0.0.254", "127.0.0.255", "127.0.1.0", "127.0.1.1"]
        );
        assert_eq!(a("127.0.0.0/30"), ["127.0.0.1", "127.0.0.2"]);
        assert_eq!(a("127.0.0.4/31"), ["127.0.0.4", "127.0.0.5"]);
        assert_eq!(a("::1"), ["::1"]);
        assert_eq!(a("fd00::1-fd00::3").len(), 3);
        assert_eq!(parse_sources("127.0.0.0/16").unwrap().addrs.len(), 65_534);
        for bad in [
            "127.0.0.9-127.0.0.2",
            "127.0.0.1-::1",
            "127.0.0.0/33",
            "127.0.0.0/8",
            "x",
            "127.0.0.1/x",
        ] {
            assert!(parse_sources(bad).is_err(), "{bad}");
        }
    }
}

/// Source addresses as given to `--bind`: an address, a range (`A-B`) or a network
/// (`A/LEN`); written to plan.json as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sources {
    pub text: String,
    pub addrs: Vec<IpAddr>,
}

impl Serialize for Sources {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// The most source addresses one `--bind` item names.
const MAX_SOURCES: u128 = 65_536;

/// One `--bind` item: `127.0.0.2`, `127.0.0.2-127.0.0.9`, `127.0.0.0/29` (every address of
/// the network but its network and broadcast addresses, for an IPv4 one shorter than /31).
pub fn parse_sources(text: &str) -> Result<Sources, String> {
    let t = text.trim();
    let ip = |a: &str| -> Result<IpAddr, String> {
        a.trim()
            .parse::<IpAddr>()
            .map_err(|_| format!("{a}: not an IP address (give A, A-B or A/LEN)"))
    };
    let num = |a: IpAddr| -> u128 {
        match a {
            IpAddr::V4(v) => u128::from(u32::from(v)),
            IpAddr::V6(v) => u128::from(v),
        }
    };
    let back = |v4: bool, n: u128| -> IpAddr {
        if v4 {
            IpAddr::V4(std::net::Ipv4Addr::from(n as u32))
        } else {
            IpAddr::V6(std::net::Ipv6Addr::from(n))
        }
    };
    let (first, last) = if let Some((a, b)) = t.split_once('-') {
        let (a, b) = (ip(a)?, ip(b)?);
        if a.is_ipv4() != b.is_ipv4() {
            return Err(format!("{t}: both ends of a range in one family"));
        }
        if num(b) < num(a) {
            return Err(format!("{t}: the range ends before it starts"));
        }
        (a, b)
    } else if let Some((a, len)) = t.split_once('/') {
        let a = ip(a)?;
        let bits = if a.is_ipv4() { 32 } else { 128 };
        let len: u32 = len
            .trim()
            .parse()
            .ok()
            .filter(|l| *l <= bits)
            .ok_or_else(|| format!("{t}: the prefix length is 0 to {bits}"))?;
        let host_bits = bits - len;
        let size: u128 = if host_bits >= 128 {
            u128::MAX
        } else {
            1u128 << host_bits
        };
        let base = num(a) & !(size.wrapping_sub(1));
        // A network's own and broadcast addresses are no hosts (IPv4 longer than /31).
        let (lo, hi) = match (a.is_ipv4(), host_bits) {
            (true, 2..) => (base + 1, base + size - 2),
            _ => (base, base + (size - 1)),
        };
        (back(a.is_ipv4(), lo), back(a.is_ipv4(), hi))
    } else {
        let a = ip(t)?;
        (a, a)
    };
    let count = num(last) - num(first) + 1;
    if count > MAX_SOURCES {
        return Err(format!(
            "{t}: {count} addresses; at most {MAX_SOURCES} in one --bind item"
        ));
    }
    let v4 = first.is_ipv4();
    Ok(Sources {
        text: t.to_string(),
        addrs: (num(first)..=num(last)).map(|n| back(v4, n)).collect(),
    })
}

#[derive(Debug, Clone, Default, clap::Args, Serialize)]
pub struct TransportArgs {
    /// Upgrade every connection with STARTTLS (STLS for POP3).
    #[arg(long, conflicts_with = "tls", help_heading = "Transport")]
    pub starttls: bool,
    /// Implicit TLS from the first byte (ports 465, 995, 993).
    #[arg(long, help_heading = "Transport")]
    pub tls: bool,
    /// Trust this CA (PEM) in addition to the system roots.
    #[arg(long, help_heading = "Transport")]
    pub ca: Option<String>,
    /// Do not verify the server certificate.
    #[arg(long, help_heading = "Transport")]
    pub insecure: bool,
    /// Present this client certificate (PEM chain) to servers that ask for one.
    #[arg(
        long,
        requires = "key",
        value_name = "FILE",
        help_heading = "Transport"
    )]
    pub cert: Option<String>,
    /// The private key (PEM) of --cert.
    #[arg(
        long,
        requires = "cert",
        value_name = "FILE",
        help_heading = "Transport"
    )]
    pub key: Option<String>,
    /// Source addresses to spread the sessions' connections over: addresses, ranges or
    /// networks, separated by commas (127.0.0.2,127.0.0.3 or 127.0.0.2-127.0.0.9 or
    /// 127.0.0.0/29; at most 65 536). Each source address has its own local ports towards
    /// the server (about 28 000 by default, net.ipv4.ip_local_port_range): where one runs
    /// out, connects fail with "out of local ports", and more source addresses hold more
    /// sessions. The kernel picks each connection's port when it connects
    /// (IP_BIND_ADDRESS_NO_PORT), per source and destination.
    #[arg(long, value_delimiter = ',', value_name = "ADDRS", value_parser = parse_sources, help_heading = "Transport")]
    pub bind: Vec<Sources>,
    /// Deadline for connecting and for each reply. A connect or greeting that times out
    /// because the server's accept queue overflowed (SYNs sent again, a handshake never
    /// completed) is reported as that, not as a plain timeout.
    #[arg(long, default_value = "30s", help_heading = "Transport")]
    pub timeout: String,
    /// Full TLS handshakes only. By default a connection resumes a session an earlier
    /// one of this run was given (TLS 1.3 tickets, TLS 1.2 tickets or IDs), as clients
    /// do: a resumed handshake skips the certificate and its checks and costs this side
    /// about half the CPU of a full one. Every report says how many of each there were
    /// and their share of spate's CPU.
    #[arg(long, help_heading = "Transport")]
    pub no_resumption: bool,
    /// The name to send (SNI) and to verify the server's certificate against, when it is
    /// not the host connected to (an address, or a name the certificate does not carry).
    #[arg(long, value_name = "NAME", help_heading = "Transport")]
    pub server_name: Option<String>,
}

impl TransportArgs {
    pub fn mode(&self) -> TlsMode {
        if self.tls {
            TlsMode::Implicit
        } else if self.starttls {
            TlsMode::Starttls
        } else {
            TlsMode::Plain
        }
    }

    /// The deadline, which must be more than 0.
    pub fn timeout(&self) -> anyhow::Result<Duration> {
        let t = crate::units::parse_duration(&self.timeout)?;
        if t.is_zero() {
            return usage("--timeout must be more than 0");
        }
        Ok(t)
    }

    pub fn tls_options(&self) -> crate::tls::ClientOptions {
        crate::tls::ClientOptions {
            ca: self.ca.clone(),
            insecure: self.insecure,
            client_cert: self.cert.clone(),
            client_key: self.key.clone(),
            no_resumption: self.no_resumption,
        }
    }

    /// The server at `target` (`HOST[:PORT]`, `default_port` when none is given); a TLS
    /// configuration is made when TLS is planned, or when `tls_anyway` (a share of
    /// connections will use STARTTLS).
    pub fn endpoint(
        &self,
        target: &str,
        default_port: u16,
        tls_anyway: bool,
    ) -> anyhow::Result<Endpoint> {
        let (host, addr) = session::resolve(target, default_port)?;
        let tls = self.mode();
        let tls_config = if tls != TlsMode::Plain || tls_anyway {
            let opts = self.tls_options();
            Some(crate::tls::client_config(&opts).map_err(|e| UsageError(e.to_string()))?)
        } else {
            None
        };
        Ok(Endpoint {
            addr,
            server_name: crate::tls::server_name(self.server_name.as_deref().unwrap_or(&host))
                .map_err(|e| UsageError(format!("--server-name: {e}")))?,
            tls,
            tls_config,
            timeout: self.timeout()?,
            bind: self
                .bind
                .iter()
                .flat_map(|s| s.addrs.iter().copied())
                .collect(),
        })
    }
}
