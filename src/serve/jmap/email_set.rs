//! Changing Emails (RFC 8621 §4.6, §4.8): Email/set (creation from properties, keywords,
//! a move by `mailboxIds`, destroy), Email/import of an uploaded blob, and the blobs
//! themselves: uploads (kept in memory, bounded), messages (`b7-12`) and their parts
//! (`b7-12-1`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde_json::{json, Map, Value};

use super::super::shared::Shared;
use super::super::store::{Account, StoredMessage};
use super::email::{self, email_id, mailbox_id, parse_id};
use super::emails::{mailbox_by_id, with_message};
use super::methods::{fail, nullable, true_keys, Answer, Ctx};
use super::{body, compose, problem};

/// Uploaded blobs kept (the oldest go first), and their total size at most.
const MAX_BLOBS: usize = 256;
const MAX_BLOB_BYTES: usize = 64 << 20;

/// An upload: its account, its blob id, its bytes.
type Upload = (String, String, Arc<[u8]>);

/// Uploads, oldest first.
static BLOBS: Mutex<VecDeque<Upload>> = Mutex::new(VecDeque::new());
static NEXT_BLOB: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

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
    if mailbox_by_id(a, &to).is_none() {
        return Err(
            json!({"type": "invalidProperties", "properties": ["mailboxIds"], "description": "no such mailbox"}),
        );
    }
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

/// Email/set: creations, updates and destroys (`ifInState` checked against the Email
/// state).
pub fn set(ctx: &mut Ctx<'_>, args: &Map<String, Value>) -> Answer {
    let old = ctx.with(|a| ctx.state(a));
    if let Some(want) = args.get("ifInState").and_then(Value::as_str) {
        if want != old {
            return Err(fail("stateMismatch", "the state changed"));
        }
    }
    // Creations first, so that updates and destroys may name them (RFC 8620 §5.3).
    let (created, not_created) = create(ctx, args.get("create").and_then(Value::as_object));
    let outcome = ctx.with(|a| {
        let update = args.get("update").and_then(Value::as_object);
        let destroy: Vec<String> = args
            .get("destroy")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter_map(|id| ctx.id(id))
            .collect();
        let update: Vec<(String, &Value)> = update
            .into_iter()
            .flatten()
            .filter_map(|(id, patch)| Some((ctx.id(id)?, patch)))
            .collect();
        let mut r = apply(a, update.iter().map(|(id, p)| (id, *p)), &destroy);
        r["newState"] = json!(ctx.state(a));
        r
    });
    let mut r = outcome;
    r["accountId"] = json!(ctx.account);
    r["oldState"] = json!(old);
    r["created"] = nullable(created);
    r["notCreated"] = nullable(not_created);
    Ok(r)
}

/// The blobs of an account, for the parts of a created message.
struct AccountBlobs<'a>(&'a Shared, &'a str, &'a str);

impl compose::Blobs for AccountBlobs<'_> {
    fn blob(&self, id: &str) -> Option<Arc<[u8]>> {
        blob(self.0, self.1, self.2, id)
    }
}

/// Email/set's creations: each a message made from its properties, stored in its one
/// mailbox with its keywords. The created and notCreated maps.
fn create(
    ctx: &mut Ctx<'_>,
    create: Option<&Map<String, Value>>,
) -> (Map<String, Value>, Map<String, Value>) {
    let (mut created, mut not_created) = (Map::new(), Map::new());
    for (cid, e) in create.into_iter().flatten() {
        let Some(e) = e.as_object() else {
            not_created.insert(cid.clone(), json!({"type": "invalidProperties"}));
            continue;
        };
        let on = true_keys(e.get("mailboxIds").unwrap_or(&Value::Null));
        let [mid] = on.as_slice() else {
            not_created.insert(
                cid.clone(),
                json!({"type": "invalidProperties", "properties": ["mailboxIds"],
                       "description": "exactly one mailbox (maxMailboxesPerEmail 1)"}),
            );
            continue;
        };
        let blobs = AccountBlobs(ctx.sh, ctx.user, ctx.account);
        let data = match compose::message(e, &blobs, &ctx.sh.hostname, ctx.sh.next_id()) {
            Ok(d) => Arc::<[u8]>::from(d),
            Err(r) => {
                not_created.insert(
                    cid.clone(),
                    json!({"type": r.kind, "properties": r.properties, "description": r.description}),
                );
                continue;
            }
        };
        store_new(ctx, (cid, e, mid, &data), &mut created, &mut not_created);
    }
    (created, not_created)
}

