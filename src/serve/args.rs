//! `spate serve` options and the command itself.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use super::config::{Addrs, Config, Listener, RrOptions, XmppOptions};
use super::faults::{self, Faults};
use super::server::start_apart;
use super::store::{StoreOptions, Users};
use crate::tls::ServerIdentity;
use crate::units::{fmt_bytes, parse_duration, parse_size};
use crate::UsageError;

const EXAMPLES: &str = "\
EXAMPLES:
  spate serve
      SMTP on 127.0.0.1:2525, any address @example.test is a mailbox, any login works.
  spate serve --smtp 127.0.0.1:2525 --submission 127.0.0.1:2587 --imap 127.0.0.1:2143 \\
              --pop3 127.0.0.1:2110 --users-file users.txt --cert-out /tmp/spate.pem
      A small mail system: submission needs AUTH, mail is read back over IMAP/POP3.
      users.txt holds 'address password' lines.
  spate serve --fail rcpt:451:0.02 --fail dot:554:0.001 --delay data:5ms..20ms --seed 1
      A flaky server: 2 % of RCPTs get 451, 0.1 % of messages 554 after the dot, the
      reply to DATA takes 5-20 ms. The same seed gives the same faults per connection.
  spate serve --discard --max-connections 2000 --stats-file /tmp/serve.json
      A sink for pure injection benchmarks: counts and sizes only, counters as JSON
      every second.
  spate serve --xmpp 127.0.0.1:5222 --xmpps 127.0.0.1:5223 --users-file users.txt \
              --cert-out /tmp/spate.pem
      Chat: log in with SCRAM-SHA-256/SCRAM-SHA-1/PLAIN (spate xmpp ... --ca
      /tmp/spate.pem), presence, messages, multicast.example.test (XEP-0033).

Fault phases: connect (or banner), ehlo, mail, rcpt, data (the reply to DATA), dot (the
reply after the message, before it is stored), stored (after it is stored, before the
reply: --drop stored:0.01 is a server that dies having stored the message, which the
client counts as indeterminate and spate verify as recovered); rr (each request of --rr/--rrs: a fail answers HTTP CODE or
'ERR CODE', a drop closes the connection); for XMPP connect (before the stream header; a fail is a stream
error), xmpp-login (the answer to SASL auth; a fail is temporary-auth-failure for 4xx,
not-authorized for 5xx) and xmpp-stanza (each stanza of a bound session; a fail is a
stream error, resource-constraint for 4xx, internal-server-error for 5xx); for IMAP the
commands login, select, fetch, store, search, append, copy (and move), expunge (and
close), idle, list, status and mailbox (create, delete, rename, subscribe): CODE may be
NO, BAD or BYE (BYE closes the session), e.g. --fail fetch:NO:0.01; for POP3 login
(PASS, APOP, AUTH), list (LIST, UIDL, STAT), retr (RETR, TOP), dele and quit (the commit
of deletions): a fail is -ERR [SYS/TEMP] (and a close for 421). Every
injected fault is counted (see --stats-file and the summary printed at exit), so a
client's error counts can be checked against them.

XMPP: JIDs are the addresses of --users-file (then SCRAM-SHA-256, SCRAM-SHA-1 and PLAIN
are offered); without it every JID of the served domains exists, any password works and
only PLAIN is offered (SCRAM needs passwords the server knows). PLAIN is offered before
STARTTLS too (a loopback test server). In-band registration (XEP-0077) adds accounts in
memory, next to the users file's; conflict when the JID has a password already. The
roster is every other account of the domain in one group 'spate', subscription both;
presence goes to every available session of the domain and back to the sender. A message
to a bare JID reaches every available resource; nobody online: service-unavailable. The
multicast service multicast.DOMAIN delivers to the to/cc/bcc addresses that are online
and says nothing about the others. Stanzas over 256 KiB or nested over 64 deep end the
stream with policy-violation. The counters (sessions, stanzas routed, deliveries,
multicasts, registrations) are in --stats-file under \"xmpp\".

