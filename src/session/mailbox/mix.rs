//! The client mix of an IMAP visit beyond reading: APPEND of a generated message, COPY
//! and MOVE to another mailbox (created when the server answers `[TRYCREATE]`), SEARCH by
//! a window of dates and by a header, FETCH BODYSTRUCTURE and then one part of it. Each
//! command is a phase of its own; each answer is checked against what the protocol
//! promises (search hits within the mailbox, a structure that parses, a part of the size
//! the structure gave, the EXPUNGE a MOVE owes), and a server that breaks a promise
//! fails the visit as a protocol error of that command.

use std::sync::Arc;
use std::time::SystemTime;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::client::{ClientError, Imap};
use super::{failure, step, Spread, Visit};
use crate::engine::UnitReport;
use crate::message::{Builder, Built, Factory};
use crate::metrics::Phase;
use crate::proto::imap_client::{command as imap_cmd, structure, Untagged};
use crate::session::Failure;
use crate::transport::TransportError;

/// What the mix asks of the visits (percentages 0..=100).
#[derive(Default)]
pub struct Mix {
    /// Share of visits that APPEND one message to INBOX.
    pub append: u8,
    pub append_flags: String,
    /// The messages APPEND sends; present when `append` > 0. Its recipient pool is the
    /// accounts, in the same order, so a message's To is the mailbox it goes into.
    pub messages: Option<Arc<Factory>>,
    /// Shares of touched messages copied / moved (moves: of those not deleted).
    pub copy: u8,
    pub moves: u8,
    pub to_mailbox: String,
    /// Shares of visits that search by date (SINCE today-days BEFORE tomorrow) and by
    /// header (Subject and From in turn, for `search_text`).
    pub search_date: u8,
    pub search_days: u32,
    pub search_header: u8,
    pub search_text: String,
    /// Share of touched messages whose BODYSTRUCTURE is fetched, then one of its parts.
    pub structure: u8,
    /// Behave as a client without MOVE / without LITERAL+ (`--without`).
    pub without_move: bool,
    pub without_literal_plus: bool,
}

impl Mix {
    /// Whether a visit needs the logged-in capabilities (LITERAL+ for APPEND, MOVE).
    pub fn needs_capabilities(&self) -> bool {
        self.append > 0 || self.moves > 0
    }
}

/// True for exactly `pct` of the run's visits, spread evenly by sequence number.
pub fn share(seq: u64, pct: u8) -> bool {
    let p = u64::from(pct);
    (seq + 1) * p / 100 > seq * p / 100
}

/// How many visits before `seq` [`share`] chose (for a chosen one: its index among them).
pub fn chosen_before(seq: u64, pct: u8) -> u64 {
    seq * u64::from(pct) / 100
}

/// A session's own state for the mix, kept from visit to visit: the spreads over touched
/// messages, the rng that picks parts, the message builder and its buffers.
pub struct State {
    rng: SmallRng,
    copy: Spread,
    moves: Spread,
    structure: Spread,
    builder: Option<Builder>,
    built: Built,
    wire: Vec<u8>,
    message: Vec<u8>,
}

impl State {
    pub fn new(mix: &Mix, mut rng: SmallRng, id: usize) -> Self {
        let builder_rng = SmallRng::seed_from_u64(rng.random());
        State {
            rng,
            copy: Spread::default(),
            moves: Spread::default(),
            structure: Spread::default(),
            builder: mix.messages.as_ref().map(|f| f.builder(builder_rng, id)),
            built: Built::default(),
            wire: Vec::new(),
            message: Vec::new(),
        }
    }
}

/// Where the message a visit works on is, as message numbers shift under EXPUNGE
/// responses (a MOVE's own, or another session's).
#[derive(Debug, Clone, Copy)]
pub struct Position {
    pub at: u32,
    /// The message at `at` was expunged.
    pub gone: bool,
}

impl Position {
    pub fn first() -> Self {
        Position { at: 1, gone: false }
    }

    /// Takes note of an untagged response.
    pub fn saw(&mut self, u: &Untagged<'_>) {
        if let Untagged::Expunge(n) = *u {
            if n < self.at {
                self.at -= 1;
            } else if n == self.at {
                // (Again, if already gone: the next message took the number and went too.)
                self.gone = true;
            }
        }
    }

