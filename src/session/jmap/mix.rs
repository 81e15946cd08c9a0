//! The writes of a visit beyond keywords and destroys: messages moved to the archive, a
//! generated message uploaded and imported into the inbox, and one sent to another
//! account of the run (uploaded, imported as a draft, submitted, the draft destroyed).
//!
//! A sent message is imported rather than made with Email/set create: the generator's
//! message goes out byte for byte, its tracking header included, and a server that takes
//! new messages by import only (the embedded one) can be loaded too.

use std::time::SystemTime;

use serde_json::{json, Map, Value};

use super::{client, phase, refused, Session};
use crate::engine::UnitReport;
use crate::session::Failure;

/// The id of the identity that sends as `user` in an Identity/get response's arguments:
/// the one with that address, else the first.
pub(super) fn identity(identity_get: &Value, user: &str) -> Option<String> {
    let list = identity_get["list"].as_array()?;
    list.iter()
        .find(|i| {
            i["email"]
                .as_str()
                .is_some_and(|e| e.eq_ignore_ascii_case(user))
        })
        .or_else(|| list.first())?["id"]
        .as_str()
        .map(str::to_string)
}

/// How many entries a set response's `created` (or `updated`) holds.
fn entries(response: &Value, key: &str) -> u64 {
    response[key].as_object().map_or(0, Map::len) as u64
}

impl Session {
    /// The index of this session's account (in the run's accounts, and so in the message
    /// generator's senders and recipients).
    fn account_index(&self) -> usize {
        self.id % self.s.accounts.len()
    }

    /// Moves `ids` of the inbox to the archive (the first other mailbox without one), one
    /// Email/set. An account with no mailbox but its inbox cannot move: every visit that
    /// would is refused with that said, and so counted.
    pub(super) async fn move_kept(
        &mut self,
        account: &str,
        ids: Vec<String>,
        report: &mut UnitReport,
    ) -> Result<(), Failure> {
        let Some(to) = self.login.as_ref().and_then(|l| l.archive.clone()) else {
            return Err(refused(
                phase::MOVE,
                0,
                "no mailbox to move to",
                "--move: the account has no mailbox with the archive role and none but its inbox",
            ));
        };
        let update: Map<String, Value> = ids
            .into_iter()
            .map(|id| (id, json!({"mailboxIds": {to.clone(): true}})))
            .collect();
        let r = self
            .api(
                phase::MOVE,
                json!([["Email/set", {"accountId": account, "update": update}, "v"]]),
                report,
            )
            .await?;
        report
            .counters
            .count(phase::MOVED, entries(&r[0][1], "updated"));
        if entries(&r[0][1], "notUpdated") > 0 {
            return Err(refused(phase::MOVE, 0, "notUpdated", &r[0][1].to_string()));
        }
        Ok(())
    }

    /// Writes message `seq` from account `from` to account `to` into `self.message`, as
    /// the message itself (not dot-stuffed).
    fn generate(&mut self, seq: u64, from: usize, to: usize) {
        let Some(b) = self.builder.as_mut() else {
            return;
        };
        self.built.from = from as u32;
        self.built.rcpts.clear();
        self.built.rcpts.push(to as u32);
        self.wire.clear();
        let now_us = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        b.build(seq, now_us, &mut self.built, &mut self.wire);
        self.message.clear();
        let wire = self.wire.strip_suffix(b".\r\n").unwrap_or(&self.wire);
        crate::proto::dot::unstuff(wire, &mut self.message);
    }

    /// Uploads message `seq` from account `from` to account `to` (RFC 8620 §6.1): its
    /// blob id.
    async fn upload(
        &mut self,
        seq: u64,
        from: usize,
        to: usize,
        report: &mut UnitReport,
    ) -> Result<String, Failure> {
        let l = self.login.as_ref().expect("logged in");
        let Some(template) = &l.upload else {
            return Err(Failure::breach(
                phase::UPLOAD,
                "the session names no uploadUrl on this server",
            ));
        };
        let path = client::fill(template, &[("accountId", &l.account)]);
        self.generate(seq, from, to);
        let wire = self.http.upload(&path, "message/rfc822", &self.message);
        let reply = self.exchange(phase::UPLOAD, wire, report).await?;
        let v: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
        if !(200..300).contains(&reply.status) {
            let kind = v["type"].as_str().unwrap_or("http");
            let sample = String::from_utf8_lossy(&reply.body);
            return Err(refused(phase::UPLOAD, reply.status, kind, &sample));
        }
        v["blobId"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| Failure::breach(phase::UPLOAD, "an upload answered without blobId"))
    }

