//! SCRAM-SHA-1 and SCRAM-SHA-256 (RFC 5802, RFC 7677) without channel binding: the
//! client's and the server's state machines, and the PBKDF2 (`Hi`) they share.
//!
//! The messages are the bare SCRAM strings; the protocol carries them in base64 (XMPP in
//! `<auth>`, `<challenge>`, `<response>`, `<success>`). The GS2 header is always `n,,`
//! from the client ("no channel binding"); the server accepts `n` and `y` and refuses
//! `p=` (channel binding, the `-PLUS` mechanisms). Passwords are used as given, without
//! SASLprep: load-test credentials are ASCII.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use sha2::Digest as _;

/// The iteration counts a client accepts: above this a hostile server could make every
/// login burn a core for seconds.
const MAX_ITERATIONS: u64 = 1_000_000;

/// The hash a SCRAM mechanism uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScramHash {
    Sha1,
    Sha256,
}

impl ScramHash {
    /// The SASL mechanism name.
    pub fn mechanism(self) -> &'static str {
        match self {
            ScramHash::Sha1 => "SCRAM-SHA-1",
            ScramHash::Sha256 => "SCRAM-SHA-256",
        }
    }

    /// The hash of a mechanism name (any case); `None` for others, `-PLUS` included.
    pub fn from_mechanism(m: &str) -> Option<ScramHash> {
        [ScramHash::Sha1, ScramHash::Sha256]
            .into_iter()
            .find(|h| h.mechanism().eq_ignore_ascii_case(m))
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha1 => mac::<Hmac<sha1::Sha1>>(key, data),
            ScramHash::Sha256 => mac::<Hmac<sha2::Sha256>>(key, data),
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha1 => sha1::Sha1::digest(data).to_vec(),
            ScramHash::Sha256 => sha2::Sha256::digest(data).to_vec(),
        }
    }

    /// `Hi()`: PBKDF2 with this hash's HMAC, one block (the output is one hash long).
    fn hi(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            ScramHash::Sha1 => hi::<Hmac<sha1::Sha1>>(password, salt, iterations),
            ScramHash::Sha256 => hi::<Hmac<sha2::Sha256>>(password, salt, iterations),
        }
    }
}

fn mac<M: Mac + KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes keys of any length; the error cannot happen, and an empty result would
    // only make the exchange fail.
    let Ok(mut m) = <M as Mac>::new_from_slice(key) else {
        return Vec::new();
    };
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

fn hi<M: Mac + KeyInit + Clone>(password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
    let Ok(keyed) = <M as Mac>::new_from_slice(password) else {
        return Vec::new();
    };
    let mut m = keyed.clone();
    m.update(salt);
    m.update(&1u32.to_be_bytes());
    let mut u = m.finalize().into_bytes();
    let mut out = u.to_vec();
    for _ in 1..iterations {
        let mut m = keyed.clone();
        m.update(&u);
        u = m.finalize().into_bytes();
        out.iter_mut().zip(u.iter()).for_each(|(o, x)| *o ^= x);
    }
    out
}

/// Why a SCRAM exchange failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    #[error("SCRAM message with bad base64")]
    Base64,
    #[error("SCRAM nonce does not extend the client's")]
    Nonce,
    #[error("SCRAM iteration count {0} out of range")]
    Iterations(u64),
    #[error("SCRAM {0} is not supported")]
    Unsupported(&'static str),
    /// The server's `e=` error, verbatim.
    #[error("SCRAM server error: {0}")]
    Server(String),
    #[error("SCRAM server signature is wrong")]
    BadServerSignature,
    /// The client's proof is wrong: the password is.
    #[error("SCRAM client proof is wrong")]
    BadProof,
    #[error("SCRAM message out of order")]
    OutOfOrder,
}

/// `Hi(password, salt, i)` with the salt and count it was derived for. The server's salt
/// is stable per account, so a load client can keep this and skip PBKDF2 on the next
/// login ([`ScramClient::use_cached`]); the embedded server can build every
/// [`ScramServer`] from one.
#[derive(Clone, PartialEq, Eq)]
pub struct SaltedPassword {
    pub hash: ScramHash,
    pub salt: Vec<u8>,
    pub iterations: u32,
    pub key: Vec<u8>,
}

