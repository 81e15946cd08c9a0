//! JMAP method calls over the store: the request envelope (RFC 8620 §3.3), result
//! references (§3.7), and the methods of the load mix and of a client's basic flows.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde_json::{json, Map, Value};

use super::super::shared::Shared;
use super::super::store::{Account, Mailbox, StoredMessage};
use super::email::{self, email_id, mailbox_id, parse_id};
use super::{problem, MAX_CALLS, MAX_OBJECTS};

/// The session resource never changes: its state is constant.
pub const SESSION_STATE: &str = "0";

/// Uploaded blobs kept (the oldest go first), and their total size at most.
const MAX_BLOBS: usize = 256;
const MAX_BLOB_BYTES: usize = 64 << 20;

/// An upload: its account, its blob id, its bytes.
type Upload = (String, String, Arc<[u8]>);

/// Uploads, oldest first.
static BLOBS: Mutex<VecDeque<Upload>> = Mutex::new(VecDeque::new());
static NEXT_BLOB: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The state of `user`'s mail: it changes with every delivery, flag, move and removal.
pub fn state(sh: &Shared, user: &str) -> String {
    sh.store.with_account(user, |a| format!("s{}", version(a)))
}

fn version(a: &Account) -> u64 {
    a.inbox.version() + a.folders.values().map(Mailbox::version).sum::<u64>()
}

/// Every mailbox of an account, INBOX first, with its name.
fn mailboxes(a: &Account) -> impl Iterator<Item = (&str, &Mailbox)> {
    std::iter::once(("INBOX", &a.inbox)).chain(
        a.folders
            .iter()
            .map(|(n, m)| (n.as_str(), m))
            .filter(|(_, m)| !m.noselect),
    )
}

fn mailbox_by_id<'a>(a: &'a mut Account, id: &str) -> Option<&'a mut Mailbox> {
    let uv: u32 = id.strip_prefix('m')?.parse().ok()?;
    if a.inbox.uid_validity == uv {
        return Some(&mut a.inbox);
    }
    a.folders
        .values_mut()
        .find(|m| m.uid_validity == uv && !m.noselect)
}

/// A map of a /set response: null when empty.
fn nullable(m: Map<String, Value>) -> Value {
    if m.is_empty() {
        Value::Null
    } else {
        Value::Object(m)
    }
}

/// The keys of a JMAP set-of-ids object (`{"m7": true}`) whose value is true.
fn true_keys(v: &Value) -> Vec<&String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter(|(_, x)| **x == true)
                .map(|(k, _)| k)
                .collect()
        })
        .unwrap_or_default()
}

/// A method-level error response.
fn error(kind: &str, description: &str) -> (String, Value) {
    (
        "error".into(),
        json!({"type": kind, "description": description}),
    )
}

/// The value at `path` (a JSON pointer where `*` maps over an array) in `v`.
fn pointer(v: &Value, path: &str) -> Option<Value> {
    let path = path.strip_prefix('/')?;
    let (head, rest) = path
        .split_once('/')
        .map_or((path, None), |(h, r)| (h, Some(r)));
    let head = head.replace("~1", "/").replace("~0", "~");
    let next = |x: &Value| match rest {
        Some(r) => pointer(x, &format!("/{r}")),
        None => Some(x.clone()),
    };
    match (v, head.as_str()) {
        (Value::Array(items), "*") => {
            let mut out = Vec::new();
            for x in items {
                match next(x)? {
                    Value::Array(inner) => out.extend(inner),
                    one => out.push(one),
                }
            }
            Some(Value::Array(out))
        }
        (Value::Array(items), i) => next(items.get(i.parse::<usize>().ok()?)?),
        (Value::Object(m), k) => next(m.get(k)?),
        _ => None,
    }
}

/// Resolves the `#name` arguments of a call from earlier responses (RFC 8620 §3.7).
fn resolve(args: &mut Map<String, Value>, done: &[Value]) -> Result<(), (String, Value)> {
    let refs: Vec<String> = args
        .keys()
        .filter(|k| k.starts_with('#'))
        .cloned()
        .collect();
    for key in refs {
        let r = args.remove(&key).unwrap_or_default();
        let (Some(of), Some(name), Some(path)) = (
            r["resultOf"].as_str(),
            r["name"].as_str(),
            r["path"].as_str(),
        ) else {
            return Err(error("invalidResultReference", "resultOf, name and path"));
        };
        let found = done
            .iter()
            .find(|d| d[2] == of && d[0] == name)
            .and_then(|d| pointer(&d[1], path))
            .ok_or_else(|| {
                error(
                    "invalidResultReference",
                    &format!("no {name} result {of} at {path}"),
                )
            })?;
        // A single id where a list of them goes (`/created/k/id` for `ids`): the list of it.
        let found = match (&key[1..], found) {
            ("ids", v @ Value::String(_)) => Value::Array(vec![v]),
            (_, v) => v,
        };
        args.insert(key[1..].to_string(), found);
    }
    Ok(())
}

