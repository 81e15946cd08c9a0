//! A session's receiving side: every stanza the server pushes (deliveries, bounces,
//! subscription requests, IQs to answer, XEP-0198 requests and acknowledgements), read
//! as it comes, until the stream ends.

use super::*;

/// A session's receiving side.
pub(super) struct Reader {
    pub(super) id: usize,
    pub(super) s: Arc<Settings>,
    pub(super) writer: Arc<Mutex<WriteHalf>>,
    pub(super) alive: Arc<AtomicBool>,
    pub(super) closing: Arc<AtomicBool>,
    pub(super) asked: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    pub(super) replies: Replies,
    pub(super) sm: Option<Arc<sm::Sm>>,
}

impl Reader {
    // An async block over the arguments rather than an async fn: an async fn keeps its
    // moved arguments twice (as arguments and as locals) in every waiting reader's task.
    #[allow(clippy::manual_async_fn)]
    pub(super) fn run(
        self,
        mut rd: ReadHalf,
        mut framer: Framer,
    ) -> impl std::future::Future<Output = ()> {
        async move {
            // Pushed stanzas come when they come: the read waits as long as the run lasts.
            rd.set_timeout(Duration::from_secs(365 * 86_400));
            // ... and holds no read buffer while it waits.
            rd.set_bare_waits(true);
            let end = loop {
                let mut kind = None;
                let got = rd
                    .read_frame(MAX_STANZA, framing(&mut framer, &mut kind))
                    .await;
                let bytes = match got {
                    Ok(b) => b,
                    Err(e) => break Some(Failure::transport(super::phase::ARRIVAL, e)),
                };
                match kind {
                    Some(Frame::Element) => {}
                    Some(Frame::Close) => {
                        break Some(failure(
                            super::phase::ARRIVAL,
                            ErrorKind::CLOSED,
                            "the server closed the stream",
                        ))
                    }
                    _ => continue,
                }
                let e = match Element::parse(bytes) {
                    Ok(e) => e,
                    Err(x) => break Some(login::breach(super::phase::ARRIVAL, x.to_string())),
                };
                if let Some(f) = self.stanza(&e).await {
                    break Some(f);
                }
            };
            self.alive.store(false, Ordering::SeqCst);
            self.s.online[self.id].store(false, Ordering::SeqCst);
            if !self.closing.load(Ordering::SeqCst) {
                // Not spate's own close: what was in flight may have died with it; with
                // stream management, only what the server had not acknowledged.
                match &self.sm {
                    // Resumable: the next login resumes it (or finds it gone).
                    Some(sm) if sm.resumption().is_some() => {}
                    Some(sm) => sm.died(&self.s.ledger),
                    None => self.s.ledger.stream_died(),
                }
            }
            if let Some(f) = end.filter(|_| !self.closing.load(Ordering::SeqCst)) {
                let (key, sample) = (f.key(), f.sample);
                self.s.recorder.with(self.id, |sh| sh.error(key, || sample));
            }
        }
    }

    /// Writes an answer the server asked for (a subscription approval, an IQ result).
    /// Boxed: rare, and inline its write would be part of every waiting reader.
    async fn answer(&self, reply: &str) {
        self.write(reply, true).await;
    }

    /// Writes `text`, a stanza (counted for stream management) or not (`<a/>`).
    async fn write(&self, text: &str, stanza: bool) {
        let (w, sm) = (&self.writer, &self.sm);
        let _ = Box::pin(async move {
            let mut w = w.lock().await;
            if let Some(sm) = sm.as_ref().filter(|_| stanza) {
                sm.sent(None, text.as_bytes());
            }
            match w.is_websocket() {
                true => super::ws_send_elements_half(&mut w, text).await,
                false => w.send(text.as_bytes()).await,
            }
        })
        .await;
    }

