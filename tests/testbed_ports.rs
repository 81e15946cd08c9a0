//! The test bed's port checks (scripts/testbed-data/ports.sh) answer at once, even about
//! a listener whose accept queue is full and never drained (an orphaned smtpd after its
//! master was killed): asked by connecting, such a port held `scripts/testbed restart
//! postfix` for 137 s of SYN retries.

mod common;

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::run_blocking;

const PORTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/testbed-data/ports.sh");

/// `port_busy PORT` from the bed's own file: its exit status, or None if it hung.
fn port_busy(port: u16) -> Option<i32> {
    let script = format!(". {PORTS}; port_busy {port}");
    let o = run_blocking("bash", &["-c", &script], &[], Duration::from_secs(30));
    o.code
}

#[test]
fn a_full_accept_queue_is_busy_and_answered_at_once() {
    // A listener with the smallest backlog that never accepts, its queue filled.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    sock.bind(&any.into()).unwrap();
    sock.listen(0).unwrap();
    let addr = sock.local_addr().unwrap().as_socket().unwrap();
    let mut held = Vec::new();
    let mut refused_syn = false;
    for _ in 0..16 {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
            Ok(c) => held.push(c),
            Err(_) => {
                refused_syn = true;
                break;
            }
        }
    }
    assert!(refused_syn, "the accept queue never filled");
    assert_eq!(port_busy(addr.port()), Some(0), "a listening port is busy");
    drop(held);
    drop(sock);
    // Nothing listens there any more.
    assert_eq!(port_busy(addr.port()), Some(1));
}