/// `POST /jmap/api/`: each method call in order; the HTTP status and the response.
pub fn api(sh: &Shared, user: &str, account: &str, req: &Value) -> (u16, Value) {
    let (Some(using), Some(calls)) = (req["using"].as_array(), req["methodCalls"].as_array())
    else {
        return (
            400,
            problem(
                "urn:ietf:params:jmap:error:notRequest",
                "using and methodCalls",
            ),
        );
    };
    let known = [
        "urn:ietf:params:jmap:core",
        "urn:ietf:params:jmap:mail",
        "urn:ietf:params:jmap:submission",
    ];
    if let Some(u) = using
        .iter()
        .find(|u| !u.as_str().is_some_and(|u| known.contains(&u)))
    {
        return (
            400,
            problem(
                "urn:ietf:params:jmap:error:unknownCapability",
                &format!("{u} is not served"),
            ),
        );
    }
    if calls.len() > MAX_CALLS {
        return (
            400,
            problem("urn:ietf:params:jmap:error:limit", "maxCallsInRequest"),
        );
    }
    let mut done: Vec<Value> = Vec::new();
    for call in calls {
        let (Some(name), Some(args), Some(id)) =
            (call[0].as_str(), call[1].as_object(), call[2].as_str())
        else {
            return (
                400,
                problem(
                    "urn:ietf:params:jmap:error:notRequest",
                    "a call is [name, arguments, id]",
                ),
            );
        };
        let mut args = args.clone();
        let (rname, result) = match resolve(&mut args, &done) {
            Err(e) => e,
            Ok(()) => call_one(sh, user, account, name, &args),
        };
        done.push(json!([rname, result, id]));
    }
    (
        200,
        json!({"methodResponses": done, "sessionState": SESSION_STATE}),
    )
}

fn call_one(
    sh: &Shared,
    user: &str,
    account: &str,
    name: &str,
    args: &Map<String, Value>,
) -> (String, Value) {
    if name == "Core/echo" {
        return (name.into(), Value::Object(args.clone()));
    }
    const KNOWN: &[&str] = &[
        "Mailbox/get",
        "Mailbox/query",
        "Mailbox/changes",
        "Email/query",
        "Email/get",
        "Email/set",
        "Email/import",
        "Email/changes",
        "Thread/get",
        "Identity/get",
        "EmailSubmission/set",
    ];
    if !KNOWN.contains(&name) {
        return error("unknownMethod", name);
    }
    if args.get("accountId").and_then(Value::as_str) != Some(account) {
        return error("accountNotFound", "the accountId of the session's account");
    }
    let r = match name {
        "Mailbox/get" => Ok(mailbox_get(sh, user, account, args)),
        "Mailbox/query" => Ok(mailbox_query(sh, user, account)),
        "Email/query" => email_query(sh, user, account, args),
        "Email/get" => email_get(sh, user, account, args),
        "Email/set" => email_set(sh, user, account, args),
        "Email/import" => email_import(sh, user, account, args),
        "Thread/get" => Ok(thread_get(sh, user, account, args)),
        "Identity/get" => Ok(
            json!({"accountId": account, "state": SESSION_STATE, "notFound": [],
            "list": [{"id": "i1", "name": "", "email": user, "replyTo": null, "bcc": null,
                      "textSignature": "", "htmlSignature": "", "mayDelete": false}]}),
        ),
        "EmailSubmission/set" => Ok(submission_set(sh, user, account, args)),
        "Email/changes" | "Mailbox/changes" => Err(error("cannotCalculateChanges", "query again")),
        _ => Err(error("unknownMethod", name)),
    };
    match r {
        Ok(v) => (name.into(), v),
        Err(e) => e,
    }
}

fn ids_arg(args: &Map<String, Value>) -> Result<Option<Vec<String>>, (String, Value)> {
    match args.get("ids") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) if a.len() > MAX_OBJECTS => {
            Err(error("requestTooLarge", "maxObjectsInGet"))
        }
        Some(Value::Array(a)) => Ok(Some(
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
        )),
        Some(_) => Err(error("invalidArguments", "ids")),
    }
}

