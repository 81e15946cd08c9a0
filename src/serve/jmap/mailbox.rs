//! JMAP Mailboxes (RFC 8621 §2): every selectable mailbox of the account, its name the
//! last level of its IMAP name under its nearest selectable parent (`parentId`), its role
//! from its name (INBOX; `Sent`, `Drafts`, `Trash`, `Junk`, `Archive` at the top level,
//! as IMAP's SPECIAL-USE says). Mailbox/get, Mailbox/query (filters and sorts of §2.3,
//! trees included), Mailbox/changes.

use std::cmp::Ordering;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::super::imap::special_use;
use super::super::store::{flags, Account};
use super::email::mailbox_id;
use super::methods::{self, fail, or_default, parse, Answer, Ctx, Failure};
use super::{service, sync};

/// A Mailbox as JMAP shows it.
struct Info {
    id: String,
    name: String,
    parent: Option<String>,
    role: Option<String>,
    sort_order: usize,
    total: usize,
    unread: usize,
    subscribed: bool,
}

const PROPERTIES: &[&str] = &[
    "id",
    "name",
    "parentId",
    "role",
    "sortOrder",
    "totalEmails",
    "unreadEmails",
    "totalThreads",
    "unreadThreads",
    "myRights",
    "isSubscribed",
];

/// The account's Mailboxes, INBOX first, then by IMAP name.
fn infos(a: &Account) -> Vec<Info> {
    let selectable: Vec<(&str, u32)> = sync::all_mailboxes(a)
        .filter(|(_, mb)| !mb.noselect)
        .map(|(n, mb)| (n, mb.uid_validity))
        .collect();
    let mut roles_given: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for (i, (full, mb)) in sync::all_mailboxes(a)
        .filter(|(_, mb)| !mb.noselect)
        .enumerate()
    {
        // The nearest selectable ancestor is the parent; the name is the rest.
        let parent = full
            .match_indices('/')
            .rev()
            .find_map(|(at, _)| selectable.iter().find(|(n, _)| *n == &full[..at]));
        let name = match parent {
            Some((p, _)) => &full[p.len() + 1..],
            None => full,
        };
        let role = match (i, parent) {
            (0, _) => Some("inbox".to_string()),
            (_, None) => special_use(full).map(|r| r.trim_start_matches('\\').to_ascii_lowercase()),
            _ => None,
        }
        .filter(|r| !roles_given.contains(r));
        roles_given.extend(role.clone());
        out.push(Info {
            id: mailbox_id(mb.uid_validity),
            name: name.to_string(),
            parent: parent.map(|(_, uv)| mailbox_id(*uv)),
            role,
            sort_order: i,
            total: mb.messages.len(),
            unread: mb
                .messages
                .iter()
                .filter(|m| m.flags & flags::SEEN == 0)
                .count(),
            subscribed: a.subscribed.contains(full),
        });
    }
    out
}