Request/response (--rr, --rrs): a decision service for spate rr. Each request (framed by
--rr-frame line|len32|len16|http) is answered 'ALLOW subject=CN cache=hit|miss' ('DENY'
when the request contains 'deny'; CN is the client certificate's common name, '-'
without one; HTTP: status 200 with that body). The last --rr-cache decisions are
remembered per (subject, request): a hit answers at once, a miss computes for --rr-miss-cost (CPU work).
  spate serve --rr 127.0.0.1:7000 --rr-cache 200 --rr-miss-cost 2ms
  spate serve --rrs 127.0.0.1:7443 --rr-frame http --rr-client-ca clients-ca.pem \\
              --cert-out /tmp/spate.pem
Counters (requests, hits, misses, bad requests, distinct subjects) are in --stats-file
under \"rr\" and in the summary printed at exit.

TLS: a self-signed certificate for localhost/127.0.0.1/::1 is generated at start unless
--cert/--key are given; --cert-out writes it so clients can trust it (e.g. --ca PATH).
STARTTLS is offered on smtp, submission, lmtp, pop3 (STLS), imap and xmpp. The generated
certificate also names the served domains (XMPP checks the JID's domain).";

/// Options of `spate serve`.
#[derive(Debug, clap::Args)]
#[command(
    after_long_help = EXAMPLES
)]
pub struct Args {
    /// SMTP listener, ADDR:PORT or PORT (loopback) [default without any listener flag:
    /// 127.0.0.1:2525]
    #[arg(long, value_name = "ADDR", value_parser = parse_addr, help_heading = "Listeners")]
    pub smtp: Option<SocketAddr>,
    /// Submission listener (MAIL requires AUTH)
    #[arg(long, value_name = "ADDR", value_parser = parse_addr, help_heading = "Listeners")]
    pub submission: Option<SocketAddr>,
    /// SMTP with implicit TLS (like port 465)
    #[arg(long, value_name = "ADDR", value_parser = parse_addr, help_heading = "Listeners")]
    pub smtps: Option<SocketAddr>,
    /// LMTP listener (LHLO, one reply per recipient after the dot)
    #[arg(long, value_name = "ADDR", value_parser = parse_addr, help_heading = "Listeners")]
    pub lmtp: Option<SocketAddr>,
    /// POP3 listener (STLS offered)
    #[arg(long, value_name = "ADDR", value_parser = parse_addr, help_heading = "Listeners")]
    pub pop3: Option<SocketAddr>,
    /// POP3 with implicit TLS
    #[arg(long, value_name = "ADDR", value_parser = parse_addr, help_heading = "Listeners")]
    pub pop3s: Option<SocketAddr>,
    /// IMAP listener (STARTTLS offered)
    #[arg(long, value_name = "ADDR", value_parser = parse_addr, help_heading = "Listeners")]
    pub imap: Option<SocketAddr>,
    /// IMAP with implicit TLS
    #[arg(long, value_name = "ADDR", value_parser = parse_addr, help_heading = "Listeners")]
    pub imaps: Option<SocketAddr>,
    /// XMPP client listener (STARTTLS offered), e.g. 127.0.0.1:5222
    #[arg(long, value_name = "ADDR", value_parser = parse_addr, help_heading = "Listeners")]
    pub xmpp: Option<SocketAddr>,
    /// XMPP with direct TLS (like port 5223)
    #[arg(long, value_name = "ADDR", value_parser = parse_addr, help_heading = "Listeners")]
    pub xmpps: Option<SocketAddr>,
    /// XMPP over WebSocket (RFC 7395): ws://ADDR/xmpp-websocket (any path is served)
    #[arg(long, value_name = "ADDR", value_parser = parse_addr, help_heading = "Listeners")]
    pub xmpp_ws: Option<SocketAddr>,
    /// XMPP over WebSocket over TLS: wss://ADDR/xmpp-websocket
    #[arg(long, value_name = "ADDR", value_parser = parse_addr, help_heading = "Listeners")]
    pub xmpp_wss: Option<SocketAddr>,
    /// JMAP (RFC 8620/8621) over HTTP, on the same store as IMAP and POP3: the session
    /// resource at http://ADDR/.well-known/jmap
    #[arg(long, value_name = "ADDR", value_parser = parse_addr, help_heading = "Listeners")]
    pub jmap: Option<SocketAddr>,
    /// JMAP over HTTPS (the generated certificate): https://ADDR/.well-known/jmap
    #[arg(long, value_name = "ADDR", value_parser = parse_addr, help_heading = "Listeners")]
    pub jmaps: Option<SocketAddr>,
    /// Request/response decision service (spate rr's target), e.g. 127.0.0.1:7000
    #[arg(long, value_name = "ADDR", value_parser = parse_addr, help_heading = "Listeners")]
    pub rr: Option<SocketAddr>,
    /// The decision service over TLS (client certificates required with --rr-client-ca)
    #[arg(long, value_name = "ADDR", value_parser = parse_addr, help_heading = "Listeners")]
    pub rrs: Option<SocketAddr>,

