//! Network faults without root or kernel support: when a run has a `net=` fault, every
//! connection spate makes goes through a proxy of its own on loopback (one per server
//! address, started at the first connect), and the fault schedule switches its toxic on
//! and off. Toxics (Shopify's toxiproxy is the model):
//! - `latency:D` or `latency:MIN..MAX`: each chunk of data, either way, waits D (a
//!   uniform draw in the range: jitter) before it goes on;
//! - `loss:P` (e.g. 5%): each chunk, with probability P, waits as a lost TCP segment
//!   would before its retransmission (200 ms, Linux's minimum retransmission timeout):
//!   over TCP, loss is seen as delay, which is what a client measures;
//! - `bandwidth:RATE` (e.g. 64KB/s): each direction of each connection at most RATE;
//! - `blackhole`: data either way is read and thrown away; new connections open and
//!   hear nothing (a partition that drops packets: the client times out);
//! - `refuse`: new connections are reset at once, open ones are reset (a partition that
//!   rejects);
//! - `reset`: open connections are reset at the fault's start (a moment);
//! - `cut:N`: each connection, open or new, is closed after N more bytes (either way).
//!
//! Without a `net=` fault nothing of this runs: connects go straight to the server.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::units::Range;

/// One network toxic.
#[derive(Debug, Clone, PartialEq)]
pub enum Toxic {
    Latency(Range<Duration>),
    /// The share of chunks held back as a lost segment is (0..1).
    Loss(f64),
    /// Bytes per second, each direction of each connection.
    Bandwidth(u64),
    Blackhole,
    Refuse,
    Reset,
    Cut(u64),
}

impl Toxic {
    pub fn parse(text: &str) -> Result<Toxic, String> {
        let (name, arg) = text.split_once(':').unwrap_or((text, ""));
        let need = |what: &str| -> Result<(), String> {
            if arg.is_empty() {
                return Err(format!(
                    "net={name} needs {what}, e.g. net={name}:{}",
                    example(name)
                ));
            }
            Ok(())
        };
        let none = || -> Result<(), String> {
            if !arg.is_empty() {
                return Err(format!("net={name} takes no value"));
            }
            Ok(())
        };
        Ok(match name {
            "latency" => {
                need("a duration")?;
                Toxic::Latency(
                    crate::units::parse_duration_range(arg).map_err(|e| format!("net={text}: {e}"))?,
                )
            }
            "loss" => {
                need("a share")?;
                let p = arg
                    .strip_suffix('%')
                    .map(|n| n.parse::<f64>().map(|v| v / 100.0))
                    .unwrap_or_else(|| arg.parse::<f64>());
                match p {
                    Ok(p) if (0.0..=1.0).contains(&p) => Toxic::Loss(p),
                    _ => return Err(format!("net={text}: a share from 0 to 1, or 0% to 100%")),
                }
            }
            "bandwidth" => {
                need("a rate")?;
                let per_s = arg.strip_suffix("/s").ok_or_else(|| {
                    format!("net={text}: a rate per second, e.g. bandwidth:64KB/s")
                })?;
                match crate::units::parse_size(per_s) {
                    Ok(n) if n > 0 => Toxic::Bandwidth(n),
                    _ => return Err(format!("net={text}: a rate per second, e.g. bandwidth:64KB/s")),
                }
            }
            "blackhole" => none().map(|()| Toxic::Blackhole)?,
            "refuse" => none().map(|()| Toxic::Refuse)?,
            "reset" => none().map(|()| Toxic::Reset)?,
            "cut" => {
                need("a byte count")?;
                Toxic::Cut(
                    crate::units::parse_size(arg).map_err(|e| format!("net={text}: {e}"))?,
                )
            }
            _ => {
                return Err(format!(
                    "unknown net fault '{name}' (latency:D, loss:P, bandwidth:RATE, blackhole, refuse, reset, cut:BYTES)"
                ))
            }
        })
    }
}

/// How long a lost segment holds its data back: Linux's minimum retransmission timeout
/// (TCP_RTO_MIN), what a loopback or LAN connection waits.
const RETRANSMISSION: Duration = Duration::from_millis(200);

