//! Opening an SMTP/LMTP connection (connect, TLS, banner, EHLO/LHLO, STARTTLS, AUTH) and
//! closing it (QUIT), each step a phase of the unit that needed it.

use super::{cmd, read_reply, refusal, AuthMech, Session};
use crate::engine::UnitReport;
use crate::metrics::Phase;
use crate::proto::sasl::client::{self as sasl, Mechanism};
use crate::proto::smtp::reply::Capabilities;
use crate::session::{Failure, TlsMode};
use crate::transport::Connection;

impl Session {
    /// Opens the session's connection when it has none.
    pub(super) async fn ensure_connected(
        &mut self,
        report: &mut UnitReport,
    ) -> Result<(), Failure> {
        if self.conn.is_some() {
            return Ok(());
        }
        let s = self.s.clone();
        let n = self.connections_made;
        self.connections_made += 1;
        let mut conn = s.endpoint.open(self.id, n, report).await?;
        let t = report.start_after_last(super::phase::BANNER);
        expect(&mut conn, super::phase::BANNER, 220).await?;
        report.timed(super::phase::BANNER, t);
        self.caps = self.hello(&mut conn, report).await?;
        if self.wants_starttls() {
            let t = report.start(super::phase::STARTTLS);
            conn.send(cmd::STARTTLS)
                .await
                .map_err(|e| Failure::transport(super::phase::STARTTLS, e))?;
            expect(&mut conn, super::phase::STARTTLS, 220).await?;
            report.timed(super::phase::STARTTLS, t);
            s.endpoint.handshake(&mut conn, report).await?;
            self.caps = self.hello(&mut conn, report).await?;
        }
        if let Some((mech, creds)) = &s.auth {
            if !self.caps.auth {
                return Err(not_offered());
            }
            let (user, pass) = &creds[self.id % creds.len()];
            let t = report.start(super::phase::AUTH);
            self.auth(&mut conn, *mech, user, pass).await?;
            report.timed(super::phase::AUTH, t);
        }
        self.conn = Some(conn);
        self.on_conn = 0;
        Ok(())
    }

    /// STARTTLS on every connection, or on the planned share of them.
    fn wants_starttls(&self) -> bool {
        let s = &self.s;
        match s.endpoint.tls {
            TlsMode::Starttls => true,
            TlsMode::Plain => {
                s.tls_percent > 0
                    && (self.connections_made.wrapping_mul(37) + self.id as u64) % 100
                        < u64::from(s.tls_percent)
            }
            TlsMode::Implicit => false,
        }
    }

    async fn hello(
        &mut self,
        conn: &mut Connection,
        report: &mut UnitReport,
    ) -> Result<Capabilities, Failure> {
        self.cmd.clear();
        cmd::hello(&mut self.cmd, self.s.lmtp, &self.s.helo);
        let phase = if self.s.lmtp {
            super::phase::LHLO
        } else {
            super::phase::EHLO
        };
        let t = report.start(phase);
        let tf = |e| Failure::transport(phase, e);
        conn.send(&self.cmd).await.map_err(tf)?;
        let caps = {
            let r = read_reply(conn).await.map_err(tf)?;
            if r.code != 250 {
                return Err(Failure {
                    fatal: true,
                    ..refusal(phase, &r)
                });
            }
            Capabilities::from_ehlo(&r)
        };
        report.timed(phase, t);
        Ok(caps)
    }

    /// The AUTH exchange with the chosen mechanism.
    async fn auth(
        &mut self,
        conn: &mut Connection,
        mech: AuthMech,
        user: &str,
        pass: &str,
    ) -> Result<(), Failure> {
        let caps = &self.caps;
        let mech = match mech {
            AuthMech::Auto if caps.auth_cram_md5 => Mechanism::CramMd5,
            AuthMech::Auto if caps.auth_plain || !caps.auth_login => Mechanism::Plain,
            AuthMech::Auto | AuthMech::Login => Mechanism::Login,
            AuthMech::Plain => Mechanism::Plain,
            AuthMech::CramMd5 => Mechanism::CramMd5,
        };
        let tf = |e| Failure::transport(super::phase::AUTH, e);
        let out = &mut self.cmd;
        out.clear();
        match mech {
            Mechanism::Plain => {
                cmd::auth(out, mech.name(), Some(&sasl::plain(user, pass)));
                conn.send(out).await.map_err(tf)?;
            }
            Mechanism::Login => {
                cmd::auth(out, mech.name(), None);
                for line in sasl::login(user, pass) {
                    conn.send(out).await.map_err(tf)?;
                    expect(conn, super::phase::AUTH, 334).await?;
                    out.clear();
                    cmd::response(out, &line);
                }
                conn.send(out).await.map_err(tf)?;
            }
            Mechanism::CramMd5 => {
                cmd::auth(out, mech.name(), None);
                conn.send(out).await.map_err(tf)?;
                let challenge = {
                    let r = read_reply(conn).await.map_err(tf)?;
                    if r.code != 334 {
                        return Err(Failure {
                            fatal: true,
                            ..refusal(super::phase::AUTH, &r)
                        });
                    }
                    let text = r.lines().next().unwrap_or_default();
                    String::from_utf8_lossy(text.trim_ascii()).into_owned()
                };
                let line = sasl::cram_md5(user, pass, &challenge);
                out.clear();
                cmd::response(out, &line);
                conn.send(out).await.map_err(tf)?;
            }
        }
        expect(conn, super::phase::AUTH, 235).await
    }

    /// Sends QUIT and closes; returns the QUIT round trip when it completed.
    pub(super) async fn close(&mut self, report: &mut UnitReport) -> Option<u64> {
        self.on_conn = 0;
        let mut conn = self.conn.take()?;
        let t = report.start(super::phase::QUIT);
        let ok = match conn.send(cmd::QUIT).await {
            Ok(()) => read_reply(&mut conn).await.is_ok(),
            Err(_) => false,
        };
        let us = report.took(t);
        conn.shutdown().await;
        ok.then_some(us)
    }
}

/// Reads one reply; anything but `code` ends the connection with a failure of `phase`.
async fn expect(conn: &mut Connection, phase: Phase, code: u16) -> Result<(), Failure> {
    let r = read_reply(conn)
        .await
        .map_err(|e| Failure::transport(phase, e))?;
    if r.code == code {
        Ok(())
    } else {
        Err(Failure {
            fatal: true,
            ..refusal(phase, &r)
        })
    }
}

/// The server did not offer AUTH, and the run was told to authenticate: no AUTH is sent
/// (the server would answer 503), the message is not sent unauthenticated either.
fn not_offered() -> Failure {
    let text =
        "the server does not offer AUTH here (many offer it only after STARTTLS: --starttls)";
    Failure {
        phase: super::phase::AUTH,
        kind: crate::metrics::ErrorKind::UNSUPPORTED,
        code: 0,
        detail: None,
        text: text.into(),
        sample: text.into(),
        fatal: true,
    }
}
