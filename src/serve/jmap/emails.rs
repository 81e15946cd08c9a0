//! Reading Emails and Threads (RFC 8621 §3, §4): Email/query (in a mailbox, by arrival),
//! Email/get (every property of §4.1 this server knows, `header:` forms and
//! `bodyStructure` included), Email/changes, Email/queryChanges, Thread/get and
//! Thread/changes (each message is its own thread).

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::super::store::{Account, Mailbox};
use super::email::{self, email_id, mailbox_id, parse_id};
use super::mailbox::{cannot, ChangesArgs, Comparator};
use super::methods::{self, fail, or_default, parse, Answer, Ctx, Failure};
use super::{body, service, sync, MAX_OBJECTS};

/// Runs `f` on the message an email (or blob, or thread) id names: its mailbox and index.
pub fn with_message<R>(
    a: &mut Account,
    id: &str,
    f: impl FnOnce(&mut Mailbox, usize) -> R,
) -> Option<R> {
    let (uv, uid) = parse_id(id)?;
    let mb = mailbox_by_id(a, &mailbox_id(uv))?;
    let i = mb.find(uid)?;
    Some(f(mb, i))
}

pub fn mailbox_by_id<'a>(a: &'a mut Account, id: &str) -> Option<&'a mut Mailbox> {
    let uv: u32 = id.strip_prefix('m')?.parse().ok()?;
    if a.inbox.uid_validity == uv {
        return Some(&mut a.inbox);
    }
    a.folders
        .values_mut()
        .find(|m| m.uid_validity == uv && !m.noselect)
}

/// What Email/query and Email/queryChanges select and how they order it.
struct Selection {
    in_mailbox: Option<String>,
    ascending: bool,
}

impl Selection {
    fn new(filter: Option<&Value>, sort: &[Comparator]) -> Result<Selection, Failure> {
        let filter = filter.cloned().unwrap_or(Value::Null);
        if filter
            .as_object()
            .is_some_and(|f| f.keys().any(|k| k != "inMailbox"))
            || !(filter.is_null() || filter.is_object())
        {
            return Err(fail(
                "unsupportedFilter",
                "inMailbox is the one filter served",
            ));
        }
        let mut ascending = true;
        for s in sort {
            if s.property != "receivedAt" {
                return Err(fail("unsupportedSort", "receivedAt is the one sort served"));
            }
            ascending = s.is_ascending;
        }
        let in_mailbox = filter["inMailbox"].as_str().map(str::to_string);
        Ok(Selection {
            in_mailbox,
            ascending,
        })
    }

    /// Does the email with this id (`e7-12`) fall in the selection?
    fn holds(&self, id: &str) -> bool {
        self.in_mailbox
            .as_deref()
            .is_none_or(|m| parse_id(id).is_some_and(|(uv, _)| mailbox_id(uv) == m))
    }

    /// The ids selected, in order.
    fn ids(&self, a: &Account) -> Vec<String> {
        let mut found: Vec<(std::time::SystemTime, u32, u32)> = sync::all_mailboxes(a)
            .filter(|(_, mb)| !mb.noselect)
            .filter(|(_, mb)| {
                self.in_mailbox
                    .as_deref()
                    .is_none_or(|id| id == mailbox_id(mb.uid_validity))
            })
            .flat_map(|(_, mb)| {
                mb.messages
                    .iter()
                    .map(|m| (m.received, mb.uid_validity, m.uid))
            })
            .collect();
        found.sort();
        if !self.ascending {
            found.reverse();
        }
        found
            .into_iter()
            .map(|(_, uv, uid)| email_id(uv, uid))
            .collect()
    }
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
    /// Each message is its own thread: collapsing changes nothing.
    #[serde(default, deserialize_with = "or_default")]
    #[allow(dead_code)]
    collapse_threads: bool,
}