    /// Email/import of `blob` into `mailbox` with `keywords`: the new email's id.
    async fn import_blob(
        &mut self,
        blob: &str,
        mailbox: &str,
        keywords: Value,
        report: &mut UnitReport,
    ) -> Result<String, Failure> {
        let account = self.login.as_ref().expect("logged in").account.clone();
        let r = self
            .api(
                phase::IMPORT,
                json!([["Email/import", {"accountId": account, "emails": {"e": {
                    "blobId": blob, "mailboxIds": {mailbox: true}, "keywords": keywords}}}, "i"]]),
                report,
            )
            .await?;
        match r[0][1]["created"]["e"]["id"].as_str() {
            Some(id) => Ok(id.to_string()),
            None => Err(refused(
                phase::IMPORT,
                0,
                "notCreated",
                &r[0][1].to_string(),
            )),
        }
    }

    /// A generated message to this account uploaded and imported into its inbox.
    pub(super) async fn import(
        &mut self,
        seq: u64,
        report: &mut UnitReport,
    ) -> Result<(), Failure> {
        let me = self.account_index();
        let blob = self.upload(seq, me, me, report).await?;
        let inbox = self.login.as_ref().expect("logged in").inbox.clone();
        self.import_blob(&blob, &inbox, json!({}), report).await?;
        report.counters.count(phase::IMPORTED, 1);
        Ok(())
    }

    /// A generated message sent to another account of the run (in turn): uploaded,
    /// imported as a draft (into the drafts mailbox, else the inbox), submitted with the
    /// session's identity, and the draft destroyed in the same request.
    pub(super) async fn submit(
        &mut self,
        seq: u64,
        report: &mut UnitReport,
    ) -> Result<(), Failure> {
        let (me, n) = (self.account_index(), self.s.accounts.len());
        let to = (me + 1 + (self.submits as usize) % (n - 1).max(1)) % n;
        self.submits += 1;
        let blob = self.upload(seq, me, to, report).await?;
        let l = self.login.as_ref().expect("logged in");
        let (account, drafts) = (
            l.account.clone(),
            l.drafts.clone().unwrap_or_else(|| l.inbox.clone()),
        );
        let Some(identity) = l.identity.clone() else {
            return Err(refused(
                phase::SUBMIT,
                0,
                "no identity",
                "Identity/get listed none",
            ));
        };
        let email = self
            .import_blob(
                &blob,
                &drafts,
                json!({"$draft": true, "$seen": true}),
                report,
            )
            .await?;
        let (from, rcpt) = (&self.s.accounts[me].user, &self.s.accounts[to].user);
        let calls = json!([
            ["EmailSubmission/set", {"accountId": account, "create": {"s": {
                "identityId": identity, "emailId": email,
                "envelope": {"mailFrom": {"email": from}, "rcptTo": [{"email": rcpt}]}}}}, "s"],
            ["Email/set", {"accountId": account, "destroy": [email]}, "d"],
        ]);
        let r = self
            .post(phase::SUBMIT, client::api_body_submission(calls), report)
            .await?;
        let sent = entries(&r[0][1], "created");
        report.counters.count(phase::SUBMITTED, sent);
        if sent == 0 {
            return Err(refused(
                phase::SUBMIT,
                0,
                "notCreated",
                &r[0][1].to_string(),
            ));
        }
        if entries(&r[1][1], "notDestroyed") > 0 {
            return Err(refused(
                phase::SUBMIT,
                0,
                "notDestroyed",
                &r[1][1].to_string(),
            ));
        }
        Ok(())
    }
}