impl SaltedPassword {
    /// Runs PBKDF2 (the expensive step: `iterations` HMACs).
    pub fn new(hash: ScramHash, password: &str, salt: &[u8], iterations: u32) -> SaltedPassword {
        SaltedPassword {
            hash,
            salt: salt.to_vec(),
            iterations,
            key: hash.hi(password.as_bytes(), salt, iterations),
        }
    }

    fn client_key(&self) -> Vec<u8> {
        self.hash.hmac(&self.key, b"Client Key")
    }

    fn server_key(&self) -> Vec<u8> {
        self.hash.hmac(&self.key, b"Server Key")
    }
}

impl std::fmt::Debug for SaltedPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaltedPassword")
            .field("hash", &self.hash)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// The client's side of one SCRAM exchange.
pub struct ScramClient {
    hash: ScramHash,
    /// The user name as a `saslname` (`=` and `,` escaped).
    user: String,
    password: String,
    nonce: String,
    salted: Option<SaltedPassword>,
    /// What `v=` must carry, known once the client-final message is made.
    server_signature: Option<Vec<u8>>,
}

impl std::fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramClient")
            .field("hash", &self.hash)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl ScramClient {
    /// `nonce` should be fresh and random; characters SCRAM does not allow in a nonce
    /// (outside printable ASCII, and `,`) are dropped from it.
    pub fn new(hash: ScramHash, user: &str, password: &str, nonce: &str) -> ScramClient {
        ScramClient {
            hash,
            user: saslname(user),
            password: password.to_string(),
            nonce: clean_nonce(nonce),
            salted: None,
            server_signature: None,
        }
    }

    /// Uses an earlier login's salted password when the server sends the same salt and
    /// count (and the hash is the same); otherwise it is recomputed.
    pub fn use_cached(&mut self, salted: SaltedPassword) {
        self.salted = Some(salted);
    }

    /// The salted password of this exchange, once [`ScramClient::client_final`] ran.
    pub fn salted(&self) -> Option<&SaltedPassword> {
        self.salted.as_ref()
    }

    /// `n,,n=user,r=nonce`.
    pub fn client_first(&self) -> String {
        format!("n,,{}", self.first_bare())
    }

    fn first_bare(&self) -> String {
        format!("n={},r={}", self.user, self.nonce)
    }

    /// The client-final message (`c=biws,r=…,p=…`) answering the server-first one, after
    /// checking that the server's nonce extends the client's, the salt is base64 and the
    /// iteration count is in 1..=1 000 000.
    pub fn client_final(&mut self, server_first: &str) -> Result<String, ScramError> {
        let (nonce, salt, iterations) = parse_server_first(server_first)?;
        if nonce.len() <= self.nonce.len() || !nonce.starts_with(&self.nonce) {
            return Err(ScramError::Nonce);
        }
        let salted = match self.salted.take() {
            Some(s) if s.hash == self.hash && s.salt == salt && s.iterations == iterations => s,
            _ => SaltedPassword::new(self.hash, &self.password, &salt, iterations),
        };
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{},{server_first},{without_proof}", self.first_bare());
        let client_key = salted.client_key();
        let stored_key = self.hash.hash(&client_key);
        let signature = self.hash.hmac(&stored_key, auth.as_bytes());
        let proof = xor(&client_key, &signature);
        self.server_signature = Some(self.hash.hmac(&salted.server_key(), auth.as_bytes()));
        self.salted = Some(salted);
        Ok(format!("{without_proof},p={}", STANDARD.encode(proof)))
    }

    /// Checks the server-final message: `v=` must prove the server knows the password;
    /// `e=` is the server's refusal.
    pub fn verify_server_final(&self, server_final: &str) -> Result<(), ScramError> {
        if let Some(e) = server_final.strip_prefix("e=") {
            return Err(ScramError::Server(e.to_string()));
        }
        let expected = self
            .server_signature
            .as_ref()
            .ok_or(ScramError::OutOfOrder)?;
        let v = server_final
            .split(',')
            .next()
            .and_then(|p| p.strip_prefix("v="))
            .ok_or(ScramError::Malformed("no verifier"))?;
        let v = STANDARD.decode(v).map_err(|_| ScramError::Base64)?;
        if ct_eq(&v, expected) {
            Ok(())
        } else {
            Err(ScramError::BadServerSignature)
        }
    }
}