    /// On to the next message.
    pub fn advance(&mut self) {
        if !self.gone {
            self.at += 1;
        }
        self.gone = false;
    }
}

/// The server broke a promise of the protocol: a failure of `phase`, connection unusable.
fn broken(phase: Phase, what: String) -> Failure {
    Failure::transport(phase, TransportError::Protocol(what))
}

/// SEARCH `cmd` as `phase`; counts the hits, each a message number of the mailbox.
pub async fn search(
    m: &mut Imap,
    phase: Phase,
    cmd: &[u8],
    r: &mut UnitReport,
) -> Result<u64, Failure> {
    let (mut hits, mut max) = (0u64, 0u32);
    let run = m.command(cmd, |u| {
        if let Untagged::Search(h) = u {
            hits += h.len() as u64;
            max = h.iter().copied().fold(max, u32::max);
        }
    });
    step(r, phase, run).await?;
    if max > m.exists || hits > u64::from(m.exists) {
        return Err(broken(
            phase,
            format!(
                "SEARCH answered messages the mailbox does not hold: {hits} hits up to message {max} in a mailbox of {}",
                m.exists
            ),
        ));
    }
    r.counters.count(super::phase::SEARCH_HITS, hits);
    Ok(hits)
}

/// The visit's searches, right after SELECT.
pub async fn searches(
    mix: &Mix,
    seq: u64,
    m: &mut Imap,
    r: &mut UnitReport,
) -> Result<(), Failure> {
    if share(seq, mix.search_date) {
        let today = chrono::Utc::now().date_naive();
        let since = today - chrono::Days::new(u64::from(mix.search_days));
        let cmd = imap_cmd::search_dates(since, today + chrono::Days::new(1));
        search(m, super::phase::SEARCH_DATE, cmd.as_bytes(), r).await?;
    }
    if share(seq, mix.search_header) {
        // Subject and From in turn over the run's header searches.
        let field = match chosen_before(seq, mix.search_header) % 2 {
            0 => "Subject",
            _ => "From",
        };
        let cmd = imap_cmd::search_header(field, &mix.search_text);
        search(m, super::phase::SEARCH_HEADER, &cmd, r).await?;
    }
    Ok(())
}

/// The mix's work on one touched message (after its FETCH and flags): structure and a
/// part, a copy, a move (unless `deleting`).
pub(super) async fn message(
    mix: &Mix,
    st: &mut State,
    m: &mut Imap,
    pos: &mut Position,
    deleting: bool,
    visit: &mut Visit,
    r: &mut UnitReport,
) -> Result<(), Failure> {
    if st.structure.next(mix.structure) {
        structure_and_part(m, pos, &mut st.rng, r).await?;
    }
    if st.copy.next(mix.copy) {
        let cmd = imap_cmd::copy(pos.at, &mix.to_mailbox, false);
        let t = r.start(super::phase::COPY);
        to_mailbox(m, &mix.to_mailbox, &cmd, super::phase::COPY, pos, r).await?;
        r.timed(super::phase::COPY, t);
    }
    if !deleting && st.moves.next(mix.moves) {
        move_message(mix.without_move, m, &mix.to_mailbox, pos, visit, r).await?;
    }
    Ok(())
}