fn mailbox_get(sh: &Shared, user: &str, account: &str, args: &Map<String, Value>) -> Value {
    let want = ids_arg(args).ok().flatten();
    let state = state(sh, user);
    sh.store.with_account(user, |a| {
        let mut list = Vec::new();
        for (i, (name, mb)) in mailboxes(a).enumerate() {
            let id = mailbox_id(mb.uid_validity);
            if want.as_ref().is_some_and(|w| !w.contains(&id)) {
                continue;
            }
            let unread = mb
                .messages
                .iter()
                .filter(|m| m.flags & super::super::store::flags::SEEN == 0)
                .count();
            list.push(json!({
                "id": id, "name": name, "parentId": null,
                "role": if i == 0 { Value::from("inbox") } else { Value::Null },
                "sortOrder": i, "totalEmails": mb.messages.len(), "unreadEmails": unread,
                "totalThreads": mb.messages.len(), "unreadThreads": unread,
                "myRights": {"mayReadItems": true, "mayAddItems": true, "mayRemoveItems": true,
                    "maySetSeen": true, "maySetKeywords": true, "mayCreateChild": false,
                    "mayRename": false, "mayDelete": false, "maySubmit": true},
                "isSubscribed": true,
            }));
        }
        let found: Vec<&str> = list.iter().filter_map(|m| m["id"].as_str()).collect();
        let not_found: Vec<String> = want
            .iter()
            .flatten()
            .filter(|w| !found.contains(&w.as_str()))
            .cloned()
            .collect();
        json!({"accountId": account, "state": state, "list": list, "notFound": not_found})
    })
}

fn mailbox_query(sh: &Shared, user: &str, account: &str) -> Value {
    let ids: Vec<String> = sh.store.with_account(user, |a| {
        mailboxes(a)
            .map(|(_, m)| mailbox_id(m.uid_validity))
            .collect()
    });
    json!({"accountId": account, "queryState": state(sh, user), "canCalculateChanges": false,
           "position": 0, "ids": ids, "total": ids.len()})
}

fn email_query(
    sh: &Shared,
    user: &str,
    account: &str,
    args: &Map<String, Value>,
) -> Result<Value, (String, Value)> {
    let filter = args.get("filter").cloned().unwrap_or(Value::Null);
    let in_mailbox = filter["inMailbox"].as_str().map(str::to_string);
    if filter
        .as_object()
        .is_some_and(|f| f.keys().any(|k| k != "inMailbox"))
    {
        return Err(error(
            "unsupportedFilter",
            "inMailbox is the one filter served",
        ));
    }
    let mut ascending = true;
    for s in args
        .get("sort")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if s["property"] != "receivedAt" {
            return Err(error(
                "unsupportedSort",
                "receivedAt is the one sort served",
            ));
        }
        ascending = s["isAscending"].as_bool().unwrap_or(true);
    }
    let mut found: Vec<(std::time::SystemTime, u32, u32)> = sh.store.with_account(user, |a| {
        mailboxes(a)
            .filter(|(_, mb)| {
                in_mailbox
                    .as_deref()
                    .is_none_or(|id| id == mailbox_id(mb.uid_validity))
            })
            .flat_map(|(_, mb)| {
                mb.messages
                    .iter()
                    .map(|m| (m.received, mb.uid_validity, m.uid))
            })
            .collect()
    });
    found.sort();
    if !ascending {
        found.reverse();
    }
    let total = found.len();
    let position = args.get("position").and_then(Value::as_i64).unwrap_or(0);
    let start = if position < 0 {
        total.saturating_sub(position.unsigned_abs() as usize)
    } else {
        (position as usize).min(total)
    };
    let limit = args
        .get("limit")
        .and_then(Value::as_u64)
        .map_or(MAX_OBJECTS, |l| (l as usize).min(MAX_OBJECTS));
    let ids: Vec<String> = found[start..]
        .iter()
        .take(limit)
        .map(|(_, uv, uid)| email_id(*uv, *uid))
        .collect();
    let mut out = json!({"accountId": account, "queryState": state(sh, user), "canCalculateChanges": false,
                         "position": start, "ids": ids});
    if args.get("calculateTotal").and_then(Value::as_bool) == Some(true) {
        out["total"] = total.into();
    }
    Ok(out)
}

