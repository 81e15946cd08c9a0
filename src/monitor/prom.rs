//! Scraping a Prometheus text endpoint (node_exporter on the server machine, or a server's
//! own /metrics) once a second, keeping chosen series. Plain HTTP/1.0 over std sockets on
//! a small thread of its own, so a slow endpoint never delays the run's intervals.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::UsageError;

/// `http://host:port/path` split into the address and the request path.
pub fn parse_url(url: &str) -> Result<(String, String), UsageError> {
    let bad = || {
        UsageError(format!(
            "--monitor-prom '{url}': expected http://HOST:PORT/PATH"
        ))
    };
    let rest = url.strip_prefix("http://").ok_or_else(bad)?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/metrics"),
    };
    if hostport.is_empty() {
        return Err(bad());
    }
    let hostport = if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:80")
    };
    Ok((hostport, path.to_string()))
}

/// Fetches the endpoint's body (1 s connect and read deadlines, 4 MB at most).
pub fn fetch(hostport: &str, path: &str) -> std::io::Result<String> {
    let addr = hostport
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other("cannot resolve"))?;
    let t = Duration::from_secs(1);
    let mut s = TcpStream::connect_timeout(&addr, t)?;
    s.set_read_timeout(Some(t))?;
    s.set_write_timeout(Some(t))?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {hostport}\r\nAccept: text/plain\r\nUser-Agent: spate\r\n\r\n"
    )?;
    let mut body = Vec::new();
    s.take(4 << 20).read_to_end(&mut body)?;
    let text = String::from_utf8_lossy(&body);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .or_else(|| text.split_once("\n\n"))
        .ok_or_else(|| std::io::Error::other("not an HTTP response"))?;
    if head.split_whitespace().nth(1).is_none_or(|c| c != "200") {
        return Err(std::io::Error::other(format!(
            "HTTP status {}",
            head.lines().next().unwrap_or("")
        )));
    }
    Ok(body.to_string())
}

/// One sample line: the series as written (`name{labels}`), its name, label values, value.
pub struct Line<'a> {
    pub series: &'a str,
    pub name: &'a str,
    pub labels: Vec<&'a str>,
    pub value: f64,
}

/// The sample lines of a text exposition (comments and unparsable lines skipped).
pub fn parse(text: &str) -> Vec<Line<'_>> {
    let mut v = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, rest) = match line.find('}') {
            Some(i) if line[..i].contains('{') => (&line[..=i], &line[i + 1..]),
            _ => match line.split_once(char::is_whitespace) {
                Some((s, r)) => (s, r),
                None => continue,
            },
        };
        let Some(value) = rest.split_whitespace().next().and_then(|x| x.parse().ok()) else {
            continue;
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (
                n,
                l.trim_end_matches('}')
                    .split(',')
                    .filter_map(|kv| Some(kv.split_once('=')?.1.trim_matches('"')))
                    .collect(),
            ),
            None => (series, Vec::new()),
        };
        v.push(Line {
            series,
            name,
            labels,
            value,
        });
    }
    v
}

/// Chosen series: column name → series text, fixed by a first scrape at start.
pub struct Prom {
    columns: Vec<String>,
    latest: Arc<Mutex<Vec<f64>>>,
    stop: Arc<AtomicBool>,
    /// CPU time the scraping thread has used, in nanoseconds.
    pub cpu_ns: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Prom {
    /// Scrapes once to find the series (`wanted`: metric names, or exact `name{labels}`
    /// texts), then keeps scraping every second in the background.
    pub fn start(url: &str, wanted: &[String]) -> anyhow::Result<Prom> {
        let (hostport, path) = parse_url(url)?;
        if wanted.is_empty() {
            return crate::usage(
                "--monitor-prom needs --monitor-series NAME,... (which series to keep)",
            );
        }
        let body = fetch(&hostport, &path)
            .map_err(|e| UsageError(format!("--monitor-prom {url}: {e}")))?;
        let mut series: Vec<String> = Vec::new();
        let mut columns = Vec::new();
        for w in wanted {
            let before = series.len();
            for l in parse(&body) {
                if (l.series == w || l.name == w) && !series.iter().any(|s| s == l.series) {
                    series.push(l.series.to_string());
                    let labels = if l.labels.is_empty() {
                        "value".to_string()
                    } else {
                        super::proc::sanitize(&l.labels.join("_"))
                    };
                    columns.push(format!("prom.{}.{labels}", super::proc::sanitize(l.name)));
                }
            }
            if series.len() == before {
                return crate::usage(format!("--monitor-series '{w}': not found at {url}"));
            }
        }
        let latest = Arc::new(Mutex::new(vec![0.0; series.len()]));
        let stop = Arc::new(AtomicBool::new(false));
        let cpu_ns = Arc::new(AtomicU64::new(0));
        let thread = {
            let (latest, stop, cpu_ns) = (latest.clone(), stop.clone(), cpu_ns.clone());
            std::thread::Builder::new()
                .name("spate-prom".into())
                .spawn(move || {
                    let index: HashMap<String, usize> = series
                        .iter()
                        .enumerate()
                        .map(|(i, s)| (s.clone(), i))
                        .collect();
                    while !stop.load(Ordering::Relaxed) {
                        let t0 = super::proc::thread_cpu();
                        if let Ok(body) = fetch(&hostport, &path) {
                            let mut vals = latest.lock().unwrap_or_else(|p| p.into_inner());
                            for l in parse(&body) {
                                if let Some(&i) = index.get(l.series) {
                                    vals[i] = l.value;
                                }
                            }
                        }
                        let used = super::proc::thread_cpu().saturating_sub(t0);
                        cpu_ns.fetch_add(used.as_nanos() as u64, Ordering::Relaxed);
                        for _ in 0..10 {
                            if stop.load(Ordering::Relaxed) {
                                break;
                            }
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }
                })?
        };
        Ok(Prom {
            columns,
            latest,
            stop,
            cpu_ns,
            thread: Some(thread),
        })
    }

    pub fn columns(&self) -> Vec<String> {
        self.columns.clone()
    }

    /// The latest scraped values.
    pub fn sample(&self, out: &mut Vec<f64>) {
        out.extend(self.latest.lock().unwrap_or_else(|p| p.into_inner()).iter());
    }

    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Prom {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition() {
        let t = "# HELP x y\n# TYPE up gauge\nup 1\nnode_load1 0.25 1700000000\n\
                 http_requests_total{method=\"get\",code=\"200\"} 1027\nbad line\n";
        let v = parse(t);
        assert_eq!(v.len(), 3);
        assert_eq!(v[1].name, "node_load1");
        assert_eq!(v[1].value, 0.25);
        assert_eq!(v[2].labels, vec!["get", "200"]);
        assert_eq!(
            v[2].series,
            "http_requests_total{method=\"get\",code=\"200\"}"
        );
        assert!(parse_url("ftp://x").is_err());
        assert_eq!(
            parse_url("http://127.0.0.1:9100").unwrap(),
            ("127.0.0.1:9100".into(), "/metrics".into())
        );
    }
}