/// The server's side of one SCRAM exchange.
pub struct ScramServer {
    hash: ScramHash,
    salt: Vec<u8>,
    iterations: u32,
    stored_key: Vec<u8>,
    server_key: Vec<u8>,
    server_nonce: String,
    state: ServerState,
}

enum ServerState {
    Start,
    /// After server-first: the expected `c=` and `r=`, and the AuthMessage so far
    /// (client-first-bare `,` server-first).
    First {
        channel: String,
        nonce: String,
        auth: String,
    },
    Done,
}

impl std::fmt::Debug for ScramServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramServer")
            .field("hash", &self.hash)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl ScramServer {
    /// Runs PBKDF2 on `password`; [`ScramServer::from_salted`] skips that.
    /// `server_nonce` is cleaned like the client's (see [`ScramClient::new`]).
    pub fn new(
        hash: ScramHash,
        password: &str,
        salt: &[u8],
        iterations: u32,
        server_nonce: &str,
    ) -> ScramServer {
        let salted = SaltedPassword::new(hash, password, salt, iterations);
        ScramServer::from_salted(&salted, server_nonce)
    }

    pub fn from_salted(salted: &SaltedPassword, server_nonce: &str) -> ScramServer {
        ScramServer {
            hash: salted.hash,
            salt: salted.salt.clone(),
            iterations: salted.iterations,
            stored_key: salted.hash.hash(&salted.client_key()),
            server_key: salted.server_key(),
            server_nonce: clean_nonce(server_nonce),
            state: ServerState::Start,
        }
    }

    /// Reads the client-first message: the user name (unescaped) and the server-first
    /// message to send (`r=…,s=…,i=…`).
    pub fn server_first(&mut self, client_first: &str) -> Result<(String, String), ScramError> {
        if !matches!(self.state, ServerState::Start) {
            return Err(ScramError::OutOfOrder);
        }
        self.state = ServerState::Done;
        let first = parse_client_first(client_first)?;
        let nonce = format!("{}{}", first.nonce, self.server_nonce);
        let reply = format!(
            "r={nonce},s={},i={}",
            STANDARD.encode(&self.salt),
            self.iterations
        );
        self.state = ServerState::First {
            channel: STANDARD.encode(first.gs2),
            nonce,
            auth: format!("{},{reply}", first.bare),
        };
        Ok((first.user, reply))
    }

    /// Checks the client's proof; the server-final message (`v=…`) when it is right,
    /// [`ScramError::BadProof`] when the password is wrong.
    pub fn server_final(&mut self, client_final: &str) -> Result<String, ScramError> {
        let ServerState::First {
            channel,
            nonce,
            auth,
        } = std::mem::replace(&mut self.state, ServerState::Done)
        else {
            return Err(ScramError::OutOfOrder);
        };
        let (without_proof, proof) = client_final
            .rsplit_once(",p=")
            .ok_or(ScramError::Malformed("no proof"))?;
        let mut parts = without_proof.split(',');
        if parts.next().and_then(|c| c.strip_prefix("c=")) != Some(channel.as_str()) {
            return Err(ScramError::Malformed("channel binding data"));
        }
        if parts.next().and_then(|r| r.strip_prefix("r=")) != Some(nonce.as_str()) {
            return Err(ScramError::Nonce);
        }
        let proof = STANDARD.decode(proof).map_err(|_| ScramError::Base64)?;
        let auth = format!("{auth},{without_proof}");
        let signature = self.hash.hmac(&self.stored_key, auth.as_bytes());
        if proof.len() != signature.len() {
            return Err(ScramError::BadProof);
        }
        let client_key = xor(&proof, &signature);
        if !ct_eq(&self.hash.hash(&client_key), &self.stored_key) {
            return Err(ScramError::BadProof);
        }
        let verifier = self.hash.hmac(&self.server_key, auth.as_bytes());
        Ok(format!("v={}", STANDARD.encode(verifier)))
    }
}

/// The user name in a client-first message, for a server that must look the account up
/// (and its password) before it can make a [`ScramServer`].
pub fn client_first_user(client_first: &str) -> Result<String, ScramError> {
    parse_client_first(client_first).map(|f| f.user)
}