fn example(name: &str) -> &'static str {
    match name {
        "latency" => "50ms..80ms",
        "loss" => "5%",
        "bandwidth" => "64KB/s",
        _ => "4KB",
    }
}

/// What is in force: the toxic, and how many times open connections were reset (a
/// count, so a reset followed at once by another state is not missed).
#[derive(Debug, Clone, Default)]
struct Now {
    toxic: Option<Toxic>,
    resets: u64,
}

/// The toxic in force, shared by every proxy of the process.
struct State {
    now: watch::Sender<Now>,
    /// Set once a run has a `net=` fault: connects go through proxies from then on.
    on: AtomicBool,
    proxies: Mutex<Vec<(SocketAddr, SocketAddr)>>,
    connections: AtomicU64,
}

fn state() -> &'static State {
    static S: OnceLock<State> = OnceLock::new();
    S.get_or_init(|| State {
        now: watch::channel(Now::default()).0,
        on: AtomicBool::new(false),
        proxies: Mutex::new(Vec::new()),
        connections: AtomicU64::new(0),
    })
}

/// From now on this process's connects go through proxies (a run with a `net=` fault).
pub fn enable() {
    state().on.store(true, Ordering::Relaxed);
    crate::transport::route_through(route);
}

/// The run is over: no toxic, and connects go straight to their servers again (a
/// scenario's next step runs in the same process).
pub fn disable() {
    set(None);
    state().on.store(false, Ordering::Relaxed);
}

/// Puts `toxic` in force (None: none), for open connections and new ones; `reset` and
/// `refuse` reset the open ones (a reset is over at once).
pub fn set(toxic: Option<Toxic>) {
    state().now.send_modify(|now| {
        if matches!(toxic, Some(Toxic::Reset | Toxic::Refuse)) {
            now.resets += 1;
        }
        now.toxic = toxic.filter(|t| *t != Toxic::Reset);
    });
}

/// Connections the proxies have carried.
pub fn connections() -> u64 {
    state().connections.load(Ordering::Relaxed)
}

/// Where a connect to `server` goes: itself, or (with net faults) its proxy, started on
/// first use. Called from inside the runtime, by the transport's connect.
pub fn route(server: SocketAddr) -> std::io::Result<SocketAddr> {
    let s = state();
    if !s.on.load(Ordering::Relaxed) {
        return Ok(server);
    }
    let mut proxies = s.proxies.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&(_, p)) = proxies.iter().find(|(up, _)| *up == server) {
        return Ok(p);
    }
    let local = if server.is_ipv4() {
        "127.0.0.1:0"
    } else {
        "[::1]:0"
    };
    let std_listener = std::net::TcpListener::bind(local)?;
    std_listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(std_listener)?;
    let addr = listener.local_addr()?;
    tokio::spawn(accept_loop(listener, server));
    proxies.push((server, addr));
    Ok(addr)
}

async fn accept_loop(listener: TcpListener, server: SocketAddr) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        state().connections.fetch_add(1, Ordering::Relaxed);
        let _ = client.set_nodelay(true);
        tokio::spawn(carry(client, server));
    }
}

/// One connection: refused, held in a blackhole, or carried both ways under the toxic in
/// force at each moment.
async fn carry(client: TcpStream, server: SocketAddr) {
    let mut toxic = state().now.subscribe();
    let now = toxic.borrow_and_update().clone();
    match now.toxic {
        Some(Toxic::Refuse) => return reset(client),
        Some(Toxic::Blackhole) => return swallow(client, toxic, now.resets).await,
        _ => {}
    }
    let Ok(upstream) = TcpStream::connect(server).await else {
        return reset(client);
    };
    let _ = upstream.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (sr, sw) = upstream.into_split();
    // Bytes left before a cut, shared by both directions; u64::MAX: no cut.
    let budget = Arc::new(AtomicU64::new(u64::MAX));
    // Either way ending ends the connection: a reset or a cut goes to both sides.
    tokio::select! {
        () = pump(cr, sw, toxic.clone(), budget.clone(), now.resets) => {}
        () = pump(sr, cw, toxic, budget, now.resets) => {}
    }
}

