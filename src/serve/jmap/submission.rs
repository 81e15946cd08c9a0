//! EmailSubmission (RFC 8621 §7): sending an Email delivers it at once to its recipients
//! this server serves (the envelope's, else its To, Cc and Bcc), so every submission is
//! `final`. Submissions are kept per account (the newest [`MAX_KEPT`]) with their own
//! state and change log, for EmailSubmission/get, /changes and /query; /set applies
//! `onSuccessUpdateEmail` and `onSuccessDestroyEmail` as the implicit Email/set whose
//! response follows its own (§7.5).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::email::{self, parse_id};
use super::email_set;
use super::emails::with_message;
use super::headers::{self, Form};
use super::mailbox::{cannot, ChangesArgs};
use super::methods::{self, fail, nullable, or_default, parse, Answer, Ctx, IDENTITY};
use super::service;

/// Submissions kept per account, and entries of its change log.
const MAX_KEPT: usize = 1000;
const MAX_LOG: usize = 4096;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Address {
    email: String,
    #[serde(default, deserialize_with = "or_default")]
    parameters: Option<Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    mail_from: Address,
    rcpt_to: Vec<Address>,
}

/// An EmailSubmission object.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct Submission {
    id: String,
    identity_id: String,
    email_id: String,
    thread_id: String,
    envelope: Envelope,
    send_at: String,
    undo_status: &'static str,
    delivery_status: Map<String, Value>,
    dsn_blob_ids: Vec<String>,
    mdn_blob_ids: Vec<String>,
}

/// What a client may give when it creates one.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Create {
    identity_id: String,
    email_id: String,
    envelope: Option<Envelope>,
}

/// One account's submissions, its state (a counter), and its log: (state, id, created).
#[derive(Debug, Default)]
struct Kept {
    list: VecDeque<Submission>,
    state: u64,
    log: VecDeque<(u64, String, bool)>,
    floor: u64,
    next_id: u64,
}

impl Kept {
    fn logged(&mut self, id: &str, created: bool) {
        self.state += 1;
        self.log.push_back((self.state, id.to_string(), created));
        while self.log.len() > MAX_LOG {
            if let Some((s, _, _)) = self.log.pop_front() {
                self.floor = s;
            }
        }
    }

    fn token(&self) -> String {
        format!("u{}", self.state)
    }
}

/// The submissions of every account (part of the JMAP service).
#[derive(Debug, Default)]
pub struct Submissions(Mutex<HashMap<String, Kept>>);

