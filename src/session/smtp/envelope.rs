//! A message's envelope: MAIL, the RCPTs and DATA, in lockstep (one command, one reply)
//! or pipelined in one write (RFC 2920), and the replies read back, each a phase.

use super::*;

impl Session {
    /// MAIL, RCPTs, DATA. Ok(true) when DATA got 354 with at least one recipient.
    pub(super) async fn envelope(
        &mut self,
        conn: &mut Connection,
        pipelining: bool,
        report: &mut UnitReport,
    ) -> Result<bool, Failure> {
        let f = self.builder.factory();
        let from = &f.from.addrs[self.built.from as usize];
        let size = self
            .caps
            .size
            .is_some()
            .then(|| self.built.len(&self.wire) + DOT.len());
        let notify = self.s.dsn_notify.as_deref().filter(|_| self.caps.dsn);
        self.cmd.clear();
        cmd::mail(&mut self.cmd, from, size);
        let mail_len = self.cmd.len();
        for &r in &self.built.rcpts {
            cmd::rcpt(&mut self.cmd, &f.to.addrs[r as usize], notify);
        }
        self.cmd.extend_from_slice(cmd::DATA);
        let cmd = std::mem::take(&mut self.cmd);
        let result = if pipelining {
            self.pipelined(conn, &cmd, report).await
        } else {
            self.lockstep(conn, &cmd, mail_len, report).await
        };
        self.cmd = cmd;
        result
    }

    /// The envelope as one group (RFC 2920): one write, then the replies in order.
    async fn pipelined(
        &mut self,
        conn: &mut Connection,
        cmd: &[u8],
        report: &mut UnitReport,
    ) -> Result<bool, Failure> {
        let t = report.start(super::phase::ENVELOPE);
        conn.send(cmd)
            .await
            .map_err(|e| Failure::transport(super::phase::ENVELOPE, e))?;
        self.envelope_replies_group(conn, t, super::phase::ENVELOPE, report)
            .await
    }

    /// The replies to an envelope group written at `t`, timed as `phase`: MAIL's, the
    /// RCPTs', DATA's. Ok(true) when DATA got 354 with at least one recipient.
    pub(super) async fn envelope_replies_group(
        &mut self,
        conn: &mut Connection,
        t: u64,
        phase: Phase,
        report: &mut UnitReport,
    ) -> Result<bool, Failure> {
        let tf = |phase| move |e| Failure::transport(phase, e);
        if phase == super::phase::DOT_ENVELOPE {
            report.begun(phase, t);
        }
        let mail_fail = match self.envelope_replies(conn).await {
            Err(f) if phase == super::phase::DOT_ENVELOPE => return Err(behind(f)),
            r => r?,
        };
        let data_ok = {
            let r = read_reply(conn).await.map_err(tf(super::phase::DATA))?;
            match r.code {
                354 => true,
                c if c >= 400 => {
                    if mail_fail.is_none() && !self.rcpts.ok.is_empty() {
                        self.fails.push(refusal(super::phase::DATA, &r));
                    }
                    false
                }
                _ => return Err(unexpected(super::phase::DATA, &r)),
            }
        };
        report.timed(phase, t);
        if let Some(f) = mail_fail {
            if data_ok {
                abort_data(conn).await?;
            }
            return Err(f);
        }
        if data_ok && self.rcpts.ok.is_empty() {
            // RFC 2920: DATA was accepted although no recipient was; send an empty
            // message to get back to a known state.
            abort_data(conn).await?;
            return Ok(false);
        }
        Ok(data_ok)
    }

    /// The replies to a pipelined MAIL and RCPTs: the MAIL refusal, if any (recipients
    /// refused after it are not failures of their own); accepted and refused recipients
    /// are noted. A 421 ends it: the server closes the session and answers nothing more,
    /// and the unit is refused with that reply (not failed by the close that follows).
    pub(super) async fn envelope_replies(
        &mut self,
        conn: &mut Connection,
    ) -> Result<Option<Failure>, Failure> {
        let tf = |phase| move |e| Failure::transport(phase, e);
        let mail_fail = {
            let r = read_reply(conn).await.map_err(tf(super::phase::MAIL))?;
            if r.code == 421 {
                return Err(refusal(super::phase::MAIL, &r));
            }
            (!r.is_positive()).then(|| refusal(super::phase::MAIL, &r))
        };
        for i in 0..self.built.rcpts.len() {
            let r = read_reply(conn).await.map_err(tf(super::phase::RCPT))?;
            if r.code == 421 {
                return Err(refusal(super::phase::RCPT, &r));
            }
            if r.is_positive() {
                self.rcpts.ok.push(self.built.rcpts[i]);
            } else {
                self.rcpts.rejected += 1;
                if mail_fail.is_none() {
                    self.fails.push(refusal(super::phase::RCPT, &r));
                }
            }
        }
        Ok(mail_fail)
    }

    /// The envelope one command at a time, each its own phase.
    async fn lockstep(
        &mut self,
        conn: &mut Connection,
        cmd: &[u8],
        mail_len: usize,
        report: &mut UnitReport,
    ) -> Result<bool, Failure> {
        let tf = |phase| move |e| Failure::transport(phase, e);
        let t = report.start(super::phase::MAIL);
        conn.send(&cmd[..mail_len])
            .await
            .map_err(tf(super::phase::MAIL))?;
        {
            let r = read_reply(conn).await.map_err(tf(super::phase::MAIL))?;
            if !r.is_positive() {
                return Err(refusal(super::phase::MAIL, &r));
            }
        }
        report.timed(super::phase::MAIL, t);
        let mut rest = &cmd[mail_len..];
        for i in 0..self.built.rcpts.len() {
            let end = rest
                .iter()
                .position(|&b| b == b'\n')
                .map_or(rest.len(), |p| p + 1);
            let t = report.start(super::phase::RCPT);
            conn.send(&rest[..end])
                .await
                .map_err(tf(super::phase::RCPT))?;
            rest = &rest[end..];
            let r = read_reply(conn).await.map_err(tf(super::phase::RCPT))?;
            if r.is_positive() {
                self.rcpts.ok.push(self.built.rcpts[i]);
            } else {
                self.rcpts.rejected += 1;
                let f = refusal(super::phase::RCPT, &r);
                if f.fatal {
                    return Err(f);
                }
                self.fails.push(f);
            }
            report.timed(super::phase::RCPT, t);
        }
        if self.rcpts.ok.is_empty() {
            return Ok(false);
        }
        let t = report.start(super::phase::DATA);
        conn.send(rest).await.map_err(tf(super::phase::DATA))?;
        let r = read_reply(conn).await.map_err(tf(super::phase::DATA))?;
        match r.code {
            354 => {}
            c if c >= 400 => return Err(refusal(super::phase::DATA, &r)),
            _ => return Err(unexpected(super::phase::DATA, &r)),
        }
        report.timed(super::phase::DATA, t);
        Ok(true)
    }
}