/// Runs `f` on the message an email (or blob, or thread) id names: its mailbox and index.
fn with_message<R>(
    a: &mut Account,
    id: &str,
    f: impl FnOnce(&mut Mailbox, usize) -> R,
) -> Option<R> {
    let (uv, uid) = parse_id(id)?;
    let mb = mailbox_by_id(a, &mailbox_id(uv))?;
    let i = mb.find(uid)?;
    Some(f(mb, i))
}

fn email_get(
    sh: &Shared,
    user: &str,
    account: &str,
    args: &Map<String, Value>,
) -> Result<Value, (String, Value)> {
    let mut properties: Vec<String> = match args.get("properties").and_then(Value::as_array) {
        Some(p) => p
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        None => email::DEFAULT.iter().map(|s| s.to_string()).collect(),
    };
    if !properties.iter().any(|p| p == "id") {
        properties.insert(0, "id".into());
    }
    let values = [
        "fetchTextBodyValues",
        "fetchAllBodyValues",
        "fetchHTMLBodyValues",
    ]
    .iter()
    .any(|k| args.get(*k).and_then(Value::as_bool) == Some(true));
    let max_value = args
        .get("maxBodyValueBytes")
        .and_then(Value::as_u64)
        .unwrap_or(0) as usize;
    let state = state(sh, user);
    let want = ids_arg(args)?;
    Ok(sh.store.with_account(user, |a| {
        let ids: Vec<String> = match want {
            Some(w) => w,
            None => mailboxes(a)
                .flat_map(|(_, mb)| mb.messages.iter().map(|m| email_id(mb.uid_validity, m.uid)))
                .take(MAX_OBJECTS)
                .collect(),
        };
        let (mut list, mut not_found) = (Vec::new(), Vec::new());
        for id in ids {
            match with_message(a, &id, |mb, i| {
                email::object(mb, i, &properties, values, max_value)
            }) {
                Some(o) => list.push(o),
                None => not_found.push(id),
            }
        }
        json!({"accountId": account, "state": state, "list": list, "notFound": not_found})
    }))
}

/// One update of Email/set: keywords (whole or by path) and mailboxIds (a move); the new
/// id when it moved, or why not.
fn update(a: &mut Account, id: &str, patch: &Map<String, Value>) -> Result<Option<String>, Value> {
    let not_found = || json!({"type": "notFound"});
    let (uv, _) = parse_id(id).ok_or_else(not_found)?;
    let mut target: Option<String> = None;
    let mut dropped = false;
    for (k, v) in patch {
        if let Some(mid) = k.strip_prefix("mailboxIds/") {
            match v {
                Value::Bool(true) => target = Some(mid.to_string()),
                _ if mid == mailbox_id(uv) => dropped = true,
                _ => {}
            }
        } else if k == "mailboxIds" {
            let on = true_keys(v);
            match on.as_slice() {
                [one] => {
                    target = Some((*one).clone());
                    dropped = true;
                }
                _ => {
                    return Err(
                        json!({"type": "invalidProperties", "properties": ["mailboxIds"], "description": "exactly one mailbox (maxMailboxesPerEmail 1)"}),
                    )
                }
            }
        } else if k != "keywords" && !k.starts_with("keywords/") {
            return Err(json!({"type": "invalidProperties", "properties": [k]}));
        }
    }
    with_message(a, id, |mb, i| -> Result<(), Value> {
        for (k, v) in patch {
            let changes: Vec<(String, bool)> = if k == "keywords" {
                let wanted: Vec<String> = v.as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default();
                let mut c: Vec<(String, bool)> = email::keywords(mb, &mb.messages[i]).keys().filter(|k| !wanted.contains(k)).map(|k| (k.clone(), false)).collect();
                c.extend(wanted.into_iter().map(|k| (k, true)));
                c
            } else if let Some(name) = k.strip_prefix("keywords/") {
                vec![(name.to_string(), *v == true)]
            } else {
                continue;
            };
            for (name, on) in changes {
                if !email::set_keyword(mb, i, &name, on) {
                    return Err(json!({"type": "overQuota", "description": "too many keywords in this mailbox"}));
                }
            }
        }
        mb.touch();
        Ok(())
    })
    .ok_or_else(not_found)??;
    let Some(to) = target.filter(|t| *t != mailbox_id(uv) && dropped) else {
        return Ok(None);
    };
    // A move: out of its mailbox, into the other (its keywords by name).
    let (m, kw) = with_message(a, id, |mb, i| {
        let kw = email::keywords(mb, &mb.messages[i]);
        let m = mb.messages[i].clone();
        let uid = m.uid;
        mb.remove_where(|x| x.uid == uid);
        (m, kw)
    })
    .ok_or_else(not_found)?;
    let Some(dest) = mailbox_by_id(a, &to) else {
        return Err(
            json!({"type": "invalidProperties", "properties": ["mailboxIds"], "description": "no such mailbox"}),
        );
    };
    let uid = dest.push(StoredMessage::new(0, m.data.clone(), m.received));
    let i = dest.find(uid).expect("just pushed");
    for (name, _) in kw {
        email::set_keyword(dest, i, &name, true);
    }
    Ok(Some(email_id(dest.uid_validity, uid)))
}