fn object(m: &Info, properties: &[String]) -> Value {
    let mut o = Map::new();
    for p in properties {
        let v = match p.as_str() {
            "id" => json!(m.id),
            "name" => json!(m.name),
            "parentId" => json!(m.parent),
            "role" => json!(m.role),
            "sortOrder" => json!(m.sort_order),
            "totalEmails" | "totalThreads" => json!(m.total),
            "unreadEmails" | "unreadThreads" => json!(m.unread),
            "myRights" => {
                json!({"mayReadItems": true, "mayAddItems": true, "mayRemoveItems": true,
                "maySetSeen": true, "maySetKeywords": true, "mayCreateChild": false,
                "mayRename": false, "mayDelete": false, "maySubmit": true})
            }
            "isSubscribed" => json!(m.subscribed),
            _ => continue,
        };
        o.insert(p.clone(), v);
    }
    Value::Object(o)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct GetArgs {
    #[allow(dead_code)]
    account_id: String,
    ids: Option<Vec<String>>,
    properties: Option<Vec<String>>,
}

pub fn get(ctx: &Ctx<'_>, args: &Map<String, Value>) -> Answer {
    let a: GetArgs = parse(args)?;
    let want = methods::ids_within_limit(a.ids)?;
    let properties = methods::properties(a.properties, PROPERTIES, |p| PROPERTIES.contains(&p))?;
    ctx.with(|acc| {
        let all = infos(acc);
        let list: Vec<Value> = all
            .iter()
            .filter(|m| want.as_ref().is_none_or(|w| w.contains(&m.id)))
            .map(|m| object(m, &properties))
            .collect();
        let not_found: Vec<&String> = want
            .iter()
            .flatten()
            .filter(|w| !all.iter().any(|m| &m.id == *w))
            .collect();
        Ok(
            json!({"accountId": ctx.account, "state": ctx.state(acc), "list": list,
                   "notFound": not_found}),
        )
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct QueryArgs {
    #[allow(dead_code)]
    account_id: String,
    filter: Option<Value>,
    sort: Option<Vec<Comparator>>,
    #[serde(default, deserialize_with = "or_default")]
    position: i64,
    anchor: Option<String>,
    #[serde(default, deserialize_with = "or_default")]
    anchor_offset: i64,
    limit: Option<u64>,
    #[serde(default, deserialize_with = "or_default")]
    calculate_total: bool,
    #[serde(default, deserialize_with = "or_default")]
    sort_as_tree: bool,
    #[serde(default, deserialize_with = "or_default")]
    filter_as_tree: bool,
}

/// A sort comparator (RFC 8620 §5.5); other members a client adds are ignored.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Comparator {
    pub property: String,
    #[serde(default = "yes")]
    pub is_ascending: bool,
    #[allow(dead_code)]
    pub collation: Option<String>,
}

fn yes() -> bool {
    true
}

/// Does Mailbox `m` match filter `f` (a FilterCondition or FilterOperator, §2.3)?
fn matches(f: &Value, m: &Info) -> Result<bool, Failure> {
    let Some(cond) = f.as_object() else {
        return Err(fail("invalidArguments", "a filter is an object"));
    };
    if let Some(op) = cond.get("operator") {
        let parts = cond
            .get("conditions")
            .and_then(Value::as_array)
            .ok_or_else(|| fail("invalidArguments", "an operator needs conditions"))?;
        let results = parts
            .iter()
            .map(|c| matches(c, m))
            .collect::<Result<Vec<bool>, Failure>>()?;
        return match op.as_str() {
            Some("AND") => Ok(results.iter().all(|r| *r)),
            Some("OR") => Ok(results.iter().any(|r| *r)),
            Some("NOT") => Ok(!results.iter().any(|r| *r)),
            _ => Err(fail("unsupportedFilter", format!("operator {op}"))),
        };
    }
    for (k, v) in cond {
        let ok = match (k.as_str(), v) {
            ("parentId", Value::Null) => m.parent.is_none(),
            ("parentId", Value::String(p)) => m.parent.as_deref() == Some(p),
            ("name", Value::String(n)) => m
                .name
                .to_ascii_lowercase()
                .contains(&n.to_ascii_lowercase()),
            ("role", Value::Null) => m.role.is_none(),
            ("role", Value::String(r)) => m.role.as_deref() == Some(r),
            ("hasAnyRole", Value::Bool(b)) => m.role.is_some() == *b,
            ("isSubscribed", Value::Bool(b)) => m.subscribed == *b,
            _ => {
                return Err(fail(
                    "unsupportedFilter",
                    format!("{k}: parentId, name, role, hasAnyRole and isSubscribed are served"),
                ))
            }
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

fn compare(sort: &[Comparator], a: &Info, b: &Info) -> Ordering {
    for c in sort {
        let o = match c.property.as_str() {
            "sortOrder" => a.sort_order.cmp(&b.sort_order),
            _ => a
                .name
                .to_ascii_lowercase()
                .cmp(&b.name.to_ascii_lowercase()),
        };
        let o = if c.is_ascending { o } else { o.reverse() };
        if o != Ordering::Equal {
            return o;
        }
    }
    a.sort_order.cmp(&b.sort_order)
}

/// `list` (sorted) with every parent before its children, siblings in sorted order.
fn as_tree(list: Vec<&Info>) -> Vec<&Info> {
    fn add<'a>(m: &'a Info, list: &[&'a Info], out: &mut Vec<&'a Info>) {
        out.push(m);
        for c in list.iter().filter(|c| c.parent.as_deref() == Some(&m.id)) {
            add(c, list, out);
        }
    }
    let mut out = Vec::with_capacity(list.len());
    let is_root = |m: &Info| {
        m.parent
            .as_ref()
            .is_none_or(|p| !list.iter().any(|x| &x.id == p))
    };
    for m in list.iter().filter(|m| is_root(m)) {
        add(m, &list, &mut out);
    }
    out
}

pub fn query(ctx: &Ctx<'_>, args: &Map<String, Value>) -> Answer {
    let q: QueryArgs = parse(args)?;
    let sort = q.sort.unwrap_or_default();
    if let Some(c) = sort
        .iter()
        .find(|c| c.property != "sortOrder" && c.property != "name")
    {
        return Err(fail(
            "unsupportedSort",
            format!("{}: sortOrder and name are served", c.property),
        ));
    }
    ctx.with(|acc| {
        let all = infos(acc);
        let mut found = Vec::new();
        for m in &all {
            if q.filter.as_ref().map_or(Ok(true), |f| matches(f, m))? {
                found.push(m);
            }
        }
        if q.filter_as_tree {
            let kept: Vec<&str> = found.iter().map(|m| m.id.as_str()).collect();
            let ancestors_kept = |m: &Info| {
                let mut p = m.parent.clone();
                while let Some(id) = p {
                    if !kept.contains(&id.as_str()) {
                        return false;
                    }
                    p = all
                        .iter()
                        .find(|x| x.id == id)
                        .and_then(|x| x.parent.clone());
                }
                true
            };
            found.retain(|m| ancestors_kept(m));
        }
        found.sort_by(|a, b| compare(&sort, a, b));
        if q.sort_as_tree {
            found = as_tree(found);
        }
        let total = found.len();
        let limit = q.limit.map_or(usize::MAX, |l| l as usize);
        let (start, ids) = methods::query_window(
            &found,
            |m| &m.id,
            q.anchor.as_ref(),
            q.anchor_offset,
            q.position,
            limit,
        )?;
        let mut out = json!({"accountId": ctx.account, "queryState": ctx.state(acc),
            "canCalculateChanges": false, "position": start, "ids": ids});
        if q.calculate_total {
            out["total"] = total.into();
        }
        Ok(out)
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChangesArgs {
    #[allow(dead_code)]
    pub account_id: String,
    pub since_state: String,
    pub max_changes: Option<u64>,
}

pub fn changes(ctx: &Ctx<'_>, args: &Map<String, Value>) -> Answer {
    let c: ChangesArgs = parse(args)?;
    let max = methods::max_changes(c.max_changes)?;
    let states = &service(ctx.sh).states;
    ctx.with(|acc| {
        let since = states
            .since(ctx.account, &c.since_state)
            .ok_or_else(cannot)?;
        let (list, counts_only) = sync::mailbox_changes(acc, &since.base);
        let p = sync::page(list, &since, max);
        let counts = [
            "totalEmails",
            "unreadEmails",
            "totalThreads",
            "unreadThreads",
        ];
        let updated_properties = (counts_only && !p.updated.is_empty()).then_some(counts);
        let new_state = match p.more {
            true => states.paged(ctx.account, &since, p.reported),
            false => ctx.state(acc),
        };
        Ok(
            json!({"accountId": ctx.account, "oldState": c.since_state, "newState": new_state,
                   "hasMoreChanges": p.more, "created": p.created, "updated": p.updated,
                   "destroyed": p.destroyed, "updatedProperties": updated_properties}),
        )
    })
}

/// The answer for a state not kept (too old, or never given).
pub fn cannot() -> Failure {
    fail(
        "cannotCalculateChanges",
        "that state is older than the changes kept: get everything again",
    )
}
