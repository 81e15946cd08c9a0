//! Open-model arrivals to sessions: the most recently idle session takes the next
//! arrival (a stack, not a queue), so a light load keeps reusing the few sessions, and
//! their connections, that it needs; sessions deeper in the stack stay unconnected. An
//! arrival that finds no session idle waits in a bounded backlog, which sessions drain
//! before they go idle again.

use std::collections::VecDeque;
use std::sync::Mutex;

use tokio::sync::Notify;

/// An arrival: its sequence number and its scheduled time (µs on the run's clock).
pub type Arrival = (u64, u64);

struct State {
    /// Idle sessions, the most recently idle last. A session is in it from the moment it
    /// finds nothing to do until it is handed an arrival or the dispatch closes, and it
    /// waits for exactly that: so it never looks at the state while listed.
    idle: Vec<usize>,
    /// An arrival handed to a session that has not taken it yet.
    mailbox: Vec<Option<Arrival>>,
    /// Arrivals that found no session idle.
    backlog: VecDeque<Arrival>,
    closed: bool,
}

/// What the scheduler and the open-model sessions share.
pub struct Dispatch {
    state: Mutex<State>,
    wake: Vec<Notify>,
    backlog_max: usize,
}

impl Dispatch {
    pub fn new(sessions: usize, backlog_max: usize) -> Dispatch {
        Dispatch {
            state: Mutex::new(State {
                idle: Vec::with_capacity(sessions),
                mailbox: vec![None; sessions],
                backlog: VecDeque::new(),
                closed: false,
            }),
            wake: (0..sessions).map(|_| Notify::new()).collect(),
            backlog_max,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands out `batch` in order under one lock, each arrival to the most recently idle
    /// session or to the backlog, then wakes the sessions it chose (the runtime unparks a
    /// worker for the first; the rest find it awake). Returns how many arrivals found
    /// the backlog full and were dropped. `woken` is the caller's scratch space, reused
    /// from batch to batch.
    pub fn offer(&self, batch: &[Arrival], woken: &mut Vec<usize>) -> u64 {
        woken.clear();
        let mut dropped = 0;
        let mut st = self.lock();
        for &a in batch {
            if let Some(id) = st.idle.pop() {
                st.mailbox[id] = Some(a);
                woken.push(id);
            } else if st.backlog.len() < self.backlog_max {
                st.backlog.push_back(a);
            } else {
                dropped += 1;
            }
        }
        drop(st);
        for &id in woken.iter() {
            self.wake[id].notify_one();
        }
        dropped
    }

    /// No more arrivals: idle sessions end once the backlog is drained.
    pub fn close(&self) {
        let mut st = self.lock();
        st.closed = true;
        let idle = std::mem::take(&mut st.idle);
        drop(st);
        for id in idle {
            self.wake[id].notify_one();
        }
    }

    /// The end of the run: closes the dispatch and takes every arrival no session took
    /// (handed to a session that ended first, or waiting in the backlog), which the run
    /// must still count.
    pub fn take_unstarted(&self) -> Vec<Arrival> {
        let mut st = self.lock();
        st.closed = true;
        let mut left: Vec<Arrival> = st.mailbox.iter_mut().filter_map(Option::take).collect();
        left.extend(st.backlog.drain(..));
        left
    }

    /// Session `id`'s next arrival: one handed to it, else the oldest in the backlog, else
    /// it waits idle; None once closed and drained.
    pub async fn next(&self, id: usize) -> Option<Arrival> {
        loop {
            {
                let mut st = self.lock();
                if let Some(a) = st.mailbox[id].take().or_else(|| st.backlog.pop_front()) {
                    return Some(a);
                }
                if st.closed {
                    return None;
                }
                st.idle.push(id);
            }
            // Only `offer` and `close` wake it, each after taking it off the list; notify_one
            // keeps a permit when nobody waits yet, so no wake-up is lost between the
            // unlock and this await.
            self.wake[id].notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_most_recently_idle_session_takes_the_next_arrival() {
        let d = std::sync::Arc::new(Dispatch::new(3, 2));
        // Sessions 0, 1, 2 go idle in that order.
        let mut tasks = Vec::new();
        for id in 0..3 {
            let di = d.clone();
            tasks.push(tokio::spawn(async move { (id, di.next(id).await) }));
            while d.lock().idle.len() < id + 1 {
                tokio::task::yield_now().await;
            }
        }
        let w = &mut Vec::new();
        assert_eq!(d.offer(&[(0, 10)], w), 0);
        let (id, got) = tasks.pop().unwrap().await.unwrap();
        assert_eq!((id, got), (2, Some((0, 10))), "the last to go idle");
        // Nobody idle but 0 and 1; two more go to 1, then 0.
        assert_eq!(d.offer(&[(1, 20)], w), 0);
        let (id, got) = tasks.pop().unwrap().await.unwrap();
        assert_eq!((id, got), (1, Some((1, 20))));
        assert_eq!(d.offer(&[(2, 30)], w), 0);
        let (id, got) = tasks.pop().unwrap().await.unwrap();
        assert_eq!((id, got), (0, Some((2, 30))));
        // No session idle: two wait in the backlog, the third is dropped.
        assert_eq!(d.offer(&[(3, 40), (4, 50), (5, 60)], w), 1);
        d.close();
        assert_eq!(
            d.next(1).await,
            Some((3, 40)),
            "the backlog drains in order"
        );
        assert_eq!(d.next(0).await, Some((4, 50)));
        assert_eq!(d.next(0).await, None, "closed and drained");
    }

    #[tokio::test]
    async fn a_batch_goes_to_the_idle_sessions_then_the_backlog() {
        let d = std::sync::Arc::new(Dispatch::new(3, 1));
        let mut tasks = Vec::new();
        for id in 0..2 {
            let di = d.clone();
            tasks.push(tokio::spawn(async move { (id, di.next(id).await) }));
            while d.lock().idle.len() < id + 1 {
                tokio::task::yield_now().await;
            }
        }
        // Two idle sessions, a backlog of one: four arrivals in one batch.
        let mut w = Vec::new();
        assert_eq!(d.offer(&[(0, 10), (1, 11), (2, 12), (3, 13)], &mut w), 1);
        assert_eq!(w, [1, 0], "the most recently idle first, each woken once");
        assert_eq!(tasks.pop().unwrap().await.unwrap(), (1, Some((0, 10))));
        assert_eq!(tasks.pop().unwrap().await.unwrap(), (0, Some((1, 11))));
        assert_eq!(d.next(2).await, Some((2, 12)), "the backlog kept the third");
        d.close();
        assert_eq!(d.next(2).await, None, "the fourth was dropped");
    }

    #[tokio::test]
    async fn closing_ends_every_idle_session() {
        let d = std::sync::Arc::new(Dispatch::new(4, 4));
        let tasks: Vec<_> = (0..4)
            .map(|id| {
                let d = d.clone();
                tokio::spawn(async move { d.next(id).await })
            })
            .collect();
        while d.lock().idle.len() < 4 {
            tokio::task::yield_now().await;
        }
        d.close();
        for t in tasks {
            assert_eq!(t.await.unwrap(), None);
        }
    }
}