fn email_set(
    sh: &Shared,
    user: &str,
    account: &str,
    args: &Map<String, Value>,
) -> Result<Value, (String, Value)> {
    let old = state(sh, user);
    if let Some(want) = args.get("ifInState").and_then(Value::as_str) {
        if want != old {
            return Err(error("stateMismatch", "the state changed"));
        }
    }
    let (mut updated, mut not_updated, mut destroyed, mut not_destroyed) =
        (Map::new(), Map::new(), Vec::new(), Map::new());
    let mut not_created = Map::new();
    for cid in args
        .get("create")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
    {
        not_created.insert(
            cid.clone(),
            json!({"type": "forbidden", "description": "create messages with Email/import"}),
        );
    }
    sh.store.with_account(user, |a| {
        for (id, patch) in args
            .get("update")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let patch = patch.as_object().cloned().unwrap_or_default();
            match update(a, id, &patch) {
                Ok(None) => {
                    updated.insert(id.clone(), Value::Null);
                }
                Ok(Some(new)) => {
                    updated.insert(id.clone(), json!({"id": new}));
                }
                Err(e) => {
                    not_updated.insert(id.clone(), e);
                }
            }
        }
        for id in args
            .get("destroy")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            let gone = with_message(a, id, |mb, i| {
                let uid = mb.messages[i].uid;
                mb.remove_where(|m| m.uid == uid);
            });
            match gone {
                Some(()) => destroyed.push(id.to_string()),
                None => {
                    not_destroyed.insert(id.to_string(), json!({"type": "notFound"}));
                }
            }
        }
    });
    Ok(
        json!({"accountId": account, "oldState": old, "newState": state(sh, user),
        "created": null, "updated": nullable(updated), "destroyed": destroyed,
        "notCreated": nullable(not_created), "notUpdated": nullable(not_updated), "notDestroyed": nullable(not_destroyed)}),
    )
}

/// The bytes of a blob: an upload of this account, or a message (`b7-12`).
fn blob(sh: &Shared, user: &str, account: &str, id: &str) -> Option<Arc<[u8]>> {
    let uploaded = BLOBS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(acc, bid, _)| acc == account && bid == id)
        .map(|(_, _, b)| b.clone());
    uploaded.or_else(|| {
        id.starts_with('b')
            .then(|| {
                sh.store.with_account(user, |a| {
                    with_message(a, id, |mb, i| mb.messages[i].data.clone())
                })
            })
            .flatten()
    })
}

fn email_import(
    sh: &Shared,
    user: &str,
    account: &str,
    args: &Map<String, Value>,
) -> Result<Value, (String, Value)> {
    let old = state(sh, user);
    let (mut created, mut not_created) = (Map::new(), Map::new());
    for (cid, e) in args
        .get("emails")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let Some(data) = e["blobId"]
            .as_str()
            .and_then(|b| blob(sh, user, account, b))
        else {
            not_created.insert(cid.clone(), json!({"type": "blobNotFound"}));
            continue;
        };
        let on = true_keys(&e["mailboxIds"]);
        let [mid] = on.as_slice() else {
            not_created.insert(
                cid.clone(),
                json!({"type": "invalidProperties", "properties": ["mailboxIds"]}),
            );
            continue;
        };
        let keywords: Vec<String> = e["keywords"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        let made = sh.store.with_account(user, |a| {
            let mb = mailbox_by_id(a, mid)?;
            let uid = mb.push(StoredMessage::new(
                0,
                data.clone(),
                std::time::SystemTime::now(),
            ));
            let i = mb.find(uid)?;
            for k in &keywords {
                email::set_keyword(mb, i, k, true);
            }
            Some((mb.uid_validity, uid))
        });
        match made {
            Some((uv, uid)) => {
                created.insert(
                    cid.clone(),
                    json!({"id": email_id(uv, uid), "blobId": format!("b{uv}-{uid}"),
                    "threadId": format!("t{uv}-{uid}"), "size": data.len()}),
                );
            }
            None => {
                not_created.insert(
                    cid.clone(),
                    json!({"type": "invalidProperties", "properties": ["mailboxIds"]}),
                );
            }
        }
    }
    Ok(
        json!({"accountId": account, "oldState": old, "newState": state(sh, user),
              "created": nullable(created), "notCreated": nullable(not_created)}),
    )
}

