//! How client commands reach a server: TLS (STARTTLS or implicit), what to trust, a client
//! certificate, source addresses and the deadline of each step.

use std::net::IpAddr;
use std::time::Duration;

use serde::Serialize;

use crate::session::{self, Endpoint, TlsMode};
use crate::{usage, UsageError};

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
    /// Source addresses to spread connections over: 127.0.0.2,127.0.0.3.
    #[arg(long, value_delimiter = ',', help_heading = "Transport")]
    pub bind: Vec<IpAddr>,
    /// Deadline for connecting and for each reply. A connect or greeting that times out
    /// because the server's accept queue overflowed (SYNs sent again, a handshake never
    /// completed) is reported as that, not as a plain timeout.
    #[arg(long, default_value = "30s", help_heading = "Transport")]
    pub timeout: String,
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
            bind: self.bind.clone(),
        })
    }
}