/// Copies one direction chunk by chunk under the toxic in force. A reset sets both of
/// its sockets (a pump holds one half of each) to close with RST.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut toxic: watch::Receiver<Now>,
    budget: Arc<AtomicU64>,
    resets: u64,
) {
    let rst = |from: &tokio::net::tcp::OwnedReadHalf, to: &tokio::net::tcp::OwnedWriteHalf| {
        rst_on_close(from.as_ref());
        rst_on_close(to.as_ref());
    };
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => {
                    let _ = to.shutdown().await;
                    return;
                }
                Ok(n) => n,
            },
            changed = toxic.changed() => {
                if changed.is_err() {
                    return;
                }
                if toxic.borrow_and_update().resets != resets {
                    return rst(&from, &to);
                }
                continue;
            }
        };
        let now = toxic.borrow().toxic.clone();
        let mut end = false;
        let mut take = n;
        match now {
            Some(Toxic::Blackhole) => continue,
            Some(Toxic::Latency(ref r)) => tokio::time::sleep(draw(r)).await,
            Some(Toxic::Loss(p)) => {
                use rand::Rng;
                if rand::rng().random_bool(p) {
                    tokio::time::sleep(RETRANSMISSION).await;
                }
            }
            Some(Toxic::Cut(limit)) => {
                // The first chunk under the cut starts the count (for both directions).
                let _ =
                    budget.compare_exchange(u64::MAX, limit, Ordering::Relaxed, Ordering::Relaxed);
                let left = budget.load(Ordering::Relaxed);
                if n as u64 >= left {
                    take = left as usize;
                    end = true;
                }
                budget.fetch_sub(take as u64, Ordering::Relaxed);
            }
            _ => {}
        }
        if to.write_all(&buf[..take]).await.is_err() || end {
            let _ = to.shutdown().await;
            return;
        }
        if let Some(Toxic::Bandwidth(rate)) = now {
            tokio::time::sleep(Duration::from_secs_f64(n as f64 / rate as f64)).await;
        }
    }
}

/// A connection opened during a blackhole: read and thrown away, nothing ever answers.
async fn swallow(mut client: TcpStream, mut toxic: watch::Receiver<Now>, resets: u64) {
    let mut buf = [0u8; 4096];
    loop {
        tokio::select! {
            r = client.read(&mut buf) => if matches!(r, Ok(0) | Err(_)) { return },
            changed = toxic.changed() => {
                if changed.is_err() { return }
                if toxic.borrow_and_update().resets != resets {
                    return reset(client);
                }
            }
        }
    }
}

/// Closes with a reset (RST), not a FIN.
fn reset(s: TcpStream) {
    rst_on_close(&s);
    drop(s);
}

/// A linger of zero: closing the socket sends RST at once (nothing blocks).
fn rst_on_close(s: &TcpStream) {
    let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
}

fn draw(r: &Range<Duration>) -> Duration {
    if r.is_fixed() {
        return r.lo;
    }
    use rand::Rng;
    rand::rng().random_range(r.lo..=r.hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toxics_parse_and_bad_ones_say_why() {
        assert_eq!(Toxic::parse("loss:5%").unwrap(), Toxic::Loss(0.05));
        assert_eq!(Toxic::parse("loss:0.1").unwrap(), Toxic::Loss(0.1));
        assert_eq!(
            Toxic::parse("bandwidth:64KB/s").unwrap(),
            Toxic::Bandwidth(65536)
        );
        assert_eq!(Toxic::parse("cut:4KB").unwrap(), Toxic::Cut(4096));
        assert_eq!(Toxic::parse("blackhole").unwrap(), Toxic::Blackhole);
        assert!(
            matches!(Toxic::parse("latency:5ms..9ms").unwrap(), Toxic::Latency(r) if !r.is_fixed())
        );
        for (bad, why) in [
            ("loss:150%", "a share from 0 to 1"),
            ("loss", "needs a share"),
            ("bandwidth:64KB", "a rate per second"),
            ("latency:soon", "net=latency:soon"),
            ("reset:3", "takes no value"),
            ("jam", "unknown net fault 'jam'"),
        ] {
            let e = Toxic::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