fn thread_get(sh: &Shared, user: &str, account: &str, args: &Map<String, Value>) -> Value {
    let want = ids_arg(args).ok().flatten().unwrap_or_default();
    let (mut list, mut not_found) = (Vec::new(), Vec::new());
    sh.store.with_account(user, |a| {
        for t in want {
            match with_message(a, &t, |mb, i| email_id(mb.uid_validity, mb.messages[i].uid)) {
                Some(e) => list.push(json!({"id": t, "emailIds": [e]})),
                None => not_found.push(t),
            }
        }
    });
    json!({"accountId": account, "state": state(sh, user), "list": list, "notFound": not_found})
}

/// EmailSubmission/set: each created submission delivers its email to its envelope's
/// recipients (or its To and Cc), those this server serves.
fn submission_set(sh: &Shared, user: &str, account: &str, args: &Map<String, Value>) -> Value {
    let (mut created, mut not_created) = (Map::new(), Map::new());
    for (cid, s) in args
        .get("create")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let Some(data) = s["emailId"].as_str().and_then(|id| {
            sh.store.with_account(user, |a| {
                with_message(a, id, |mb, i| mb.messages[i].data.clone())
            })
        }) else {
            not_created.insert(
                cid.clone(),
                json!({"type": "invalidProperties", "properties": ["emailId"]}),
            );
            continue;
        };
        let mut rcpts: Vec<String> = s["envelope"]["rcptTo"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["email"].as_str().map(str::to_string))
            .collect();
        if rcpts.is_empty() {
            for h in ["to", "cc"] {
                if let Some(v) = email::header(&data, h) {
                    rcpts.extend(v.split(',').map(|a| {
                        a.rsplit('<')
                            .next()
                            .unwrap_or(a)
                            .trim_matches(['>', ' '])
                            .to_string()
                    }));
                }
            }
        }
        let delivered = rcpts
            .iter()
            .filter(|r| sh.users.is_local(r) && sh.store.deliver(r, &data).is_ok())
            .count();
        if delivered == 0 {
            not_created.insert(
                cid.clone(),
                json!({"type": "noRecipients", "description": "no recipient this server serves"}),
            );
            continue;
        }
        created.insert(
            cid.clone(),
            json!({"id": format!("s{}", sh.next_id()), "undoStatus": "final"}),
        );
    }
    json!({"accountId": account, "oldState": SESSION_STATE, "newState": SESSION_STATE,
           "created": nullable(created), "notCreated": nullable(not_created),
           "updated": null, "destroyed": null, "notUpdated": null, "notDestroyed": null})
}

/// `POST /jmap/upload/{account}/`: the blob kept (bounded); 201 and its id.
pub fn upload(account: &str, path: &str, body: &[u8]) -> (u16, Value) {
    let for_account = path
        .trim_start_matches("/jmap/upload/")
        .trim_end_matches('/');
    if for_account != account {
        return (
            404,
            problem("about:blank", "upload to the session's account"),
        );
    }
    if body.len() > super::MAX_UPLOAD {
        return (
            413,
            problem("urn:ietf:params:jmap:error:limit", "maxSizeUpload"),
        );
    }
    let id = format!(
        "up{}",
        NEXT_BLOB.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let mut blobs = BLOBS.lock().unwrap_or_else(|p| p.into_inner());
    blobs.push_back((account.to_string(), id.clone(), Arc::from(body)));
    while blobs.len() > MAX_BLOBS || blobs.iter().map(|b| b.2.len()).sum::<usize>() > MAX_BLOB_BYTES
    {
        blobs.pop_front();
    }
    (
        201,
        json!({"accountId": account, "blobId": id, "type": "message/rfc822", "size": body.len()}),
    )
}

/// `GET /jmap/download/{account}/{blob}/{name}`: the blob's bytes.
pub fn download(sh: &Shared, user: &str, account: &str, path: &str) -> Option<Arc<[u8]>> {
    let mut parts = path.trim_start_matches("/jmap/download/").split('/');
    let (acc, id) = (parts.next()?, parts.next()?);
    if acc != account {
        return None;
    }
    blob(sh, user, account, id)
}
