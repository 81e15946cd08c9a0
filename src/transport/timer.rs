//! One timer per connection, for waits (reads, writes) that each have their own deadline.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};

/// A connection's one timer. Armed at the first read (or write) that has to wait, and
/// re-armed only when it went off before the current wait's deadline (it was armed for
/// an earlier one's, and deadlines move forward) or is set later than it. A connection's
/// reads then register with the runtime's timer wheel about once per timeout period
/// instead of once per read, a read that finds its bytes costs no timer at all, and a
/// read still times out at exactly its own deadline.
#[derive(Default)]
pub struct WaitTimer(Option<Pin<Box<Sleep>>>);

impl WaitTimer {
    /// After a read or write that has to wait: Ready(()) when `deadline` has passed.
    pub fn poll_until(&mut self, cx: &mut Context<'_>, deadline: Instant) -> Poll<()> {
        let t = self
            .0
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if t.deadline() > deadline {
            t.as_mut().reset(deadline);
        }
        loop {
            match t.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(()) if Instant::now() >= deadline => return Poll::Ready(()),
                // It went off for an earlier read's deadline: this read's is later.
                Poll::Ready(()) => t.as_mut().reset(deadline),
            }
        }
    }

    /// `fut`, bounded by this timer: None when `deadline` passed first. Without a
    /// deadline, `limit` from when `fut` first has to wait: a wait that never has to wait
    /// reads no clock and arms no timer. The caller pins `fut` (`std::pin::pin!`), so
    /// that a caller's future holds it once: taken by value, it would be stored twice in
    /// this one (as the argument and pinned), in every connection's task.
    pub async fn bound<F: Future + ?Sized>(
        &mut self,
        mut fut: Pin<&mut F>,
        deadline: Option<Instant>,
        limit: std::time::Duration,
    ) -> Option<F::Output> {
        let mut deadline = deadline;
        std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = fut.as_mut().poll(cx) {
                return Poll::Ready(Some(r));
            }
            let d = *deadline.get_or_insert_with(|| Instant::now() + limit);
            self.poll_until(cx, d).map(|()| None)
        })
        .await
    }

    /// Whether a read has armed it (it stays, between reads).
    pub fn is_armed(&self) -> bool {
        self.0.is_some()
    }
}