    /// A domain served (repeatable) [default: example.test]
    #[arg(long = "domain", value_name = "DOMAIN", help_heading = "Mailboxes")]
    pub domains: Vec<String>,
    /// 'address password' lines: only these addresses exist and may log in. Without it,
    /// every address in the served domains exists and any password is accepted.
    #[arg(long, value_name = "FILE", alias = "users", help_heading = "Mailboxes")]
    pub users_file: Option<PathBuf>,
    /// Also write every delivered message to DIR/<address>/new (Maildir)
    #[arg(long, value_name = "DIR", help_heading = "Mailboxes")]
    pub maildir: Option<PathBuf>,
    /// Keep counts and sizes only, not the messages: memory stays flat however long the
    /// server runs (benchmarks, soaks); mailboxes then read as empty over POP3/IMAP
    #[arg(long, help_heading = "Mailboxes")]
    pub discard: bool,
    /// Answer 452 4.3.1 once stored messages take this much memory (e.g. 1G)
    #[arg(
        long,
        value_name = "SIZE",
        default_value = "1G",
        help_heading = "Mailboxes"
    )]
    pub memory_cap: String,
    /// Largest message accepted; larger ones get 552 5.3.4 (0 = no limit)
    #[arg(
        long,
        value_name = "SIZE",
        default_value = "64M",
        help_heading = "Limits"
    )]
    pub max_size: String,
    /// Most recipients per message; more get 452 4.5.3
    #[arg(long, value_name = "N", default_value_t = 100, help_heading = "Limits")]
    pub max_rcpt: usize,
    /// Most simultaneous connections; more get 421 4.7.0 and are closed (0 = no cap)
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1000,
        help_heading = "Limits"
    )]
    pub max_connections: usize,
    /// Connections beyond --max-connections wait for a free slot instead of getting 421
    /// (like Postfix's process limit)
    #[arg(long, help_heading = "Limits")]
    pub queue_connections: bool,
    /// Share the listening ports with other `spate serve` processes started with this
    /// option too (SO_REUSEPORT): the kernel spreads the connections over them, so that
    /// more sessions than one process may have files (20 000 here) reach one address
    /// and port. Each process serves its own store; give them all the same --users-file.
    #[arg(long, help_heading = "Limits")]
    pub reuse_port: bool,
    /// Keep this many bytes in memory per accepted message, forever: a deliberate leak,
    /// for testing soak runs' leak detection (e.g. 10k)
    #[arg(long, value_name = "SIZE", help_heading = "Mailboxes")]
    pub leak_per_message: Option<String>,
    /// Threads that run the sessions [default: half the CPUs, at least 1: the other half
    /// is for a generator on the same host]. On a 2-CPU host, one thread took smtp-source's
    /// messages at 26.5 CPU-µs each and two at 32 (bench/serve.sh)
    #[arg(long, value_name = "N", help_heading = "Limits")]
    pub threads: Option<usize>,
    /// Close a session idle this long (421 4.4.2)
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "5m",
        help_heading = "Limits"
    )]
    pub idle_timeout: String,
    /// Name in the greeting
    #[arg(
        long,
        value_name = "NAME",
        default_value = "spate.localhost",
        help_heading = "Limits"
    )]
    pub hostname: String,
    /// Refuse messages with bare LF line ends (550 5.6.0) instead of normalizing them
    #[arg(long, help_heading = "Limits")]
    pub reject_bare_lf: bool,

    /// Most addresses (to, cc, bcc) in one XEP-0033 multicast stanza to
    /// multicast.DOMAIN; more get the sender not-acceptable
    #[arg(
        long,
        value_name = "N",
        default_value_t = 10_000,
        help_heading = "XMPP"
    )]
    pub xmpp_multicast_limit: usize,
    /// Stanzas queued to one XMPP session (also at most 8 MiB); a session that reads
    /// too slowly to keep below it is closed with a policy-violation stream error
    #[arg(long, value_name = "N", default_value_t = 4096, help_heading = "XMPP")]
    pub xmpp_queue: usize,
    /// XMPP rosters: shared (every account of the domain is everyone's contact, with
    /// subscription both) or subscriptions (each roster is built from presence
    /// subscribe/subscribed, and presence goes to the subscribers only, as on a real
    /// server; `spate xmpp --roster all` builds them)
    #[arg(long, value_name = "KIND", default_value = "shared", value_parser = ["shared", "subscriptions"], help_heading = "XMPP")]
    pub xmpp_roster: String,
    /// End every XMPP stream with a system-shutdown stream error at its first message
    /// (not routed): a server that logs sessions in and delivers nothing, to check a
    /// client's verdict
    #[arg(long, help_heading = "XMPP")]
    pub xmpp_end_at_message: bool,

    /// Framing of --rr/--rrs requests and answers (as spate rr --frame)
    #[arg(long, value_enum, value_name = "FRAME", default_value_t = crate::proto::rr::Frame::Line, help_heading = "Request/response")]
    pub rr_frame: crate::proto::rr::Frame,
    /// Decisions the service remembers (least recently used forgotten first); 0: none
    #[arg(
        long,
        value_name = "N",
        default_value_t = 200,
        help_heading = "Request/response"
    )]
    pub rr_cache: usize,
    /// What a decision not in the cache costs: this long of CPU work before the answer
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "2ms",
        help_heading = "Request/response"
    )]
    pub rr_miss_cost: String,
    /// --rrs requires a client certificate signed by a CA of this PEM file; its subject
    /// (CN) is named in every decision
    #[arg(long, value_name = "FILE", help_heading = "Request/response")]
    pub rr_client_ca: Option<PathBuf>,

    /// Server certificate chain (PEM); with --key. Default: a generated self-signed one
    #[arg(long, value_name = "FILE", requires = "key", help_heading = "TLS")]
    pub cert: Option<PathBuf>,
    /// Server private key (PEM)
    #[arg(long, value_name = "FILE", requires = "cert", help_heading = "TLS")]
    pub key: Option<PathBuf>,
    /// Write the server certificate (PEM) here, for clients' --ca; a file already there is
    /// replaced only if it holds one certificate (a previous serve's), never followed if a
    /// symlink [default for a generated one: cert.pem in a private directory of its own
    /// under the temporary directory, both removed at exit]
    #[arg(long, value_name = "PATH", help_heading = "TLS")]
    pub cert_out: Option<PathBuf>,

    /// Inject a failure: PHASE:CODE:PROB, e.g. rcpt:451:0.02 (repeatable)
    #[arg(long, value_name = "PHASE:CODE:PROB", help_heading = "Faults")]
    pub fail: Vec<String>,
    /// Delay a reply: PHASE:DUR or PHASE:MIN..MAX, e.g. data:5ms..20ms (repeatable)
    #[arg(long, value_name = "PHASE:DUR", help_heading = "Faults")]
    pub delay: Vec<String>,
    /// Serve the --delay delays one at a time, server-wide, as a single disk would: a
    /// delayed reply waits for those before it, so the server does at most one delayed
    /// command per delay (20ms: 50 a second), a capacity known in advance
    #[arg(long, requires = "delay", help_heading = "Faults")]
    pub serial_delays: bool,
    /// Close the connection without a reply: PHASE:PROB, e.g. dot:0.01 (repeatable)
    #[arg(long, value_name = "PHASE:PROB", help_heading = "Faults")]
    pub drop: Vec<String>,
    /// Wait this long before the greeting
    #[arg(long, value_name = "DURATION", help_heading = "Faults")]
    pub banner_delay: Option<String>,
    /// Wait this long before every reply
    #[arg(long, value_name = "DURATION", help_heading = "Faults")]
    pub tarpit: Option<String>,
    /// Acknowledge this share of messages (250) and throw them away: a server that breaks
    /// its promise, for checking that `spate verify` catches it (counted as
    /// recipients_lost)
    #[arg(long, value_name = "SHARE", help_heading = "Faults")]
    pub lose: Option<String>,
    /// With --maildir: answer 250 at once and write each message to its Maildir only this
    /// long later, so that a kill -9 meanwhile loses what was acknowledged (a server that
    /// breaks its promise). Its own account, DIR/.spate-ack-before-store.log, has a line
    /// `acked TRACE` per copy taken and `stored TRACE` per copy written: those acked and
    /// never stored are what `spate verify` must find missing. A clean stop stores them.
    #[arg(
        long,
        value_name = "DURATION",
        requires = "maildir",
        help_heading = "Faults"
    )]
    pub ack_before_store: Option<String>,
    /// Store this share of messages twice (counted as recipients_duplicated)
    #[arg(long, value_name = "SHARE", help_heading = "Faults")]
    pub duplicate: Option<String>,
    /// A slow reader: read every connection at most this fast (e.g. 16KB/s), with a 4 KiB
    /// receive buffer, so a client's writes wait on the TCP window
    #[arg(long, value_name = "RATE", help_heading = "Faults")]
    pub slow_read: Option<String>,
    /// SMTP/LMTP: answer 421 4.7.0 and close after N commands on a connection (counted as
    /// connect:close)
    #[arg(long, value_name = "N", help_heading = "Faults")]
    pub close_after: Option<u32>,
    /// Seed for the fault draws (reproducible faults per connection number)
    #[arg(long, value_name = "N", help_heading = "Faults")]
    pub seed: Option<u64>,

    /// Rewrite this file with the server's counters (JSON) every second
    #[arg(long, value_name = "PATH", help_heading = "Output")]
    pub stats_file: Option<PathBuf>,
}

fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse::<SocketAddr>()
        .map_err(|_| format!("'{s}' is not ADDR:PORT or PORT (e.g. 127.0.0.1:2525)"))
}

fn usage_err(e: impl std::fmt::Display) -> UsageError {
    UsageError(e.to_string())
}

impl Args {
    /// Turns the options into a server configuration (user errors are `UsageError`s).
    pub fn config(&self) -> Result<Config, UsageError> {
        let mut c = Config::loopback();
        c.listen = self.listeners()?;
        if !self.domains.is_empty() {
            c.domains = self
                .domains
                .iter()
                .map(|d| d.to_ascii_lowercase())
                .collect();
        }
        if let Some(path) = &self.users_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| UsageError(format!("--users-file {}: {e}", path.display())))?;
            c.users = Users::parse(&text)
                .map_err(|e| UsageError(format!("--users-file {}: {e}", path.display())))?;
        }
        c.store = StoreOptions {
            maildir: self.maildir.clone(),
            discard: self.discard,
            memory_cap: parse_size(&self.memory_cap)
                .map_err(|e| UsageError(format!("--memory-cap: {e}")))?,
            ack_before_store: self
                .ack_before_store
                .as_deref()
                .map(|d| {
                    crate::units::parse_duration(d)
                        .map_err(|e| UsageError(format!("--ack-before-store: {e}")))
                })
                .transpose()?,
            ..StoreOptions::default()
        };
        c.max_message_size =
            parse_size(&self.max_size).map_err(|e| UsageError(format!("--max-size: {e}")))?;
        c.max_rcpt = self.max_rcpt;
        c.max_connections = self.max_connections;
        c.queue_connections = self.queue_connections;
        c.reuse_port = self.reuse_port;
        if self.threads == Some(0) {
            return Err(UsageError(
                "--threads must be at least 1 (leave it out for half the CPUs)".into(),
            ));
        }
        c.threads = self.threads.unwrap_or(0);
        if let Some(l) = &self.leak_per_message {
            c.store.leak_per_message =
                parse_size(l).map_err(|e| UsageError(format!("--leak-per-message: {e}")))?;
        }
        c.idle_timeout = parse_duration(&self.idle_timeout)
            .map_err(|e| UsageError(format!("--idle-timeout: {e}")))?;
        c.hostname = self.hostname.clone();
        c.reject_bare_lf = self.reject_bare_lf;
        c.stats_file = self.stats_file.clone();
        if self.xmpp_queue == 0 {
            return Err(UsageError("--xmpp-queue must be at least 1".into()));
        }
        if let Some(ca) = &self.rr_client_ca {
            if let Err(e) = std::fs::metadata(ca) {
                return Err(UsageError(format!("--rr-client-ca {}: {e}", ca.display())));
            }
        }
        c.rr = RrOptions {
            frame: self.rr_frame,
            cache: self.rr_cache,
            miss_cost: parse_duration(&self.rr_miss_cost)
                .map_err(|e| UsageError(format!("--rr-miss-cost: {e}")))?,
            client_ca: self.rr_client_ca.clone(),
        };
        c.xmpp = XmppOptions {
            multicast_limit: self.xmpp_multicast_limit,
            queue: self.xmpp_queue,
            subscriptions: self.xmpp_roster == "subscriptions",
            end_at_message: self.xmpp_end_at_message,
        };
        if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
            let id =
                ServerIdentity::from_pem_files(&cert.to_string_lossy(), &key.to_string_lossy())
                    .map_err(usage_err)?;
            c.identity = Some(Arc::new(id));
        }
        c.faults = self.faults()?;
        Ok(c)
    }

    /// The listeners asked for (SMTP on 127.0.0.1:2525 when none is), each on an address
    /// of its own.
    fn listeners(&self) -> Result<Addrs, UsageError> {
        let mut listen = Addrs {
            smtp: self.smtp,
            submission: self.submission,
            smtps: self.smtps,
            lmtp: self.lmtp,
            pop3: self.pop3,
            pop3s: self.pop3s,
            imap: self.imap,
            imaps: self.imaps,
            xmpp: self.xmpp,
            xmpps: self.xmpps,
            xmpp_ws: self.xmpp_ws,
            xmpp_wss: self.xmpp_wss,
            jmap: self.jmap,
            jmaps: self.jmaps,
            rr: self.rr,
            rrs: self.rrs,
        };
        if listen.is_empty() {
            listen.smtp = Some(SocketAddr::from(([127, 0, 0, 1], 2525)));
        }
        // Two listeners cannot share an address (port 0 picks a free port for each).
        let given: Vec<(Listener, SocketAddr)> = Listener::ALL
            .iter()
            .filter_map(|&l| listen.get(l).map(|a| (l, a)))
            .filter(|(_, a)| a.port() != 0)
            .collect();
        for (i, (l, a)) in given.iter().enumerate() {
            if let Some((other, _)) = given[i + 1..].iter().find(|(_, b)| b == a) {
                return Err(UsageError(format!(
                    "--{} and --{} both ask for {a}: give each listener an address of its own",
                    l.name(),
                    other.name()
                )));
            }
        }
        Ok(listen)
    }

    /// The faults to inject (`--fail`, `--delay`, `--drop`, `--lose`, ...).
    fn faults(&self) -> Result<Faults, UsageError> {
        let mut f = Faults {
            seed: self.seed,
            ..Faults::default()
        };
        for s in &self.fail {
            f.fails.push(faults::parse_fail(s)?);
        }
        for s in &self.delay {
            f.delays.push(faults::parse_delay(s)?);
        }
        for s in &self.drop {
            f.drops.push(faults::parse_drop(s)?);
        }
        if let Some(s) = &self.banner_delay {
            f.banner_delay = Some(faults::parse_plain_duration("--banner-delay", s)?);
        }
        if let Some(s) = &self.tarpit {
            f.tarpit = Some(faults::parse_plain_duration("--tarpit", s)?);
        }
        if let Some(s) = &self.lose {
            f.lose = faults::parse_share("--lose", s)?;
        }
        if let Some(s) = &self.duplicate {
            f.duplicate = faults::parse_share("--duplicate", s)?;
        }
        if let Some(s) = &self.slow_read {
            let bad = || UsageError(format!("--slow-read '{s}': a rate per second, e.g. 16KB/s"));
            let per_s = s.strip_suffix("/s").ok_or_else(bad)?;
            match crate::units::parse_size(per_s) {
                Ok(n) if n > 0 => f.slow_read = Some(n),
                _ => return Err(bad()),
            }
        }
        if self.serial_delays {
            f.serial = Some(faults::Serial::default());
        }
        if let Some(n) = self.close_after {
            if n == 0 {
                return Err(UsageError("--close-after must be at least 1".into()));
            }
            f.close_after = Some(n);
        }
        Ok(f)
    }
}