/// Applies updates and destroys to the account: the /set response's updated, destroyed,
/// notUpdated and notDestroyed.
pub fn apply<'a>(
    a: &mut Account,
    update: impl Iterator<Item = (&'a String, &'a Value)>,
    destroy: &[String],
) -> Value {
    let (mut updated, mut not_updated, mut destroyed, mut not_destroyed) =
        (Map::new(), Map::new(), Vec::new(), Map::new());
    for (id, patch) in update {
        let patch = patch.as_object().cloned().unwrap_or_default();
        match self::update(a, id, &patch) {
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
    for id in destroy {
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
    json!({"updated": nullable(updated), "destroyed": destroyed,
           "notUpdated": nullable(not_updated), "notDestroyed": nullable(not_destroyed)})
}

/// The bytes of a blob: an upload of this account, a message (`b7-12`) or a part of one
/// (`b7-12-1`).
fn blob(sh: &Shared, user: &str, account: &str, id: &str) -> Option<Arc<[u8]>> {
    let uploaded = BLOBS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(acc, bid, _)| acc == account && bid == id)
        .map(|(_, _, b)| b.clone());
    if uploaded.is_some() || !id.starts_with('b') {
        return uploaded;
    }
    let (message, part) = match id.match_indices('-').nth(1) {
        Some((at, _)) => (&id[..at], Some(id[at + 1..].parse::<u32>().ok()?)),
        None => (id, None),
    };
    let data = sh.store.with_account(user, |a| {
        with_message(a, message, |mb, i| mb.messages[i].data.clone())
    })?;
    match part {
        None => Some(data),
        Some(n) => body::part_content(&data, n).map(Arc::from),
    }
}

/// Stores a new message (Email/set's create, Email/import) in its one mailbox with its
/// keywords, and says so under its creation id: created (its ids and size, the id kept
/// for `#cid` references later in the request) or not (no such mailbox).
fn store_new(
    ctx: &mut Ctx<'_>,
    (cid, e, mid, data): (&String, &Map<String, Value>, &str, &Arc<[u8]>),
    created: &mut Map<String, Value>,
    not_created: &mut Map<String, Value>,
) {
    let keywords: Vec<String> = e
        .get("keywords")
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let made = ctx.with(|a| {
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
            ctx.created.insert(cid.clone(), email_id(uv, uid));
            created.insert(
                cid.clone(),
                json!({"id": email_id(uv, uid), "blobId": format!("b{uv}-{uid}"),
                       "threadId": format!("t{uv}-{uid}"), "size": data.len()}),
            );
        }
        None => {
            not_created.insert(
                cid.clone(),
                json!({"type": "invalidProperties", "properties": ["mailboxIds"],
                       "description": "no such mailbox"}),
            );
        }
    }
}

/// Email/import: each uploaded (or stored) blob as a new message in its one mailbox.
pub fn import(ctx: &mut Ctx<'_>, args: &Map<String, Value>) -> Answer {
    let (sh, user, account) = (ctx.sh, ctx.user, ctx.account);
    let old = ctx.with(|a| ctx.state(a));
    if let Some(want) = args.get("ifInState").and_then(Value::as_str) {
        if want != old {
            return Err(fail("stateMismatch", "the state changed"));
        }
    }
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
        let Some(e) = e.as_object() else {
            not_created.insert(cid.clone(), json!({"type": "invalidProperties"}));
            continue;
        };
        store_new(ctx, (cid, e, mid, &data), &mut created, &mut not_created);
    }
    let new = ctx.with(|a| ctx.state(a));
    Ok(
        json!({"accountId": account, "oldState": old, "newState": new,
              "created": nullable(created), "notCreated": nullable(not_created)}),
    )
}

/// `POST /jmap/upload/{account}/`: the blob kept (bounded); 201 and its id.
pub fn upload(account: &str, path: &str, body: &[u8], kind: Option<&str>) -> (u16, Value) {
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
        json!({"accountId": account, "blobId": id, "size": body.len(),
               "type": kind.unwrap_or("application/octet-stream")}),
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
