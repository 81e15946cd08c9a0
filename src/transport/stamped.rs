//! A TCP stream whose reads tell when their bytes reached this host: the kernel's
//! receive timestamp of the segment (`SO_TIMESTAMPNS`, taken as the packet is delivered
//! to the socket), handed to the run clock ([`crate::metrics::clock::note_arrival`]).
//! A phase that ends with the server's reply then ends when the reply arrived, not when
//! this thread woke up to read it.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

use crate::metrics::note_arrival;

pub struct Tcp(pub TcpStream);

/// Asks the kernel to timestamp what this socket receives; false when it will not.
pub fn enable(fd: RawFd) -> bool {
    let on: libc::c_int = 1;
    // SAFETY: a c_int option value that outlives the call.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// Keeps the kernel's receive timestamps on for the life of the process, and returns at
/// once. Linux stamps received packets only while some socket asks for stamps; it turns
/// stamping on when the first one asks, and off when the last one closes. Both happen
/// later, from a work queue (the switch is patched into the kernel's code), so the
/// replies of a connection that opens when no other asks carry no stamp until then and
/// are timed to their read. One socket that asks, opened before the first connection and
/// never closed, keeps stamping on across connections that come and go.
pub fn keep_on() {
    static KEEPER: std::sync::OnceLock<Option<std::net::UdpSocket>> = std::sync::OnceLock::new();
    KEEPER.get_or_init(|| {
        let s = std::net::UdpSocket::bind((std::net::Ipv4Addr::LOCALHOST, 0)).ok()?;
        enable(s.as_raw_fd()).then_some(s)
    });
}

/// Room for one `SCM_TIMESTAMPNS` control message (a timespec), 8-byte aligned.
const CONTROL: usize = 64;

/// One `recvmsg` into `buf`: the bytes read and the receive time of the last segment
/// they came in, when the kernel gave one.
fn recv(fd: RawFd, buf: &mut [MaybeUninit<u8>]) -> io::Result<(usize, Option<Instant>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; CONTROL / 8];
    // SAFETY: an all-zero msghdr is valid (no name, no iovecs, no control).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = CONTROL as _;
    // SAFETY: `msg` points at `iov` (over `buf`, writable for its length) and at
    // `control`, both alive for the call; the kernel writes within the lengths given.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut at = None;
    // SAFETY: walking the control messages the kernel wrote, within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                at = since_realtime(ts);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, at))
}

/// A CLOCK_REALTIME instant (the kernel's timestamps) as an `Instant`: how long ago it
/// was, on the wall clock read now, taken from the monotonic clock read now.
fn since_realtime(ts: libc::timespec) -> Option<Instant> {
    let mono = Instant::now();
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) } != 0 {
        return None;
    }
    let ns = |t: libc::timespec| t.tv_sec as i128 * 1_000_000_000 + t.tv_nsec as i128;
    let ago = ns(now) - ns(ts);
    // A stamp from the future (the wall clock stepped back) or from long ago (stepped
    // forward) is not believed.
    if !(0..1_000_000_000_000).contains(&ago) {
        return None;
    }
    mono.checked_sub(Duration::from_nanos(ago as u64))
}

impl AsyncRead for Tcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let tcp = &self.get_mut().0;
        let fd = tcp.as_raw_fd();
        loop {
            ready!(tcp.poll_read_ready(cx))?;
            // SAFETY: recvmsg only writes initialised bytes, and only `n` are marked so.
            let unfilled = unsafe { buf.unfilled_mut() };
            match tcp.try_io(Interest::READABLE, || recv(fd, unfilled)) {
                Ok((n, at)) => {
                    // SAFETY: the kernel wrote `n` bytes.
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    if let Some(at) = at {
                        note_arrival(at);
                    }
                    return Poll::Ready(Ok(()));
                }
                // Readiness was stale: try_io cleared it; wait again.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for Tcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;

    /// A loopback connection whose client side asks for stamps: (client, server).
    fn stamping_pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        assert!(enable(c.as_raw_fd()));
        let (s, _) = l.accept().unwrap();
        (c, s)
    }

    /// One byte over a loopback connection that asks for stamps: whether it came stamped.
    fn one_stamped_byte() -> bool {
        let (c, mut s) = stamping_pair();
        s.write_all(b"x").unwrap();
        let mut buf = [MaybeUninit::uninit(); 8];
        // On loopback the byte is queued by the time the write returns; wait if not.
        for _ in 0..1000 {
            match recv(c.as_raw_fd(), &mut buf) {
                Ok((1, at)) => return at.is_some(),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                r => panic!("{r:?}"),
            }
        }
        panic!("the byte never came");
    }

    /// Waits (2 s at most) until the kernel stamps what loopback sockets receive: it
    /// turns stamping on some time after the first socket asks (see [`keep_on`]).
    pub(crate) fn wait_for_stamps() {
        keep_on();
        let t0 = Instant::now();
        while !one_stamped_byte() {
            assert!(
                t0.elapsed() < Duration::from_secs(2),
                "the kernel stamps no received segment 2 s after a socket asked"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_received_segment_carries_its_stamp_and_it_is_recent() {
        wait_for_stamps();
        let before = Instant::now();
        let (c, mut s) = stamping_pair();
        s.write_all(b"ab").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let mut buf = [MaybeUninit::uninit(); 8];
        let (n, at) = recv(c.as_raw_fd(), &mut buf).unwrap();
        let read = Instant::now();
        assert_eq!(n, 2);
        let at = at.expect("a stamp");
        // Arrived after the test began and well before the read (20 ms of sleep).
        assert!(
            at >= before - Duration::from_millis(1),
            "stamp before the test"
        );
        assert!(read - at >= Duration::from_millis(15), "{:?}", read - at);
    }

    /// Connections that open and close one after another (one message per connection,
    /// one session): with stamping kept on, the first reply of every one is stamped.
    /// Without the keeper most were not (the kernel turned stamping off as each closed).
    #[test]
    fn the_first_reply_of_every_new_connection_is_stamped() {
        wait_for_stamps();
        let unstamped = (0..200).filter(|_| !one_stamped_byte()).count();
        assert_eq!(unstamped, 0, "of 200 connections");
    }
}