/// `spate serve`: start, say where, wait for Ctrl-C/SIGTERM, stop gracefully, report.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = args.config()?;
    // Listening before the listeners are announced: a SIGTERM sent as soon as a client
    // has seen the address stops the server gracefully, never by the default action.
    let mut signals = crate::engine::Signals::new();
    let generated = config.identity.is_none();
    let store_note = if config.store.discard {
        "discarding bodies".to_string()
    } else {
        format!("memory cap {}", fmt_bytes(config.store.memory_cap))
    };
    // On a runtime of its own, of --threads threads.
    let running = start_apart(config).await?;
    // Said once the listeners are bound: an address that cannot be bound is an error,
    // not a server to warn about.
    for kind in Listener::ALL {
        if let Some(a) = running.addrs.get(kind) {
            if !a.ip().is_loopback() {
                eprintln!(
                    "spate serve: warning: {} listens on {a}, which is not loopback; this is \
                     an open test server (any login works without --users-file)",
                    kind.name()
                );
            }
        }
    }
    // A generated certificate is always written somewhere (removed again at exit), so
    // clients can trust it. Written before anything is printed: a script that waits for
    // the first line may read it at once.
    let cert_out = match &args.cert_out {
        Some(p) => Some(CertOut::at(p, &running.cert_pem)?),
        None if generated => Some(CertOut::private(&running.cert_pem)?),
        None => None,
    };
    for kind in Listener::ALL {
        if let Some(a) = running.addrs.get(kind) {
            println!("spate serve: {:<10} {a}", kind.name());
        }
    }
    if let Some(c) = &cert_out {
        println!(
            "spate serve: certificate {} (clients: --ca {}){}",
            c.path.display(),
            c.path.display(),
            if c.dir.is_some() {
                ", removed at exit"
            } else {
                ""
            }
        );
    }
    println!(
        "spate serve: store: {store_note}; {} session threads; Ctrl-C stops",
        running.threads
    );
    signals.recv().await;
    eprintln!("spate serve: shutting down");
    let stats = running.stats.clone();
    running.shutdown().await;
    if let Some(c) = cert_out {
        c.remove();
    }
    eprintln!("{}", stats.snapshot().summary());
    Ok(ExitCode::SUCCESS)
}

