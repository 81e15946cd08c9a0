//! SASL mechanisms (RFC 4616 PLAIN, the LOGIN draft, RFC 2195 CRAM-MD5, RFC 5802/7677
//! SCRAM), both sides and no I/O: the server's decoding of client responses, and the
//! client's responses ([`client`]). SCRAM has more steps, so it is a pair of state
//! machines ([`ScramClient`], [`ScramServer`]): a message in, the next message out.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};

mod scram;
pub use scram::{
    client_first_user, SaltedPassword, ScramClient, ScramError, ScramHash, ScramServer,
};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaslError {
    #[error("response is not valid base64")]
    Base64,
    #[error("malformed SASL response")]
    Malformed,
    #[error("authentication cancelled")]
    Cancelled,
}

pub fn encode(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// Decodes one base64 response line; `*` means the client cancelled.
pub fn decode(line: &str) -> Result<Vec<u8>, SaslError> {
    let line = line.trim();
    if line == "*" {
        return Err(SaslError::Cancelled);
    }
    if line == "=" {
        return Ok(Vec::new());
    }
    STANDARD.decode(line).map_err(|_| SaslError::Base64)
}

fn utf8(b: &[u8]) -> Result<String, SaslError> {
    String::from_utf8(b.to_vec()).map_err(|_| SaslError::Malformed)
}

/// PLAIN: `authzid NUL authcid NUL password` → (authcid, password).
pub fn plain(decoded: &[u8]) -> Result<(String, String), SaslError> {
    let mut parts = decoded.split(|&b| b == 0);
    let (Some(_authz), Some(user), Some(pass), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(SaslError::Malformed);
    };
    if user.is_empty() {
        return Err(SaslError::Malformed);
    }
    Ok((utf8(user)?, utf8(pass)?))
}

/// CRAM-MD5: the response is `user SP hex(hmac_md5(password, challenge))`.
pub fn cram_md5_split(decoded: &[u8]) -> Result<(String, String), SaslError> {
    let text = utf8(decoded)?;
    let (user, digest) = text.rsplit_once(' ').ok_or(SaslError::Malformed)?;
    if user.is_empty() || digest.len() != 32 {
        return Err(SaslError::Malformed);
    }
    Ok((user.to_string(), digest.to_ascii_lowercase()))
}

/// The hex HMAC-MD5 of `challenge` keyed with the password.
pub fn cram_md5_digest(password: &str, challenge: &[u8]) -> String {
    let mut mac = match Hmac::<md5::Md5>::new_from_slice(password.as_bytes()) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(challenge);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The client's side: what to send, base64-encoded as SMTP AUTH, POP3 AUTH and IMAP
/// AUTHENTICATE carry it.
pub mod client {
    use super::{cram_md5_digest, decode, encode};

    /// A mechanism the client can use.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Mechanism {
        Plain,
        Login,
        CramMd5,
    }

    impl Mechanism {
        pub fn name(self) -> &'static str {
            match self {
                Mechanism::Plain => "PLAIN",
                Mechanism::Login => "LOGIN",
                Mechanism::CramMd5 => "CRAM-MD5",
            }
        }
    }

    /// PLAIN's only response (no authorization identity), sent as the initial response.
    pub fn plain(user: &str, pass: &str) -> String {
        encode(format!("\0{user}\0{pass}").as_bytes())
    }

    /// LOGIN's two responses, to the server's two prompts.
    pub fn login(user: &str, pass: &str) -> [String; 2] {
        [encode(user.as_bytes()), encode(pass.as_bytes())]
    }

    /// CRAM-MD5's response to the server's base64 challenge. A challenge that is not
    /// base64 is taken as empty: the server then refuses the response, and that refusal
    /// is what gets counted, like any wrong password.
    pub fn cram_md5(user: &str, pass: &str, challenge: &str) -> String {
        let challenge = decode(challenge).unwrap_or_default();
        let digest = cram_md5_digest(pass, &challenge);
        encode(format!("{user} {digest}").as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_known_answer() {
        let d = decode("AHRpbQB0YW5zdGFhZnRhbnN0YWFm").unwrap();
        assert_eq!(
            plain(&d).unwrap(),
            ("tim".to_string(), "tanstaaftanstaaf".to_string())
        );
        assert_eq!(decode("*"), Err(SaslError::Cancelled));
        assert_eq!(decode("!!"), Err(SaslError::Base64));
        assert_eq!(plain(b"nouser"), Err(SaslError::Malformed));
        assert_eq!(plain(b"\0\0pw"), Err(SaslError::Malformed));
    }

    #[test]
    fn cram_md5_rfc2195_example() {
        let challenge = "<1896.697170952@postoffice.reston.mci.net>";
        assert_eq!(
            cram_md5_digest("tanstaaftanstaaf", challenge.as_bytes()),
            "b913a602c7eda7a495b4e6e7334d3890"
        );
        let resp = decode("dGltIGI5MTNhNjAyYzdlZGE3YTQ5NWI0ZTZlNzMzNGQzODkw").unwrap();
        // The client's side of the same exchange.
        let challenge_b64 = encode(challenge.as_bytes());
        assert_eq!(
            client::cram_md5("tim", "tanstaaftanstaaf", &challenge_b64),
            "dGltIGI5MTNhNjAyYzdlZGE3YTQ5NWI0ZTZlNzMzNGQzODkw"
        );
        assert_eq!(
            client::plain("tim", "tanstaaftanstaaf"),
            "AHRpbQB0YW5zdGFhZnRhbnN0YWFm"
        );
        assert_eq!(
            cram_md5_split(&resp).unwrap(),
            (
                "tim".to_string(),
                "b913a602c7eda7a495b4e6e7334d3890".to_string()
            )
        );
    }
}
