//! The smallest HTTP/1.1 server that Prometheus can scrape: one thread, one connection at
//! a time, `GET /metrics` (and `HEAD`) answered from a [`Page`] and the connection closed.
//! A request is read within a byte and a time budget, so a scraper that sends too much or
//! nothing at all holds the thread for at most [`Limits::request_time`].

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a Prometheus 2.x scraper asks for first: the text format, version 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How often the accept loop looks at its stop flag when nobody connects.
const POLL: Duration = Duration::from_millis(25);

/// What one connection may cost the server.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The request line and headers (a scrape's are a few hundred bytes).
    pub request_bytes: usize,
    /// From accept to the end of the request's headers.
    pub request_time: Duration,
    /// Writing the response to a scraper that does not read.
    pub write_time: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            request_bytes: 8192,
            request_time: Duration::from_secs(2),
            write_time: Duration::from_secs(5),
        }
    }
}

/// The text the server answers with, replaced once per interval, and whether its last
/// version (the run's final figures) has been served to a scraper.
#[derive(Default)]
pub struct Page {
    state: Mutex<PageState>,
    served: Condvar,
}

#[derive(Default)]
struct PageState {
    text: String,
    last: bool,
    last_served: bool,
    /// Nobody waits for the last version to be served any more.
    released: bool,
}

impl Page {
    fn lock(&self) -> MutexGuard<'_, PageState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Serves `text` from now on (and hands the previous text back in it, to be reused);
    /// `last`: no version will follow.
    pub fn publish(&self, text: &mut String, last: bool) {
        let mut st = self.lock();
        std::mem::swap(&mut st.text, text);
        st.last = last;
    }

    /// Waits until the last version has been served once, at most `limit` and not after
    /// [`Page::release`]; whether it was served.
    pub fn wait_last_served(&self, limit: Duration) -> bool {
        let st = self.lock();
        let (st, _) = self
            .served
            .wait_timeout_while(st, limit, |s| !s.last_served && !s.released)
            .unwrap_or_else(|p| p.into_inner());
        st.last_served
    }

    /// Ends [`Page::wait_last_served`] now, served or not.
    pub fn release(&self) {
        self.lock().released = true;
        self.served.notify_all();
    }

    fn current(&self) -> (String, bool) {
        let st = self.lock();
        (st.text.clone(), st.last)
    }

    fn mark_last_served(&self) {
        self.lock().last_served = true;
        self.served.notify_all();
    }
}

/// The server's thread; dropping it (or [`Server::stop`]) closes the listener.
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Serves `page` on `listener` until stopped.
    pub fn start(listener: TcpListener, page: Arc<Page>, limits: Limits) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        // Non-blocking accepts let the thread see its stop flag without a wake-up call.
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("spate-metrics".into())
            .spawn(move || accept_loop(&listener, &page, limits, &flag))?;
        Ok(Server {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, lets the connection in hand finish (within its limits), and closes
    /// the listener.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(listener: &TcpListener, page: &Page, limits: Limits, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            // A scraper's failure (reset, timeout) is its own: the next one is served.
            Ok((stream, _)) => {
                let _ = answer(stream, page, limits);
            }
            // Nobody waiting, or no descriptor left for one (EMFILE): look again shortly.
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

/// What a request asks for, as far as this server cares.
#[derive(Debug, PartialEq, Eq)]
enum Ask {
    Metrics { head: bool },
    NotFound,
    Method,
    Bad,
}

/// Reads one request and answers it; the connection closes when `stream` drops.
fn answer(mut stream: TcpStream, page: &Page, limits: Limits) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(limits.write_time))?;
    let Some(head) = read_head(&mut stream, limits)? else {
        return Ok(()); // Too slow or gone: nothing is owed.
    };
    let ask = head.map_or(Ask::Bad, |h| route(&h));
    let response = match ask {
        Ask::Metrics { head } => {
            let (text, last) = page.current();
            stream.write_all(&response_head("200 OK", CONTENT_TYPE, text.len()))?;
            if !head {
                stream.write_all(text.as_bytes())?;
                if last {
                    page.mark_last_served();
                }
            }
            return stream.flush();
        }
        Ask::NotFound => ("404 Not Found", "not found: the metrics are at /metrics\n"),
        Ask::Method => ("405 Method Not Allowed", "only GET and HEAD\n"),
        Ask::Bad => ("400 Bad Request", "bad request\n"),
    };
    let (status, body) = response;
    let mut out = response_head(status, "text/plain; charset=utf-8", body.len());
    out.extend_from_slice(body.as_bytes());
    stream.write_all(&out)?;
    stream.flush()
}

pub(crate) fn response_head(status: &str, content_type: &str, len: usize) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len}\r\n\
         Connection: close\r\nCache-Control: no-store\r\n\r\n"
    )
    .into_bytes()
}

/// The request's head (request line and headers) within the limits: `Ok(None)` when the
/// client closed or ran out of time first, `Some(Err(()))` when it sent more than the
/// byte budget or not text.
pub(crate) fn read_head(
    stream: &mut TcpStream,
    limits: Limits,
) -> std::io::Result<Option<Result<String, ()>>> {
    Ok(read_head_and_more(stream, limits)?.map(|r| r.map(|(head, _)| head)))
}

/// A request's head and the bytes read past it (the start of a body); `Err` when it was
/// more than the budget or not text.
pub(crate) type Head = Result<(String, Vec<u8>), ()>;

