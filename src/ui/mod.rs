//! The live views of a run, observers of its intervals: the progress line, the
//! dashboard (`--tui`), the Prometheus endpoint (`--metrics-listen`) and the live view
//! in a browser, which also steers the run (`--web`).

pub mod metrics;
pub mod progress;
pub mod tui;
pub mod web;

/// Where shard I of a run listens, given ADDR: PORT + I, so the shards of one host do not
/// collide (port 0: a free port each).
pub(crate) fn shard_addr(
    addr: std::net::SocketAddr,
    shard: Option<&crate::results::ShardOf>,
    option: &str,
) -> Result<std::net::SocketAddr, crate::UsageError> {
    match shard {
        Some(s) if addr.port() != 0 => {
            let port = u32::from(addr.port()) + s.index;
            let port = u16::try_from(port).map_err(|_| {
                crate::UsageError(format!(
                    "{option} {addr}: shard {} would listen on port {port}, beyond 65535",
                    s.index
                ))
            })?;
            Ok(std::net::SocketAddr::new(addr.ip(), port))
        }
        _ => Ok(addr),
    }
}