impl Submissions {
    fn with<R>(&self, account: &str, f: impl FnOnce(&mut Kept) -> R) -> R {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        f(all.entry(account.to_string()).or_default())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SetArgs {
    #[allow(dead_code)]
    account_id: String,
    if_in_state: Option<String>,
    create: Option<Map<String, Value>>,
    update: Option<Map<String, Value>>,
    destroy: Option<Vec<String>>,
    on_success_update_email: Option<Map<String, Value>>,
    on_success_destroy_email: Option<Vec<String>>,
}

/// The addresses of the message's header fields `names`, as an envelope's.
fn header_addresses(data: &[u8], names: &[&str]) -> Vec<Address> {
    let (head, _) = email::split(data);
    let fields = headers::fields(head);
    let mut out: Vec<Address> = Vec::new();
    for (_, v) in fields
        .iter()
        .filter(|(n, _)| names.iter().any(|x| n.eq_ignore_ascii_case(x)))
    {
        for a in headers::parse(v, Form::Addresses)
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(e) = a["email"].as_str().filter(|e| !e.is_empty()) {
                if !out.iter().any(|o| o.email.eq_ignore_ascii_case(e)) {
                    out.push(Address {
                        email: e.to_string(),
                        parameters: None,
                    });
                }
            }
        }
    }
    out
}

/// Sends one submission: the EmailSubmission made, or the SetError.
fn send(ctx: &Ctx<'_>, c: Create) -> Result<Submission, Value> {
    if c.identity_id != IDENTITY {
        return Err(json!({"type": "invalidProperties", "properties": ["identityId"]}));
    }
    let email_id = ctx.id(&c.email_id).unwrap_or_default();
    let data = ctx
        .with(|a| with_message(a, &email_id, |mb, i| mb.messages[i].data.clone()))
        .ok_or_else(|| json!({"type": "invalidProperties", "properties": ["emailId"]}))?;
    let envelope = match c.envelope {
        Some(e) => e,
        None => Envelope {
            mail_from: header_addresses(&data, &["sender"])
                .into_iter()
                .chain(header_addresses(&data, &["from"]))
                .next()
                .unwrap_or(Address {
                    email: ctx.user.to_string(),
                    parameters: None,
                }),
            rcpt_to: header_addresses(&data, &["to", "cc", "bcc"]),
        },
    };
    if envelope.rcpt_to.is_empty() {
        return Err(json!({"type": "noRecipients", "description": "no recipient"}));
    }
    let mut delivery_status = Map::new();
    let mut delivered = 0;
    for r in &envelope.rcpt_to {
        let ok = ctx.sh.users.is_local(&r.email) && ctx.sh.store.deliver(&r.email, &data).is_ok();
        delivered += usize::from(ok);
        let (reply, yes) = match ok {
            true => ("250 2.0.0 delivered", "yes"),
            false => ("550 5.1.1 not a recipient this server serves", "no"),
        };
        delivery_status.insert(
            r.email.clone(),
            json!({"smtpReply": reply, "delivered": yes, "displayed": "unknown"}),
        );
    }
    if delivered == 0 {
        return Err(
            json!({"type": "noRecipients", "description": "no recipient this server serves"}),
        );
    }
    let (uv, uid) = parse_id(&email_id).unwrap_or_default();
    Ok(Submission {
        id: String::new(),
        identity_id: c.identity_id,
        thread_id: format!("t{uv}-{uid}"),
        email_id,
        envelope,
        send_at: email::utc(std::time::SystemTime::now()),
        undo_status: "final",
        delivery_status,
        dsn_blob_ids: Vec::new(),
        mdn_blob_ids: Vec::new(),
    })
}

/// EmailSubmission/set, and the implicit Email/set when it asks for one.
pub fn set(ctx: &mut Ctx<'_>, args: &Map<String, Value>) -> Vec<(String, Value)> {
    let name = "EmailSubmission/set".to_string();
    let failed = |e: methods::Failure| {
        (
            "error".to_string(),
            json!({"type": e.kind, "description": e.description}),
        )
    };
    let s: SetArgs = match parse(args) {
        Ok(s) => s,
        Err(e) => return vec![failed(e)],
    };
    let kept = &service(ctx.sh).submissions;
    let old = kept.with(ctx.account, |k| k.token());
    if s.if_in_state.as_ref().is_some_and(|w| *w != old) {
        return vec![failed(fail("stateMismatch", "the state changed"))];
    }
    let (mut created, mut not_created) = (Map::new(), Map::new());
    // Submission id → its email, for the onSuccess* of those that succeeded.
    let mut succeeded: Vec<(String, String)> = Vec::new();
    for (cid, v) in s.create.iter().flatten() {
        let made = serde_json::from_value::<Create>(v.clone())
            .map_err(|e| json!({"type": "invalidProperties", "description": e.to_string()}))
            .and_then(|c| send(ctx, c));
        match made {
            Ok(mut sub) => {
                sub.id = kept.with(ctx.account, |k| {
                    k.next_id += 1;
                    let id = format!("S{}", k.next_id);
                    k.logged(&id, true);
                    id
                });
                ctx.created.insert(cid.clone(), sub.id.clone());
                succeeded.push((sub.id.clone(), sub.email_id.clone()));
                created.insert(
                    cid.clone(),
                    json!({"id": sub.id, "threadId": sub.thread_id, "sendAt": sub.send_at,
                           "undoStatus": sub.undo_status, "deliveryStatus": sub.delivery_status,
                           "dsnBlobIds": [], "mdnBlobIds": []}),
                );
                kept.with(ctx.account, |k| {
                    k.list.push_back(sub);
                    while k.list.len() > MAX_KEPT {
                        k.list.pop_front();
                    }
                });
            }
            Err(e) => {
                not_created.insert(cid.clone(), e);
            }
        }
    }
    let mut not_updated = Map::new();
    for (id, patch) in s.update.iter().flatten() {
        let known = kept.with(ctx.account, |k| k.list.iter().any(|x| x.id == *id));
        let e = match (known, patch.get("undoStatus")) {
            (false, _) => json!({"type": "notFound"}),
            (true, Some(v))
                if v == "canceled" && patch.as_object().is_some_and(|p| p.len() == 1) =>
            {
                json!({"type": "cannotUnsend", "description": "sent already (undoStatus final)"})
            }
            _ => json!({"type": "invalidProperties", "description": "only undoStatus may change"}),
        };
        not_updated.insert(id.clone(), e);
    }
    let (mut destroyed, mut not_destroyed) = (Vec::new(), Map::new());
    for id in s.destroy.iter().flatten() {
        let real = ctx.id(id).unwrap_or_default();
        let gone = kept.with(ctx.account, |k| {
            let at = k.list.iter().position(|x| x.id == real)?;
            let sub = k.list.remove(at)?;
            k.logged(&real, false);
            Some(sub.email_id)
        });
        match gone {
            Some(email) => {
                succeeded.push((real.clone(), email));
                destroyed.push(real);
            }
            None => {
                not_destroyed.insert(id.clone(), json!({"type": "notFound"}));
            }
        }
    }
    let new = kept.with(ctx.account, |k| k.token());
    let mut out = vec![(
        name,
        json!({"accountId": ctx.account, "oldState": old, "newState": new,
               "created": nullable(created), "notCreated": nullable(not_created),
               "updated": null, "notUpdated": nullable(not_updated),
               "destroyed": destroyed, "notDestroyed": nullable(not_destroyed)}),
    )];
    if let Some(email_set) = on_success(ctx, &s, &succeeded) {
        out.push(("Email/set".into(), email_set));
    }
    out
}

/// The implicit Email/set of `onSuccessUpdateEmail` and `onSuccessDestroyEmail` for the
/// submissions that succeeded; `None` when neither asks anything of them.
fn on_success(ctx: &Ctx<'_>, s: &SetArgs, succeeded: &[(String, String)]) -> Option<Value> {
    let email_of = |key: &str| {
        let id = ctx.id(key)?;
        succeeded
            .iter()
            .find(|(sid, _)| *sid == id)
            .map(|(_, e)| e.clone())
    };
    let update: Map<String, Value> = s
        .on_success_update_email
        .iter()
        .flatten()
        .filter_map(|(k, patch)| Some((email_of(k)?, patch.clone())))
        .collect();
    let destroy: Vec<String> = s
        .on_success_destroy_email
        .iter()
        .flatten()
        .filter_map(|k| email_of(k))
        .collect();
    if s.on_success_update_email.is_none() && s.on_success_destroy_email.is_none() {
        return None;
    }
    Some(ctx.with(|a| {
        let old = ctx.state(a);
        let mut r = email_set::apply(a, update.iter(), &destroy);
        r["accountId"] = json!(ctx.account);
        r["oldState"] = json!(old);
        r["newState"] = json!(ctx.state(a));
        r["created"] = Value::Null;
        r["notCreated"] = Value::Null;
        r
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct GetArgs {
    #[allow(dead_code)]
    account_id: String,
    ids: Option<Vec<String>>,
    properties: Option<Vec<String>>,
}

const PROPERTIES: &[&str] = &[
    "id",
    "identityId",
    "emailId",
    "threadId",
    "envelope",
    "sendAt",
    "undoStatus",
    "deliveryStatus",
    "dsnBlobIds",
    "mdnBlobIds",
];

pub fn get(ctx: &Ctx<'_>, args: &Map<String, Value>) -> Answer {
    let g: GetArgs = parse(args)?;
    let want = methods::ids_within_limit(g.ids)?;
    let properties = g
        .properties
        .unwrap_or_else(|| PROPERTIES.iter().map(|p| p.to_string()).collect());
    if let Some(p) = properties
        .iter()
        .find(|p| !PROPERTIES.contains(&p.as_str()))
    {
        return Err(fail("invalidArguments", format!("unknown property {p}")));
    }
    let kept = &service(ctx.sh).submissions;
    kept.with(ctx.account, |k| {
        let pick = |s: &Submission| {
            let all = serde_json::to_value(s).unwrap_or_default();
            let mut o = Map::new();
            o.insert("id".into(), json!(s.id));
            for p in &properties {
                o.insert(p.clone(), all[p.as_str()].clone());
            }
            Value::Object(o)
        };
        let (list, not_found): (Vec<Value>, Vec<String>) = match &want {
            None => (k.list.iter().map(pick).collect(), Vec::new()),
            Some(ids) => {
                let found = ids
                    .iter()
                    .filter_map(|id| k.list.iter().find(|s| s.id == *id).map(pick))
                    .collect();
                let missing = ids
                    .iter()
                    .filter(|id| !k.list.iter().any(|s| s.id == **id))
                    .cloned()
                    .collect();
                (found, missing)
            }
        };
        Ok(
            json!({"accountId": ctx.account, "state": k.token(), "list": list,
                  "notFound": not_found}),
        )
    })
}

pub fn changes(ctx: &Ctx<'_>, args: &Map<String, Value>) -> Answer {
    let c: ChangesArgs = parse(args)?;
    let max = methods::max_changes(c.max_changes)?.unwrap_or(usize::MAX);
    let since: u64 = c
        .since_state
        .strip_prefix('u')
        .and_then(|n| n.parse().ok())
        .ok_or_else(cannot)?;
    let kept = &service(ctx.sh).submissions;
    kept.with(ctx.account, |k| {
        if since < k.floor || since > k.state {
            return Err(cannot());
        }
        let (mut created, mut destroyed): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
        let mut upto = since;
        for (state, id, made) in k.log.iter().filter(|(s, _, _)| *s > since) {
            if created.len() + destroyed.len() >= max {
                break;
            }
            match made {
                true => created.push(id.clone()),
                false => match created.iter().position(|x| x == id) {
                    Some(at) => {
                        created.remove(at);
                    }
                    None => destroyed.push(id.clone()),
                },
            }
            upto = *state;
        }
        Ok(json!({"accountId": ctx.account, "oldState": c.since_state,
            "newState": format!("u{upto}"), "hasMoreChanges": upto < k.state,
            "created": created, "updated": [], "destroyed": destroyed}))
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct QueryArgs {
    #[allow(dead_code)]
    account_id: String,
    filter: Option<Map<String, Value>>,
    sort: Option<Vec<super::mailbox::Comparator>>,
    #[serde(default, deserialize_with = "or_default")]
    position: u64,
    limit: Option<u64>,
    #[serde(default, deserialize_with = "or_default")]
    calculate_total: bool,
}

/// EmailSubmission/query: by emailIds, threadIds, identityIds and undoStatus, in the
/// order sent (`sentAt`, the one sort).
pub fn query(ctx: &Ctx<'_>, args: &Map<String, Value>) -> Answer {
    let q: QueryArgs = parse(args)?;
    let mut ascending = true;
    for s in q.sort.iter().flatten() {
        if s.property != "sentAt" {
            return Err(fail("unsupportedSort", "sentAt is the one sort served"));
        }
        ascending = s.is_ascending;
    }
    let filter = q.filter.unwrap_or_default();
    let in_list = |key: &str, v: &str| {
        filter
            .get(key)
            .and_then(Value::as_array)
            .is_none_or(|l| l.iter().any(|x| x == v))
    };
    if let Some(k) = filter
        .keys()
        .find(|k| !["emailIds", "threadIds", "identityIds", "undoStatus"].contains(&k.as_str()))
    {
        return Err(fail("unsupportedFilter", k.clone()));
    }
    let kept = &service(ctx.sh).submissions;
    kept.with(ctx.account, |k| {
        let mut ids: Vec<&String> = k
            .list
            .iter()
            .filter(|s| {
                in_list("emailIds", &s.email_id)
                    && in_list("threadIds", &s.thread_id)
                    && in_list("identityIds", &s.identity_id)
                    && filter.get("undoStatus").is_none_or(|u| u == s.undo_status)
            })
            .map(|s| &s.id)
            .collect();
        if !ascending {
            ids.reverse();
        }
        let total = ids.len();
        let start = (q.position as usize).min(total);
        let page: Vec<&String> = ids[start..]
            .iter()
            .take(q.limit.map_or(usize::MAX, |l| l as usize))
            .copied()
            .collect();
        let mut out = json!({"accountId": ctx.account, "queryState": k.token(),
            "canCalculateChanges": false, "position": start, "ids": page});
        if q.calculate_total {
            out["total"] = total.into();
        }
        Ok(out)
    })
}