/// [`read_head`], and the bytes read past the head.
pub(crate) fn read_head_and_more(
    stream: &mut TcpStream,
    limits: Limits,
) -> std::io::Result<Option<Head>> {
    let deadline = Instant::now() + limits.request_time;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        stream.set_read_timeout(Some(left))?;
        let n = match stream.read(&mut chunk) {
            Ok(0) => return Ok(None),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = head_end(&buf) {
            let skip = if buf[end..].starts_with(b"\r\n\r\n") {
                4
            } else {
                2
            };
            let more = buf[(end + skip).min(buf.len())..].to_vec();
            buf.truncate(end);
            return Ok(Some(
                String::from_utf8(buf).map(|h| (h, more)).map_err(|_| ()),
            ));
        }
        if buf.len() >= limits.request_bytes {
            return Ok(Some(Err(())));
        }
    }
}

/// Where the head ends: at the first empty line (CRLF CRLF, or bare LFs).
fn head_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n");
    let lf = buf.windows(2).position(|w| w == b"\n\n");
    crlf.into_iter().chain(lf).min()
}

/// `GET /metrics HTTP/1.1` (a query string is ignored) → the metrics.
fn route(head: &str) -> Ask {
    let line = head.lines().next().unwrap_or("");
    let mut words = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Ask::Bad;
    };
    if !version.starts_with("HTTP/1.") {
        return Ask::Bad;
    }
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => Ask::Metrics { head: false },
        ("HEAD", "/metrics") => Ask::Metrics { head: true },
        ("GET" | "HEAD", _) => Ask::NotFound,
        _ => Ask::Method,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let ask = |h: &str| route(h);
        assert_eq!(
            ask("GET /metrics HTTP/1.1\r\nHost: x\r\n"),
            Ask::Metrics { head: false }
        );
        assert_eq!(
            ask("GET /metrics?x=1 HTTP/1.0"),
            Ask::Metrics { head: false }
        );
        assert_eq!(ask("HEAD /metrics HTTP/1.1"), Ask::Metrics { head: true });
        assert_eq!(ask("GET / HTTP/1.1"), Ask::NotFound);
        assert_eq!(ask("GET /metricsx HTTP/1.1"), Ask::NotFound);
        assert_eq!(ask("POST /metrics HTTP/1.1"), Ask::Method);
        assert_eq!(ask("GET /metrics"), Ask::Bad);
        assert_eq!(ask("GET /metrics SPDY/3"), Ask::Bad);
        assert_eq!(ask(""), Ask::Bad);
    }

    #[test]
    fn head_ends_at_the_first_empty_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nrest"), Some(20));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(14));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n"), None);
    }

    fn exchange(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(request).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    fn server(limits: Limits) -> (Server, Arc<Page>) {
        let page = Arc::new(Page::default());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        (Server::start(listener, page.clone(), limits).unwrap(), page)
    }

    #[test]
    fn serves_the_page_and_nothing_else() {
        let (server, page) = server(Limits::default());
        let addr = server.local_addr();
        page.publish(&mut "a_total 1\n".to_string(), false);
        let r = exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(
            r.contains(&format!("Content-Type: {CONTENT_TYPE}\r\n")),
            "{r}"
        );
        assert!(r.contains("Content-Length: 10\r\n"), "{r}");
        assert!(r.ends_with("\r\n\r\na_total 1\n"), "{r}");
        let r = exchange(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(
            r.ends_with(
                "Content-Length: 10\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n"
            ),
            "{r}"
        );
        assert!(exchange(addr, b"GET /other HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
        assert!(exchange(addr, b"DELETE /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405 "));
        assert!(exchange(addr, b"\x00\xff garbage\r\n\r\n").starts_with("HTTP/1.1 400 "));
    }

    #[test]
    fn the_last_version_is_known_to_be_served() {
        let (server, page) = server(Limits::default());
        let addr = server.local_addr();
        page.publish(&mut "x 1\n".to_string(), false);
        exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(!page.wait_last_served(Duration::from_millis(10)));
        page.publish(&mut "x 2\n".to_string(), true);
        exchange(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(!page.wait_last_served(Duration::from_millis(10)));
        assert!(exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n").ends_with("x 2\n"));
        assert!(page.wait_last_served(Duration::from_secs(10)));
    }

    #[test]
    fn a_release_ends_the_wait_for_a_scrape() {
        let page = Arc::new(Page::default());
        page.publish(&mut "x 2\n".to_string(), true);
        let other = page.clone();
        let releaser = std::thread::spawn(move || other.release());
        let started = Instant::now();
        assert!(!page.wait_last_served(Duration::from_secs(60)));
        assert!(started.elapsed() < Duration::from_secs(30));
        releaser.join().unwrap();
    }

    #[test]
    fn hostile_clients_are_cut_off() {
        let limits = Limits {
            request_bytes: 256,
            request_time: Duration::from_millis(300),
            write_time: Duration::from_secs(1),
        };
        let (server, page) = server(limits);
        let addr = server.local_addr();
        page.publish(&mut "x 1\n".to_string(), false);
        // Too much: refused once the budget is spent, long before the client stops.
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(&[b'a'; 4096]);
        let mut out = String::new();
        // The answer is a 400, unless the reset that closing on unread bytes sends
        // overtakes it.
        let read = s.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 400 ") || read.is_err(), "{out}");
        // Too slow: a client that never ends its request is closed on after the time
        // budget, without an answer, and the next one is served.
        let started = Instant::now();
        let mut slow = TcpStream::connect(addr).unwrap();
        slow.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        slow.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
        let mut out = Vec::new();
        assert_eq!(slow.read_to_end(&mut out).unwrap(), 0);
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n").ends_with("x 1\n"));
    }

    #[test]
    fn stopping_closes_the_listener() {
        let (mut server, _page) = server(Limits::default());
        let addr = server.local_addr();
        server.stop();
        assert!(TcpStream::connect(addr).is_err());
    }
}
