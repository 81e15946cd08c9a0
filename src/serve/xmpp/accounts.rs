//! XMPP accounts: the users file's (shared with the mail listeners), those registered in
//! band (in memory, XMPP only), password checks, and SCRAM's salted passwords cached per
//! account so that a thousand logins pay PBKDF2 once each, not once per login.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use sha2::Digest as _;

use super::super::store::Users;
use crate::proto::sasl::{SaltedPassword, ScramHash};

/// SCRAM iteration count (RFC 7677's minimum, what Prosody and ejabberd use).
pub(super) const SCRAM_ITERATIONS: u32 = 4096;

/// Why a registration was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// The JID already has a password.
    Conflict,
}

#[derive(Default)]
pub(crate) struct Accounts {
    /// Bare JID → password, created by in-band registration.
    registered: Mutex<HashMap<String, String>>,
    /// (mechanism, bare JID) → salted password.
    salted: Mutex<HashMap<(&'static str, String), SaltedPassword>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Accounts {
    /// The password of `jid` when the server knows it (registered, or in the users file).
    pub(super) fn password(&self, users: &Users, jid: &str) -> Option<String> {
        if let Some(p) = lock(&self.registered).get(jid) {
            return Some(p.clone());
        }
        users.password(jid).map(str::to_string)
    }

    /// Does the server know passwords (so SCRAM can be offered)? Only with a users file:
    /// without one any password works, which SCRAM cannot do.
    pub(super) fn knows_passwords(users: &Users) -> bool {
        users.has_table()
    }

    /// Checks a PLAIN login of `jid` (a served domain's): against the known password, or
    /// any password when there is no users file and `jid` was not registered.
    pub(super) fn check(&self, users: &Users, jid: &str, password: &str) -> bool {
        match self.password(users, jid) {
            Some(p) => p == password,
            None => !users.has_table(),
        }
    }

    /// Creates `jid` with `password`: `Conflict` when it already has one.
    pub(super) fn register(&self, users: &Users, jid: &str, password: &str) -> Result<(), Refused> {
        if users.password(jid).is_some() {
            return Err(Refused::Conflict);
        }
        let mut reg = lock(&self.registered);
        if reg.contains_key(jid) {
            return Err(Refused::Conflict);
        }
        reg.insert(jid.to_string(), password.to_string());
        Ok(())
    }

    /// Every account of `domain` the server knows (users file and registrations),
    /// sorted: the shared roster.
    pub(super) fn of_domain(&self, users: &Users, domain: &str) -> Vec<String> {
        let suffix = format!("@{domain}");
        let mut v: Vec<String> = users
            .addresses()
            .filter(|a| a.ends_with(&suffix))
            .map(str::to_string)
            .collect();
        v.extend(
            lock(&self.registered)
                .keys()
                .filter(|a| a.ends_with(&suffix))
                .cloned(),
        );
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The salted password of `jid` for `hash`, from the cache or computed (off the
    /// async threads: PBKDF2 with 4096 iterations takes milliseconds). `None` when the
    /// server does not know the password.
    pub(super) async fn salted(
        &self,
        users: &Users,
        hash: ScramHash,
        jid: &str,
    ) -> Option<SaltedPassword> {
        let key = (hash.mechanism(), jid.to_string());
        if let Some(s) = lock(&self.salted).get(&key) {
            return Some(s.clone());
        }
        let password = self.password(users, jid)?;
        let salt = salt(jid);
        let salted = tokio::task::spawn_blocking(move || {
            SaltedPassword::new(hash, &password, &salt, SCRAM_ITERATIONS)
        })
        .await
        .ok()?;
        lock(&self.salted).insert(key, salted.clone());
        Some(salted)
    }
}

/// The account's salt: derived from the JID, so it is stable across logins (a client
/// may cache its own salted password too) and differs between accounts.
fn salt(jid: &str) -> Vec<u8> {
    let digest = sha2::Sha256::digest(format!("spate xmpp salt {jid}").as_bytes());
    digest.get(..16).unwrap_or_default().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn table_registrations_and_salts() {
        let users = Users::parse("a@d pa\nb@e pb\n").unwrap();
        let acc = Accounts::default();
        assert!(acc.check(&users, "a@d", "pa"));
        assert!(!acc.check(&users, "a@d", "x"));
        assert!(
            !acc.check(&users, "z@d", "x"),
            "a users file pins the accounts"
        );
        assert_eq!(acc.register(&users, "a@d", "new"), Err(Refused::Conflict));
        acc.register(&users, "c@d", "pc").unwrap();
        assert_eq!(acc.register(&users, "c@d", "pc"), Err(Refused::Conflict));
        assert!(acc.check(&users, "c@d", "pc"));
        assert_eq!(acc.of_domain(&users, "d"), vec!["a@d", "c@d"]);
        let s1 = acc.salted(&users, ScramHash::Sha1, "a@d").await.unwrap();
        let s2 = acc.salted(&users, ScramHash::Sha1, "a@d").await.unwrap();
        assert!(s1 == s2 && s1.iterations == SCRAM_ITERATIONS);
        assert_ne!(salt("a@d"), salt("c@d"));
        assert!(acc.salted(&users, ScramHash::Sha256, "z@d").await.is_none());

        let open = Users::open(vec!["d".into()]);
        assert!(acc.check(&open, "anyone@d", "whatever"));
        assert!(acc.check(&open, "c@d", "pc"));
        assert!(
            !acc.check(&open, "c@d", "wrong"),
            "a registered account has its password"
        );
    }
}