    /// Handles one incoming stanza; a stream error ends the session.
    async fn stanza(&self, e: &Element) -> Option<Failure> {
        if self.s.settle.is_some() {
            // Only --settle reads it: no shared counter touched per stanza otherwise.
            self.s.ledger.read_total.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(sm) = &self.sm {
            match e.local_name() {
                "message" | "presence" | "iq" => sm.read(),
                "r" if e.ns() == Some(sm::NS) => {
                    self.write(&sm.answer(), false).await;
                    return None;
                }
                "a" if e.ns() == Some(sm::NS) => {
                    if let Some(h) = sm::h_of(e.attr("h")) {
                        sm.acknowledged(h, &self.s.ledger);
                    }
                    return None;
                }
                _ => {}
            }
        }
        match e.local_name() {
            "presence" if e.attr("type").is_some() => {
                let replies = self.subscription(e).await;
                self.tally(replies);
            }
            "message" if e.attr("type") == Some("error") => self.bounce(e),
            "message" | "presence" => self.delivery(e),
            "iq" if matches!(e.attr("type"), Some("result" | "error")) => {
                let waiting = e
                    .attr("id")
                    .and_then(|id| self.replies.lock().ok().and_then(|mut r| r.remove(id)));
                if let Some(tx) = waiting {
                    let _ = tx.send(e.clone());
                }
                self.tally(0);
            }
            "iq" if matches!(e.attr("type"), Some("get" | "set")) => {
                // A server's ping (XEP-0199) or any request: answer, or it may drop us.
                let mut reply = String::from("<iq type='result' id='");
                xmpp::escape(e.attr("id").unwrap_or(""), &mut reply);
                if let Some(from) = e.attr("from") {
                    reply.push_str("' to='");
                    xmpp::escape(from, &mut reply);
                }
                reply.push_str("'/>");
                self.answer(&reply).await;
                self.tally(1);
            }
            "iq" => self.tally(0),
            "error" if e.name.contains(':') => {
                return Some(login::stated(
                    super::phase::ARRIVAL,
                    super::errors::STREAM,
                    &login::condition(e),
                    e,
                ))
            }
            _ => {}
        }
        None
    }

    /// --roster all: approves a run session's subscription request, and counts the
    /// approvals (or errors) of this session's own requests. Returns the stanzas it wrote.
    async fn subscription(&self, e: &Element) -> u64 {
        if self.s.roster != RosterMode::All {
            return 0;
        }
        let Some(from) = e.attr("from") else { return 0 };
        let bare = from.split('/').next().unwrap_or(from).to_ascii_lowercase();
        match e.attr("type") {
            Some("subscribe") => {
                let mut reply = String::from("<presence type='subscribed' to='");
                xmpp::escape(&bare, &mut reply);
                reply.push_str("'/>");
                self.answer(&reply).await;
                return 1;
            }
            Some(t @ ("subscribed" | "error")) => {
                let was = self
                    .asked
                    .lock()
                    .map(|mut a| a.remove(&bare))
                    .unwrap_or(false);
                if was {
                    self.s.subs_pending.fetch_sub(1, Ordering::SeqCst);
                    let i = usize::from(t == "error");
                    self.s.ledger.roster[i].fetch_add(1, Ordering::SeqCst);
                }
            }
            _ => {}
        }
        0
    }

    /// A stamped stanza of this run from another session is a delivery: timed and entered
    /// in the ledger (the last copy of a fan-out also times the fan-out). Every stanza is
    /// counted in, with one lock of the recorder whatever it is.
    fn delivery(&self, e: &Element) {
        // When the bytes that carried it reached this host.
        let now = self.s.clock.end_us(0);
        let arrival = self.stamped(e).map(|(seq, t, kind)| {
            let took = now.saturating_sub(t).max(1);
            (self.s.ledger.received(seq, kind), kind.phases(), took)
        });
        let by_transport = self
            .s
            .websocket
            .as_ref()
            .and_then(|w| w.arrival_phase(self.id));
        self.s.recorder.with(self.id, |sh| {
            sh.counters.count(super::phase::STANZAS_IN, 1);
            match arrival {
                Some((a @ (Arrival::First | Arrival::Last), (each, last), took)) => {
                    sh.record(each, took);
                    if let Some(p) = by_transport {
                        sh.record(p, took);
                    }
                    sh.counters.count(super::phase::DELIVERED, 1);
                    if let Some(last) = last.filter(|_| a == Arrival::Last) {
                        sh.record(last, took);
                    }
                }
                Some((Arrival::Duplicate, ..)) => sh.counters.count(super::phase::DUPLICATES, 1),
                Some((Arrival::Unknown, ..)) | None => {}
            }
        });
    }

    /// An error bounce of a message this session sent (XMPP servers return the stanza,
    /// stamp included, with an <error/>): its deliveries are refused, counted in the
    /// ledger (not missing) and as a stanza error with its condition.
    fn bounce(&self, e: &Element) {
        let stamp = self
            .stamp_of(e)
            .filter(|s| s.attr("from").and_then(|f| f.parse::<usize>().ok()) == Some(self.id));
        let seq = stamp
            .and_then(|s| s.attr("seq")?.parse::<u64>().ok())
            .or_else(|| e.attr("id")?.strip_prefix(ID_PREFIX)?.parse().ok());
        let Some(seq) = seq else {
            // Not a bounce of this session's: only counted as a stanza.
            return self.tally(0);
        };
        self.s.ledger.bounced(seq);
        let error = e.child("error");
        let cond = error.map(login::condition).unwrap_or_default();
        let kind = super::errors::STANZA;
        self.s.recorder.with(self.id, |sh| {
            sh.counters.count(super::phase::STANZAS_IN, 1);
            {
                let key = ErrorKey {
                    phase: super::phase::ARRIVAL,
                    kind,
                    code: 0,
                    detail: None,
                    text: format!("bounced: {cond}"),
                };
                sh.error(key, || {
                    format!(
                        "the server bounced a message to {} with {cond}",
                        e.attr("from").unwrap_or("?")
                    )
                });
            }
        });
    }

    /// This run's stamp in `e`, whoever sent it.
    fn stamp_of<'a>(&self, e: &'a Element) -> Option<&'a Element> {
        e.children
            .iter()
            .find(|c| c.local_name() == "stamp" && c.namespace(&[e]) == Some(STAMP_NS))
            .filter(|s| s.attr("run") == Some(self.s.run_id.as_str()))
    }

    /// The sequence, scheduled time and kind of a stanza this run stamped, sent by another
    /// session (not another run's, nor this session's own presence coming back to it).
    fn stamped(&self, e: &Element) -> Option<(u64, u64, Traffic)> {
        let stamp = self.stamp_of(e)?;
        if stamp.attr("from").and_then(|f| f.parse::<usize>().ok()) == Some(self.id) {
            return None;
        }
        let seq = stamp.attr("seq")?.parse::<u64>().ok()?;
        let t = stamp.attr("t")?.parse::<u64>().ok()?;
        Some((seq, t, Traffic::from_name(stamp.attr("k").unwrap_or("m"))))
    }

    /// Counts a stanza that is not a delivery, and the replies it took.
    fn tally(&self, replies: u64) {
        self.s.recorder.with(self.id, |sh| {
            sh.counters.count(super::phase::STANZAS_IN, 1);
            sh.counters.count(super::phase::STANZAS_OUT, replies);
        });
    }
}