/// FETCH BODYSTRUCTURE, then BODY.PEEK[section] of a part chosen at random from it; the
/// part must come back as the section asked for, of the size the structure gave.
async fn structure_and_part(
    m: &mut Imap,
    pos: &mut Position,
    rng: &mut SmallRng,
    r: &mut UnitReport,
) -> Result<(), Failure> {
    let n = pos.at;
    let mut parsed = None;
    let cmd = imap_cmd::fetch_structure(n);
    let run = m.command(cmd.as_bytes(), |u| {
        pos.saw(u);
        if let Untagged::Fetch(k, f) = u {
            if let (true, Some(s)) = (*k == n, f.structure) {
                parsed = Some(structure::parts(s));
            }
        }
    });
    step(r, super::phase::STRUCTURE, run).await?;
    let parts = match parsed {
        Some(Ok(p)) => p,
        Some(Err(e)) => return Err(broken(super::phase::STRUCTURE, e.to_string())),
        None => {
            return Err(broken(
                super::phase::STRUCTURE,
                format!("FETCH (BODYSTRUCTURE) returned none: FETCH {n} (BODYSTRUCTURE)"),
            ))
        }
    };
    let part = &parts[rng.random_range(0..parts.len())];
    let want = format!("BODY[{}]", part.section);
    let mut got: Option<Result<usize, String>> = None;
    let cmd = imap_cmd::fetch_part(n, &part.section);
    let run = m.command(cmd.as_bytes(), |u| {
        pos.saw(u);
        if let Untagged::Fetch(k, f) = u {
            if let (true, Some((name, body))) = (*k == n, f.body) {
                got = Some(if name.eq_ignore_ascii_case(&want) {
                    Ok(body.len())
                } else {
                    Err(name.to_string())
                });
            }
        }
    });
    step(r, super::phase::PART, run).await?;
    match got {
        Some(Ok(len)) if len as u64 == part.size => Ok(()),
        Some(Ok(len)) => Err(broken(
            super::phase::PART,
            format!(
                "a body part's size differs from its BODYSTRUCTURE: {want} of message {n} is {len} bytes; its BODYSTRUCTURE said {}",
                part.size
            ),
        )),
        Some(Err(name)) => Err(broken(
            super::phase::PART,
            format!("the server answered another body part: asked for {want} of message {n}, got {name}"),
        )),
        None => Err(broken(
            super::phase::PART,
            format!("FETCH of a body part returned no body: FETCH {n} ({want})"),
        )),
    }
}

/// MOVE when the server has it; else COPY, STORE \Deleted and EXPUNGE as one phase (the
/// EXPUNGE also removes what the visit had flagged \Deleted before: counted deleted).
/// Either way the message must be expunged by the time the server says OK.
async fn move_message(
    without_move: bool,
    m: &mut Imap,
    mailbox: &str,
    pos: &mut Position,
    visit: &mut Visit,
    r: &mut UnitReport,
) -> Result<(), Failure> {
    let n = pos.at;
    let native = m.has_capability("MOVE") && !without_move;
    let phase = if native {
        super::phase::MOVE
    } else {
        super::phase::MOVE_EMULATED
    };
    let t = r.start(phase);
    let cmd = imap_cmd::copy(n, mailbox, native);
    to_mailbox(m, mailbox, &cmd, phase, pos, r).await?;
    if !native {
        let store = imap_cmd::add_flag(n, "\\Deleted");
        let rest = async {
            m.command(store.as_bytes(), |u| pos.saw(u)).await?;
            m.command(imap_cmd::EXPUNGE, |u| pos.saw(u)).await
        };
        rest.await.map_err(|e| failure(phase, e))?;
        r.counters.count(
            super::phase::DELETED,
            std::mem::take(&mut visit.pending_deletes),
        );
    }
    r.timed(phase, t);
    if !pos.gone {
        return Err(broken(
            phase,
            format!("a moved message was not expunged: message {n} was moved but no EXPUNGE of it came back"),
        ));
    }
    Ok(())
}

/// COPY or MOVE `cmd` to `mailbox` (the caller times it as `phase`); after `NO
/// [TRYCREATE]` the mailbox is created (the `create` phase, inside the caller's) and the
/// command tried once more.
async fn to_mailbox(
    m: &mut Imap,
    mailbox: &str,
    cmd: &[u8],
    phase: Phase,
    pos: &mut Position,
    r: &mut UnitReport,
) -> Result<(), Failure> {
    match m.command(cmd, |u| pos.saw(u)).await {
        Ok(_) => Ok(()),
        Err(e) if trycreate(&e) => {
            create(m, mailbox, r).await?;
            let again = m.command(cmd, |u| pos.saw(u)).await;
            again.map(|_| ()).map_err(|e| failure(phase, e))
        }
        Err(e) => Err(failure(phase, e)),
    }
}

fn trycreate(e: &ClientError) -> bool {
    matches!(e, ClientError::Server { status: "NO", text } if text.starts_with("[TRYCREATE]"))
}

