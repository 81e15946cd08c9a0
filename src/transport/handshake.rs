//! What the kernel knows about a connection's TCP handshake (`TCP_INFO`): asked once
//! when a connect completes (did it, how long its SYN took to be answered, how many SYNs
//! it sent again), and on the slow path (a connect or a first read that timed out).
//! It tells a server whose accept queue overflowed from a slow one. When a listener's
//! queue is full, Linux drops the SYN (this side retransmits it after 1 s, 3 s, ...), or,
//! with `tcp_abort_on_overflow` = 0, the handshake's last ACK (the server retransmits its
//! SYN/ACK and never hears our data): the connection looks open here, and the server's
//! greeting never comes. When its queue of half-open connections is full too, the server
//! answers with SYN cookies and keeps no state: it sends no SYN/ACK again, and what is
//! left to see here is that our SYN had to be sent again.

use std::os::fd::RawFd;

/// The head of the kernel's `struct tcp_info` (linux/tcp.h) up to `tcpi_segs_in`
/// (Linux 4.2). glibc's copy, which the libc crate follows, stops before the byte and
/// segment counts.
#[repr(C)]
#[derive(Default)]
struct TcpInfo {
    /// state, ca_state, retransmits, probes, backoff, options, wscale, flags.
    head: [u8; 8],
    /// rto .. total_retrans.
    words: [u32; 24],
    pacing_rate: u64,
    max_pacing_rate: u64,
    bytes_acked: u64,
    bytes_received: u64,
    segs_out: u32,
    segs_in: u32,
}

/// The part of `TCP_INFO` that tells how a handshake went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Handshake {
    /// The connection's TCP state (linux/tcp_states.h: 1 established, 2 SYN sent, 7
    /// closed).
    pub state: u8,
    /// The smoothed round trip in µs; right after the handshake, its one sample: SYN
    /// sent to SYN/ACK received.
    pub rtt_us: u32,
    /// Segments this side retransmitted (SYNs included).
    pub total_retrans: u32,
    /// Bytes of ours the server acknowledged (1 for the SYN alone).
    pub bytes_acked: u64,
    pub bytes_received: u64,
    /// Segments received (the SYN/ACK is the first).
    pub segs_in: u32,
}

/// Asks the kernel (one getsockopt); None when it cannot tell.
pub fn read(fd: RawFd) -> Option<Handshake> {
    let mut info = TcpInfo::default();
    let mut len = std::mem::size_of::<TcpInfo>() as libc::socklen_t;
    // SAFETY: `info` is a plain C struct of `len` bytes that outlives the call; the
    // kernel writes at most `len` bytes and says how many.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut TcpInfo).cast(),
            &mut len,
        )
    };
    if rc != 0 || (len as usize) < std::mem::size_of::<TcpInfo>() {
        return None;
    }
    Some(Handshake {
        state: info.head[0],
        rtt_us: info.words[15],
        total_retrans: info.words[23],
        bytes_acked: info.bytes_acked,
        bytes_received: info.bytes_received,
        segs_in: info.segs_in,
    })
}

/// TCP states (linux/tcp_states.h) a connect that has not completed is in.
const SYN_SENT: u8 = 2;
const CLOSE: u8 = 7;

impl Handshake {
    /// The connect has completed (the connection may have been closed since).
    pub fn connected(&self) -> bool {
        !matches!(self.state, SYN_SENT | CLOSE)
    }

    /// A connection open on this side that never heard from the server: the server did
    /// not complete the handshake (its accept queue was full when our last ACK came) when
    /// it sent its SYN/ACK again, or when it acknowledged none of our data and we had to
    /// send it again. `syn_retransmits` are the connect's own retransmits, not counted.
    pub fn unaccepted(&self, syn_retransmits: u32) -> bool {
        self.bytes_received == 0
            && self.bytes_acked <= 1
            && (self.segs_in >= 2 || self.total_retrans > syn_retransmits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(total_retrans: u32, bytes_acked: u64, bytes_received: u64, segs_in: u32) -> Handshake {
        Handshake {
            state: 1,
            rtt_us: 0,
            total_retrans,
            bytes_acked,
            bytes_received,
            segs_in,
        }
    }

    #[test]
    fn a_repeated_syn_ack_or_unacknowledged_data_means_the_server_never_accepted() {
        // The SYN/ACK came twice, nothing else: our last ACK was dropped.
        assert!(h(0, 1, 0, 2).unaccepted(0));
        // We sent data (an XMPP stream header) and had to send it again, unacknowledged.
        assert!(h(2, 1, 0, 1).unaccepted(0));
        // A connect that needed a SYN retransmit, then a silent but accepted connection.
        assert!(!h(1, 1, 0, 1).unaccepted(1));
        // A server that took the connection and is silent: one SYN/ACK, nothing else.
        assert!(!h(0, 1, 0, 1).unaccepted(0));
        // A server whose kernel acknowledged our data (accepted, application slow).
        assert!(!h(0, 40, 0, 2).unaccepted(0));
        // A server that spoke.
        assert!(!h(0, 1, 120, 3).unaccepted(0));
    }

    #[test]
    fn the_kernel_fills_the_counts_in() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        use std::os::fd::AsRawFd;
        let h = read(c.as_raw_fd()).expect("TCP_INFO");
        assert_eq!(h.segs_in, 1, "{h:?}");
        assert_eq!(h.bytes_acked, 1, "{h:?}");
        assert_eq!(h.total_retrans, 0);
        assert_eq!(h.state, 1, "established");
        assert!(h.rtt_us > 0, "the handshake's round trip");
        assert!(!h.unaccepted(0));
    }
}
