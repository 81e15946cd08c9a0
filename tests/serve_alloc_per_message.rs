//! What one message costs `spate serve` in heap allocations, counted by the allocator:
//! a client that does not pipeline (smtp-source's way: MAIL, RCPT, DATA and the content
//! each wait for their reply; then the same with one `BDAT n LAST` chunk) sends messages
//! on one kept connection. A session that
//! waits for every command gives its read buffer back each time; the next read takes a
//! spare one, a message's body and its recipient list reuse the buffers of the one
//! before, so a message costs 2 allocations (the sender's and the recipient's address,
//! which the transaction keeps); it cost 8 before the last of these cuts.
//! The client is a blocking socket on the test's thread that allocates nothing.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::counting::read_until;
use spate::serve;

#[global_allocator]
static A: common::counting::Counting = common::counting::Counting;

/// One message, each command waiting for its reply: its content after DATA (`body`
/// ends with the final dot), or with `bdat` as one `BDAT n LAST` chunk (the content
/// without the dot).
fn message(s: &mut TcpStream, body: &[u8], bdat: bool) {
    s.write_all(b"MAIL FROM:<sender@example.test>\r\n").unwrap();
    read_until(s, b"\r\n");
    s.write_all(b"RCPT TO:<user1@example.test>\r\n").unwrap();
    read_until(s, b"\r\n");
    if bdat {
        // The command and its chunk in one write (two would wait on Nagle).
        let content = &body[..body.len() - 3];
        let mut group = [0u8; 2048];
        let n = {
            let mut w = &mut group[..];
            write!(w, "BDAT {} LAST\r\n", content.len()).unwrap();
            w.write_all(content).unwrap();
            2048 - w.len()
        };
        s.write_all(&group[..n]).unwrap();
    } else {
        s.write_all(b"DATA\r\n").unwrap();
        read_until(s, b"\r\n");
        s.write_all(body).unwrap();
    }
    read_until(s, b"\r\n");
}

#[test]
fn a_message_costs_the_server_two_allocations() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut cfg = serve::Config::loopback();
    cfg.store.discard = true;
    let server = rt.block_on(serve::start(cfg)).unwrap();
    let addr = server.addrs.smtp.unwrap();
    // A 1 KB message: 13 lines of 78 characters, then the final dot.
    let mut body = [b'x'; 13 * 80 + 3];
    for line in body.chunks_mut(80).take(13) {
        line[78] = b'\r';
        line[79] = b'\n';
    }
    body[13 * 80..].copy_from_slice(b".\r\n");
    let body = &body[..];
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    read_until(&mut s, b"\r\n");
    s.write_all(b"EHLO client.test\r\n").unwrap();
    read_until(&mut s, b"CRAM-MD5\r\n");
    let n = 1000;
    for bdat in [false, true] {
        for _ in 0..50 {
            message(&mut s, body, bdat);
        }
        let a0 = common::counting::allocs();
        for _ in 0..n {
            message(&mut s, body, bdat);
        }
        let per = (common::counting::allocs() - a0) as f64 / n as f64;
        let how = if bdat { "BDAT" } else { "DATA" };
        eprintln!("spate serve: {per:.2} allocations per message ({how}, no pipelining, 1 KB)");
        assert!(
            per <= 2.5,
            "{how}: {per:.2} allocations per message (at most 2.5)"
        );
    }
    s.write_all(b"QUIT\r\n").unwrap();
    read_until(&mut s, b"\r\n");
    assert_eq!(server.store.delivered(), 2 * 1050);
    rt.block_on(server.shutdown());
}