/// The parts of a client-first message.
struct ClientFirst<'a> {
    /// The GS2 header with its trailing comma (`n,,`).
    gs2: &'a str,
    /// client-first-message-bare.
    bare: &'a str,
    user: String,
    nonce: &'a str,
}

fn parse_client_first(msg: &str) -> Result<ClientFirst<'_>, ScramError> {
    let (flag, rest) = msg
        .split_once(',')
        .ok_or(ScramError::Malformed("no GS2 header"))?;
    match flag {
        "n" | "y" => {}
        f if f.starts_with("p=") => return Err(ScramError::Unsupported("channel binding")),
        _ => return Err(ScramError::Malformed("GS2 header")),
    }
    let (authzid, bare) = rest
        .split_once(',')
        .ok_or(ScramError::Malformed("no GS2 header"))?;
    if !authzid.is_empty() && !authzid.starts_with("a=") {
        return Err(ScramError::Malformed("GS2 header"));
    }
    let gs2 = msg
        .get(..flag.len() + authzid.len() + 2)
        .ok_or(ScramError::Malformed("GS2 header"))?;
    let mut parts = bare.split(',');
    let user = match parts.next() {
        Some(m) if m.starts_with("m=") => {
            return Err(ScramError::Unsupported("mandatory extension"))
        }
        Some(n) => n
            .strip_prefix("n=")
            .ok_or(ScramError::Malformed("no user name"))?,
        None => return Err(ScramError::Malformed("no user name")),
    };
    let nonce = parts
        .next()
        .and_then(|r| r.strip_prefix("r="))
        .filter(|r| valid_nonce(r))
        .ok_or(ScramError::Malformed("client nonce"))?;
    Ok(ClientFirst {
        gs2,
        bare,
        user: unescape_saslname(user)?,
        nonce,
    })
}

/// `r=…,s=…,i=…[,…]` → (nonce, salt, iteration count).
fn parse_server_first(msg: &str) -> Result<(&str, Vec<u8>, u32), ScramError> {
    let mut parts = msg.split(',');
    let mut field = |key: &'static str, what: &'static str| {
        parts
            .next()
            .and_then(|p| p.strip_prefix(key))
            .ok_or(ScramError::Malformed(what))
    };
    if msg.starts_with("m=") {
        return Err(ScramError::Unsupported("mandatory extension"));
    }
    let nonce = field("r=", "no nonce")?;
    let salt = field("s=", "no salt")?;
    let count = field("i=", "no iteration count")?;
    if !valid_nonce(nonce) {
        return Err(ScramError::Malformed("server nonce"));
    }
    let salt = STANDARD.decode(salt).map_err(|_| ScramError::Base64)?;
    if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ScramError::Malformed("iteration count"));
    }
    let count: u64 = count.parse().unwrap_or(u64::MAX);
    if !(1..=MAX_ITERATIONS).contains(&count) {
        return Err(ScramError::Iterations(count));
    }
    let count = u32::try_from(count).map_err(|_| ScramError::Iterations(count))?;
    Ok((nonce, salt, count))
}

/// A nonce is printable ASCII without `,` (RFC 5802 §7).
fn valid_nonce(n: &str) -> bool {
    !n.is_empty() && n.bytes().all(nonce_byte)
}

fn nonce_byte(b: u8) -> bool {
    (0x21..=0x7e).contains(&b) && b != b','
}

fn clean_nonce(n: &str) -> String {
    n.chars()
        .filter(|&c| c.is_ascii() && nonce_byte(c as u8))
        .collect()
}

/// A user name as a `saslname`: `=` and `,` escaped as `=3D` and `=2C`.
fn saslname(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

fn unescape_saslname(s: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(rest.get(..i).unwrap_or_default());
        let tail = rest.get(i..).unwrap_or_default();
        if let Some(t) = tail.strip_prefix("=2C") {
            out.push(',');
            rest = t;
        } else if let Some(t) = tail.strip_prefix("=3D") {
            out.push('=');
            rest = t;
        } else {
            return Err(ScramError::Malformed("bad '=' in the user name"));
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

/// Compares without stopping at the first difference.
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
#[path = "scram_tests.rs"]
mod tests;
