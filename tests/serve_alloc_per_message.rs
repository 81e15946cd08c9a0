//! What one message costs `spate serve` in heap allocations, counted by the allocator:
//! a client that does not pipeline (smtp-source's way: MAIL, RCPT, DATA and the content
//! each wait for their reply) sends messages on one kept connection. A session that
//! waits for every command gives its read buffer back each time; the next read takes a
//! spare one, a message's body and its recipient list reuse the buffers of the one
//! before, so a message costs 2 allocations (the sender's and the recipient's address,
//! which the transaction keeps); it cost 8 before the last of these cuts.
//! The client is a blocking socket on the test's thread that allocates nothing.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use spate::serve;

#[global_allocator]
static A: common::counting::Counting = common::counting::Counting;

/// Reads until `want` ends what came (a stack buffer: nothing allocated).
fn until(s: &mut TcpStream, want: &[u8]) {
    let mut buf = [0u8; 1024];
    let mut have = 0;
    loop {
        let n = s.read(&mut buf[have..]).expect("the server answers");
        assert!(n > 0, "the server closed the session");
        have += n;
        if buf[..have].ends_with(want) {
            return;
        }
        assert!(have < buf.len(), "unexpected reply");
    }
}

/// One message, each command waiting for its reply.
fn message(s: &mut TcpStream, body: &[u8]) {
    s.write_all(b"MAIL FROM:<sender@example.test>\r\n").unwrap();
    until(s, b"\r\n");
    s.write_all(b"RCPT TO:<user1@example.test>\r\n").unwrap();
    until(s, b"\r\n");
    s.write_all(b"DATA\r\n").unwrap();
    until(s, b"\r\n");
    s.write_all(body).unwrap();
    until(s, b"\r\n");
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
    until(&mut s, b"\r\n");
    s.write_all(b"EHLO client.test\r\n").unwrap();
    until(&mut s, b"CRAM-MD5\r\n");
    for _ in 0..50 {
        message(&mut s, body);
    }
    let n = 1000;
    let a0 = common::counting::allocs();
    for _ in 0..n {
        message(&mut s, body);
    }
    let per = (common::counting::allocs() - a0) as f64 / n as f64;
    eprintln!("spate serve: {per:.2} allocations per message (no pipelining, 1 KB)");
    s.write_all(b"QUIT\r\n").unwrap();
    until(&mut s, b"\r\n");
    assert_eq!(server.store.delivered(), 1050);
    assert!(per <= 2.5, "{per:.2} allocations per message (at most 2.5)");
    rt.block_on(server.shutdown());
}
