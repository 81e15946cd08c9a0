//! What a waiting IMAP session costs `spate serve`, counted by the allocator rather than
//! read from RSS: the heap bytes the server holds for N sessions that each logged in as a
//! user of their own, selected INBOX and wait in IDLE (issue #18: at most 8 KiB each).
//! The clients are plain blocking sockets on the test's thread that allocate nothing
//! while they are counted; the server's threads are counted whole.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::counting::read_until;
use spate::serve;

#[global_allocator]
static A: common::counting::Counting = common::counting::Counting;

/// A session of user `i` in IDLE on its INBOX.
fn idle_session(addr: std::net::SocketAddr, i: usize, s: &mut Option<TcpStream>) {
    let mut t = TcpStream::connect(addr).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    read_until(&mut t, b"* OK");
    let mut cmd = [0u8; 96];
    let n = {
        let mut w = &mut cmd[..];
        write!(w, "a LOGIN user{i}@example.test pw\r\n").unwrap();
        96 - w.len()
    };
    t.write_all(&cmd[..n]).unwrap();
    read_until(&mut t, b"a OK");
    t.write_all(b"b SELECT INBOX\r\n").unwrap();
    read_until(&mut t, b"b OK");
    t.write_all(b"c IDLE\r\n").unwrap();
    read_until(&mut t, b"+ ");
    *s = Some(t);
}

#[test]
fn an_imap_session_in_idle_costs_the_server_little() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut cfg = serve::Config::loopback();
    cfg.listen.smtp = None;
    cfg.listen.imap = Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    let server = rt.block_on(serve::start(cfg)).unwrap();
    let addr = server.addrs.imap.unwrap();
    let n = 300;
    let mut sessions: Vec<Option<TcpStream>> = (0..n + 20).map(|_| None).collect();
    // Warm up: the store's and the runtime's one-off structures.
    for (i, s) in sessions[n..].iter_mut().enumerate() {
        idle_session(addr, 100_000 + i, s);
    }
    std::thread::sleep(Duration::from_millis(200));
    let live0 = common::counting::live();
    for (i, s) in sessions[..n].iter_mut().enumerate() {
        idle_session(addr, i, s);
    }
    std::thread::sleep(Duration::from_millis(300));
    let per = (common::counting::live() - live0) as f64 / n as f64;
    eprintln!("spate serve: {per:.0} bytes per IMAP session in IDLE");
    // Each session still answers: DONE ends its IDLE.
    for s in sessions.iter_mut().take(5) {
        let t = s.as_mut().unwrap();
        t.write_all(b"DONE\r\n").unwrap();
        read_until(t, b"c OK");
    }
    assert!(
        per <= 8192.0,
        "{per:.0} bytes per IMAP session in IDLE (at most 8 KiB)"
    );
    drop(sessions);
    rt.block_on(server.shutdown());
}