pub fn query(ctx: &Ctx<'_>, args: &Map<String, Value>) -> Answer {
    let q: QueryArgs = parse(args)?;
    let sel = Selection::new(q.filter.as_ref(), q.sort.as_deref().unwrap_or_default())?;
    ctx.with(|a| {
        let found = sel.ids(a);
        let total = found.len();
        let limit = q
            .limit
            .map_or(MAX_OBJECTS, |l| (l as usize).min(MAX_OBJECTS));
        let (start, ids) = methods::query_window(
            &found,
            |id| id,
            q.anchor.as_ref(),
            q.anchor_offset,
            q.position,
            limit,
        )?;
        let mut out = json!({"accountId": ctx.account, "queryState": ctx.state(a),
            "canCalculateChanges": true, "position": start, "ids": ids});
        if q.limit.is_some_and(|l| l as usize > MAX_OBJECTS) {
            out["limit"] = MAX_OBJECTS.into();
        }
        if q.calculate_total {
            out["total"] = total.into();
        }
        Ok(out)
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct GetArgs {
    #[allow(dead_code)]
    account_id: String,
    ids: Option<Vec<String>>,
    properties: Option<Vec<String>>,
    body_properties: Option<Vec<String>>,
    #[serde(default, deserialize_with = "or_default")]
    fetch_text_body_values: bool,
    #[serde(
        default,
        deserialize_with = "or_default",
        rename = "fetchHTMLBodyValues"
    )]
    fetch_html_body_values: bool,
    #[serde(default, deserialize_with = "or_default")]
    fetch_all_body_values: bool,
    #[serde(default, deserialize_with = "or_default")]
    max_body_value_bytes: u64,
}

pub fn get(ctx: &Ctx<'_>, args: &Map<String, Value>) -> Answer {
    let g: GetArgs = parse(args)?;
    let want = methods::ids_within_limit(g.ids)?;
    let properties = methods::properties(g.properties, email::DEFAULT, email::known)?;
    let body_properties: Vec<String> = match g.body_properties {
        Some(p) => p,
        None => body::DEFAULT_PROPERTIES
            .iter()
            .map(|s| s.to_string())
            .collect(),
    };
    if let Some(p) = body_properties.iter().find(|p| !body::known(p)) {
        return Err(fail(
            "invalidArguments",
            format!("unknown body property {p}"),
        ));
    }
    let w = email::Want {
        properties: &properties,
        body_properties: &body_properties,
        text_values: g.fetch_text_body_values,
        html_values: g.fetch_html_body_values,
        all_values: g.fetch_all_body_values,
        max_value: g.max_body_value_bytes as usize,
    };
    ctx.with(|a| {
        let ids: Vec<String> = match want {
            Some(w) => w.iter().filter_map(|id| ctx.id(id)).collect(),
            None => sync::all_mailboxes(a)
                .filter(|(_, mb)| !mb.noselect)
                .flat_map(|(_, mb)| mb.messages.iter().map(|m| email_id(mb.uid_validity, m.uid)))
                .take(MAX_OBJECTS)
                .collect(),
        };
        let (mut list, mut not_found) = (Vec::new(), Vec::new());
        for id in ids {
            match with_message(a, &id, |mb, i| email::object(mb, i, &w)) {
                Some(o) => list.push(o),
                None => not_found.push(id),
            }
        }
        Ok(
            json!({"accountId": ctx.account, "state": ctx.state(a), "list": list,
                  "notFound": not_found}),
        )
    })
}

/// Email/changes, or Thread/changes (the same changes, as thread ids).
pub fn changes(ctx: &Ctx<'_>, args: &Map<String, Value>, threads: bool) -> Answer {
    let c: ChangesArgs = parse(args)?;
    let max = methods::max_changes(c.max_changes)?;
    let states = &service(ctx.sh).states;
    ctx.with(|a| {
        let since = states
            .since(ctx.account, &c.since_state)
            .ok_or_else(cannot)?;
        let list = sync::email_changes(a, &since.base).ok_or_else(cannot)?;
        let p = sync::page(list, &since, max);
        let as_ids = |ids: &[String]| -> Vec<String> {
            match threads {
                true => ids.iter().map(|id| format!("t{}", &id[1..])).collect(),
                false => ids.to_vec(),
            }
        };
        let (created, updated, destroyed) =
            (as_ids(&p.created), as_ids(&p.updated), as_ids(&p.destroyed));
        let new_state = match p.more {
            true => states.paged(ctx.account, &since, p.reported),
            false => ctx.state(a),
        };
        Ok(
            json!({"accountId": ctx.account, "oldState": c.since_state, "newState": new_state,
                   "hasMoreChanges": p.more, "created": created, "updated": updated,
                   "destroyed": destroyed}),
        )
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct QueryChangesArgs {
    #[allow(dead_code)]
    account_id: String,
    filter: Option<Value>,
    sort: Option<Vec<Comparator>>,
    since_query_state: String,
    max_changes: Option<u64>,
    up_to_id: Option<String>,
    #[serde(default, deserialize_with = "or_default")]
    calculate_total: bool,
    #[serde(default, deserialize_with = "or_default")]
    #[allow(dead_code)]
    collapse_threads: bool,
}

/// Email/queryChanges (RFC 8620 §5.6). The filter and sort are on what never changes for
/// an id here (its mailbox: a move gives a new id; its arrival), so the results change
/// only by creation and destruction: `removed` is every destroyed id the query selects,
/// `added` every created one, with its index now.
pub fn query_changes(ctx: &Ctx<'_>, args: &Map<String, Value>) -> Answer {
    let q: QueryChangesArgs = parse(args)?;
    let sel = Selection::new(q.filter.as_ref(), q.sort.as_deref().unwrap_or_default())?;
    let max = methods::max_changes(q.max_changes)?;
    let states = &service(ctx.sh).states;
    ctx.with(|a| {
        let since = states
            .since(ctx.account, &q.since_query_state)
            .ok_or_else(cannot)?;
        let list = sync::email_changes(a, &since.base).ok_or_else(cannot)?;
        let p = sync::page(list, &since, None);
        let now = sel.ids(a);
        let removed: Vec<&String> = p.destroyed.iter().filter(|id| sel.holds(id)).collect();
        let up_to = q
            .up_to_id
            .as_ref()
            .and_then(|u| now.iter().position(|id| id == u));
        let added: Vec<Value> = now
            .iter()
            .enumerate()
            .filter(|(i, id)| up_to.is_none_or(|u| *i <= u) && p.created.contains(id))
            .map(|(i, id)| json!({"id": id, "index": i}))
            .collect();
        if max.is_some_and(|m| removed.len() + added.len() > m) {
            return Err(fail("tooManyChanges", "more changes than maxChanges"));
        }
        let mut out = json!({"accountId": ctx.account, "oldQueryState": q.since_query_state,
            "newQueryState": ctx.state(a), "removed": removed, "added": added});
        if q.calculate_total {
            out["total"] = now.len().into();
        }
        Ok(out)
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ThreadGetArgs {
    #[allow(dead_code)]
    account_id: String,
    ids: Option<Vec<String>>,
    properties: Option<Vec<String>>,
}

pub fn thread_get(ctx: &Ctx<'_>, args: &Map<String, Value>) -> Answer {
    let g: ThreadGetArgs = parse(args)?;
    if let Some(p) = g
        .properties
        .iter()
        .flatten()
        .find(|p| *p != "id" && *p != "emailIds")
    {
        return Err(fail("invalidArguments", format!("unknown property {p}")));
    }
    let want = methods::ids_within_limit(g.ids)?.unwrap_or_default();
    ctx.with(|a| {
        let (mut list, mut not_found) = (Vec::new(), Vec::new());
        for t in want {
            match with_message(a, &t, |mb, i| email_id(mb.uid_validity, mb.messages[i].uid)) {
                Some(e) if t.starts_with('t') => list.push(json!({"id": t, "emailIds": [e]})),
                _ => not_found.push(t),
            }
        }
        Ok(
            json!({"accountId": ctx.account, "state": ctx.state(a), "list": list,
                  "notFound": not_found}),
        )
    })
}