/// Where the server's certificate was written for clients' --ca.
struct CertOut {
    path: PathBuf,
    /// The private directory it was created in, when spate chose the place: both are
    /// removed at exit (and nothing else).
    dir: Option<PathBuf>,
}

impl CertOut {
    /// `cert.pem` in a directory of its own, created new (mode 0700) under the temporary
    /// directory: nothing already there (a file, a symlink planted at a predictable name)
    /// is written through or removed.
    fn private(pem: &str) -> Result<CertOut, UsageError> {
        use std::os::unix::fs::DirBuilderExt as _;
        let tmp = std::env::temp_dir();
        let mut last = None;
        for _ in 0..16 {
            let dir = tmp.join(format!(
                "spate-serve-{}-{:08x}",
                std::process::id(),
                rand::random::<u32>()
            ));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {
                    let path = dir.join("cert.pem");
                    write_new(&path, pem)?;
                    return Ok(CertOut {
                        path,
                        dir: Some(dir),
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => {
                    return Err(UsageError(format!(
                        "cannot create a directory in {}: {e}",
                        tmp.display()
                    )))
                }
            }
        }
        Err(UsageError(format!(
            "cannot create a directory in {}: {}",
            tmp.display(),
            last.map_or_else(|| "?".into(), |e| e.to_string())
        )))
    }

    /// The user's `--cert-out PATH`: created, or replacing a file that holds one PEM
    /// certificate and nothing else (a previous serve's); anything else there is refused.
    fn at(path: &Path, pem: &str) -> Result<CertOut, UsageError> {
        let refuse = |why: &str| {
            UsageError(format!(
                "--cert-out {}: {why}; not replaced",
                path.display()
            ))
        };
        match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => write_new(path, pem)?,
            Err(e) => return Err(refuse(&e.to_string())),
            Ok(m) if m.file_type().is_symlink() => return Err(refuse("is a symbolic link")),
            Ok(m) if !m.is_file() => return Err(refuse("is not a regular file")),
            Ok(_) => {
                let old = std::fs::read_to_string(path).unwrap_or_default();
                if !is_one_certificate(&old) {
                    return Err(refuse("holds something other than one PEM certificate"));
                }
                std::fs::write(path, pem)
                    .map_err(|e| UsageError(format!("cannot write {}: {e}", path.display())))?;
            }
        }
        Ok(CertOut {
            path: path.to_path_buf(),
            dir: None,
        })
    }

    fn remove(self) {
        if let Some(dir) = self.dir {
            let _ = std::fs::remove_file(&self.path);
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Creates `path` (never through an existing file or symlink) and writes `text` to it.
fn write_new(path: &Path, text: &str) -> Result<(), UsageError> {
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| UsageError(format!("cannot write {}: {e}", path.display())))
}

/// Whether `text` is one PEM certificate and nothing else (what serve writes).
fn is_one_certificate(text: &str) -> bool {
    let t = text.trim();
    t.starts_with("-----BEGIN CERTIFICATE-----")
        && t.ends_with("-----END CERTIFICATE-----")
        && t.matches("-----BEGIN").count() == 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: Args,
    }

    fn cfg(args: &[&str]) -> Result<Config, UsageError> {
        let mut v = vec!["t"];
        v.extend_from_slice(args);
        T::try_parse_from(v).unwrap().a.config()
    }

    #[test]
    fn defaults_and_errors() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.listen.smtp, Some("127.0.0.1:2525".parse().unwrap()));
        assert_eq!(c.max_rcpt, 100);
        assert_eq!(c.domains, vec!["example.test".to_string()]);
        let c = cfg(&["--imap", "2143", "--fail", "rcpt:451:0.5", "--seed", "3"]).unwrap();
        assert!(c.listen.smtp.is_none());
        assert_eq!(c.listen.imap, Some("127.0.0.1:2143".parse().unwrap()));
        assert_eq!(c.faults.fails.len(), 1);
        let e = cfg(&["--fail", "rcpt:abc:0.5"]).unwrap_err().to_string();
        assert!(e.contains("--fail") && e.contains("abc"), "{e}");
        assert!(cfg(&["--delay", "data:xyz"]).is_err());
        assert!(cfg(&["--tarpit", "fast"]).is_err());
        assert!(cfg(&["--max-size", "lots"]).is_err());
        let c = cfg(&["--xmpp", "5222", "--xmpp-multicast-limit", "901"]).unwrap();
        assert!(c.listen.smtp.is_none());
        assert_eq!(c.listen.xmpp, Some("127.0.0.1:5222".parse().unwrap()));
        assert_eq!(c.xmpp.multicast_limit, 901);
        assert!(cfg(&["--xmpp", "5222", "--xmpp-queue", "0"]).is_err());
        assert!(cfg(&["--delay", "xmpp-stanza:5ms"]).is_ok());
    }
}