fn already_exists(e: &ClientError) -> bool {
    matches!(e, ClientError::Server { status: "NO", text } if text.starts_with("[ALREADYEXISTS]"))
}

/// CREATE `mailbox`; another session having just created it (`[ALREADYEXISTS]`) is fine.
async fn create(m: &mut Imap, mailbox: &str, r: &mut UnitReport) -> Result<(), Failure> {
    let t = r.start(super::phase::CREATE);
    match m.command(&imap_cmd::create(mailbox), |_| {}).await {
        Ok(_) => {
            r.timed(super::phase::CREATE, t);
            Ok(())
        }
        Err(e) if already_exists(&e) => Ok(()),
        Err(e) => Err(failure(super::phase::CREATE, e)),
    }
}

/// APPEND one generated message to INBOX, for visit `seq` to account `acct`.
pub async fn append(
    mix: &Mix,
    st: &mut State,
    seq: u64,
    acct: usize,
    m: &mut Imap,
    r: &mut UnitReport,
) -> Result<(), Failure> {
    let Some(builder) = st.builder.as_mut() else {
        return Ok(());
    };
    st.built.from = 0;
    st.built.rcpts.clear();
    st.built.rcpts.push(acct as u32);
    st.wire.clear();
    let now_us = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    builder.build(seq, now_us, &mut st.built, &mut st.wire);
    let message = match st.built.chunk(&st.wire) {
        Some(msg) => msg,
        None => {
            st.message.clear();
            let wire = st.wire.strip_suffix(b".\r\n").unwrap_or(&st.wire);
            crate::proto::dot::unstuff(wire, &mut st.message);
            &st.message
        }
    };
    let literal_plus = !mix.without_literal_plus;
    let run = m.append("INBOX", &mix.append_flags, message, literal_plus, |_| {});
    step(r, super::phase::APPEND, run).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_is_exact_over_the_run_and_alternates() {
        for pct in [0u8, 1, 20, 50, 99, 100] {
            let chosen: Vec<u64> = (0..300).filter(|&s| share(s, pct)).collect();
            assert_eq!(chosen.len(), 3 * pct as usize, "{pct}");
            for (i, &s) in chosen.iter().enumerate() {
                assert_eq!(chosen_before(s, pct), i as u64, "{pct} {s}");
            }
        }
    }

    /// In a POP3/IMAP run the IMAP visits number themselves 0, 1, 2, ... (the mix's
    /// shares are then exact over them, not aliased with the IMAP share: at 50 % IMAP and
    /// 50 % APPEND, half the IMAP visits append, not all of them).
    #[test]
    fn imap_visits_have_their_own_sequence() {
        for imap in [30u8, 50, 100] {
            let seqs: Vec<u64> = (0..200)
                .filter(|&s| share(s, imap))
                .map(|s| chosen_before(s, imap))
                .collect();
            assert_eq!(seqs, (0..2 * u64::from(imap)).collect::<Vec<_>>());
            let appending = seqs.iter().filter(|&&s| share(s, 50)).count();
            assert_eq!(appending, imap as usize, "{imap}");
        }
    }

    #[test]
    fn position_follows_expunges() {
        let mut p = Position::first();
        p.advance();
        p.advance();
        assert_eq!(p.at, 3);
        // Another session expunges message 1: ours is now 2.
        p.saw(&Untagged::Expunge(1));
        assert_eq!((p.at, p.gone), (2, false));
        // A later message goes: no change.
        p.saw(&Untagged::Expunge(5));
        assert_eq!((p.at, p.gone), (2, false));
        // Ours goes (a MOVE): the next message takes its number.
        p.saw(&Untagged::Expunge(2));
        assert_eq!((p.at, p.gone), (2, true));
        p.advance();
        assert_eq!((p.at, p.gone), (2, false));
        p.advance();
        assert_eq!(p.at, 3);
        // An emulated move's EXPUNGE: an earlier \Deleted one, then ours.
        p.saw(&Untagged::Expunge(1));
        p.saw(&Untagged::Expunge(2));
        assert_eq!((p.at, p.gone), (2, true));
    }
}
