//! SASL on an XMPP stream (RFC 6120 §6), server side: PLAIN and SCRAM-SHA-1/256 (RFC
//! 5802/7677, no channel binding), with the base64 carried in `<auth>`, `<challenge>`,
//! `<response>` and `<success>`.

use rand::Rng as _;

use super::super::faults::FaultPoint;
use super::accounts::Accounts;
use super::stanza::Jid;
use super::stream::{End, Stream};
use crate::proto::sasl::{self, SaslError, ScramError, ScramHash, ScramServer};
use crate::proto::xmpp::{self, Element};

/// A finished exchange: the bare JID and the success's additional data (base64), or
/// the failure's condition.
type Outcome = Result<(String, String), &'static str>;

/// Runs one SASL exchange started by `auth`; `Some(bare JID)` once `<success>` is sent,
/// `None` after a `<failure>` (the client may try again).
pub(super) async fn authenticate(
    st: &mut Stream<'_>,
    auth: &Element,
) -> Result<Option<String>, End> {
    if let Some(code) = st.fault(FaultPoint::XmppLogin).await? {
        st.sh.stats.auth(false);
        let condition = if code < 500 {
            "temporary-auth-failure"
        } else {
            "not-authorized"
        };
        st.send(&xmpp::failure(condition));
        return Ok(None);
    }
    let mechanism = auth.attr("mechanism").unwrap_or("");
    let outcome = if mechanism.eq_ignore_ascii_case("PLAIN") {
        plain(st, auth).await?
    } else {
        match ScramHash::from_mechanism(mechanism) {
            Some(h) if Accounts::knows_passwords(&st.sh.users) => scram(st, auth, h).await?,
            _ => Err("invalid-mechanism"),
        }
    };
    match outcome {
        Ok((jid, additional)) => {
            st.sh.stats.auth(true);
            st.send(&xmpp::success(&additional));
            Ok(Some(jid))
        }
        Err(condition) => {
            st.sh.stats.auth(false);
            st.send(&xmpp::failure(condition));
            Ok(None)
        }
    }
}

fn decode(text: &str) -> Result<Vec<u8>, &'static str> {
    sasl::decode(text).map_err(|e| match e {
        SaslError::Cancelled => "aborted",
        _ => "incorrect-encoding",
    })
}

/// The client's first message: `<auth>`'s initial response or, when it sent none, its
/// answer to an empty challenge.
async fn initial(
    st: &mut Stream<'_>,
    auth: &Element,
) -> Result<Result<Vec<u8>, &'static str>, End> {
    let text = auth.text.trim();
    if !text.is_empty() {
        return Ok(decode(text));
    }
    st.send(&xmpp::challenge(""));
    response(st).await
}

/// The client's `<response>` (or `<abort>`); anything else ends the stream.
async fn response(st: &mut Stream<'_>) -> Result<Result<Vec<u8>, &'static str>, End> {
    let e = st.element().await?;
    match (e.local_name(), e.ns()) {
        ("response", Some(xmpp::NS_SASL)) => Ok(decode(e.text.trim())),
        ("abort", Some(xmpp::NS_SASL)) => Ok(Err("aborted")),
        _ => Err(End::Error("not-authorized")),
    }
}

/// The bare JID a SASL user name stands for: `user` is a local part of the stream's
/// domain, or a bare JID of it.
fn account_jid(st: &Stream<'_>, user: &str) -> Option<String> {
    let text = if user.contains('@') {
        user.to_string()
    } else {
        format!("{user}@{}", st.domain)
    };
    let j = Jid::parse(&text)?;
    (j.local.is_some() && j.resource.is_none() && j.domain == st.domain).then(|| j.bare())
}

async fn plain(st: &mut Stream<'_>, auth: &Element) -> Result<Outcome, End> {
    let data = match initial(st, auth).await? {
        Ok(d) => d,
        Err(c) => return Ok(Err(c)),
    };
    let Ok((user, password)) = sasl::plain(&data) else {
        return Ok(Err("malformed-request"));
    };
    let ok =
        account_jid(st, &user).filter(|jid| st.hub.accounts.check(&st.sh.users, jid, &password));
    Ok(ok.map(|jid| (jid, String::new())).ok_or("not-authorized"))
}

async fn scram(st: &mut Stream<'_>, auth: &Element, hash: ScramHash) -> Result<Outcome, End> {
    let first = match initial(st, auth).await? {
        Ok(d) => d,
        Err(c) => return Ok(Err(c)),
    };
    let Some(first) = String::from_utf8(first).ok() else {
        return Ok(Err("malformed-request"));
    };
    let Ok(user) = sasl::client_first_user(&first) else {
        return Ok(Err("malformed-request"));
    };
    let Some(jid) = account_jid(st, &user) else {
        return Ok(Err("not-authorized"));
    };
    let (sh, hub) = (st.sh, st.hub);
    let Some(salted) = hub.accounts.salted(&sh.users, hash, &jid).await else {
        return Ok(Err("not-authorized"));
    };
    let nonce: String = rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(24)
        .map(char::from)
        .collect();
    let mut server = ScramServer::from_salted(&salted, &nonce);
    let Ok((_, server_first)) = server.server_first(&first) else {
        return Ok(Err("malformed-request"));
    };
    st.send(&xmpp::challenge(&sasl::encode(server_first.as_bytes())));
    let last = match response(st).await? {
        Ok(d) => d,
        Err(c) => return Ok(Err(c)),
    };
    let Some(last) = String::from_utf8(last).ok() else {
        return Ok(Err("malformed-request"));
    };
    Ok(match server.server_final(&last) {
        Ok(v) => Ok((jid, sasl::encode(v.as_bytes()))),
        Err(ScramError::Malformed(_) | ScramError::Base64) => Err("malformed-request"),
        Err(_) => Err("not-authorized"),
    })
}
