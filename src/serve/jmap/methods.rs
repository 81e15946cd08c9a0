//! JMAP method calls over the store: the request envelope (RFC 8620 §3.3), result
//! references (§3.7), creation ids across calls (§5.3), and the dispatch to each method.

use std::collections::HashMap;

use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

use super::super::shared::Shared;
use super::super::store::Account;
use super::{emails, mailbox, problem, service, submission, sync, MAX_CALLS, MAX_OBJECTS};

/// The session resource never changes: its state is constant.
pub const SESSION_STATE: &str = "0";

/// A method-level error (RFC 8620 §3.6.2): its type and why.
#[derive(Debug)]
pub struct Failure {
    pub kind: &'static str,
    pub description: String,
}

pub fn fail(kind: &'static str, description: impl Into<String>) -> Failure {
    Failure {
        kind,
        description: description.into(),
    }
}

pub type Answer = Result<Value, Failure>;

/// One API request as the methods see it.
pub struct Ctx<'a> {
    pub sh: &'a Shared,
    pub user: &'a str,
    pub account: &'a str,
    /// The creation ids of this request and the ids they got (RFC 8620 §5.3).
    pub created: HashMap<String, String>,
}

impl Ctx<'_> {
    /// The state of the account as it is now (`a` is the account, locked).
    pub fn state(&self, a: &mut Account) -> String {
        service(self.sh).states.current(self.account, sync::seen(a))
    }

    /// An id, or the id a `#creationId` of this request got.
    pub fn id(&self, id: &str) -> Option<String> {
        match id.strip_prefix('#') {
            Some(cid) => self.created.get(cid).cloned(),
            None => Some(id.to_string()),
        }
    }

    /// Runs `f` on the account (locked).
    pub fn with<R>(&self, f: impl FnOnce(&mut Account) -> R) -> R {
        self.sh.store.with_account(self.user, f)
    }
}

/// The state of `user`'s mail (for the event stream).
pub fn state(sh: &Shared, user: &str) -> String {
    let account = super::account_id(user);
    sh.store.with_account(user, |a| {
        service(sh).states.current(&account, sync::seen(a))
    })
}

/// The typed arguments of a method: an unknown argument, or one of the wrong type, is
/// `invalidArguments` (RFC 8620 §3.6.2).
pub fn parse<T: DeserializeOwned>(args: &Map<String, Value>) -> Result<T, Failure> {
    serde_json::from_value(Value::Object(args.clone()))
        .map_err(|e| fail("invalidArguments", e.to_string()))
}

/// An argument given as null is the same as one not given (RFC 8620 §5: "default").
pub fn or_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + serde::Deserialize<'de>,
{
    Ok(<Option<T> as serde::Deserialize>::deserialize(d)?.unwrap_or_default())
}

/// A map of a /set response: null when empty.
pub fn nullable(m: Map<String, Value>) -> Value {
    if m.is_empty() {
        Value::Null
    } else {
        Value::Object(m)
    }
}

/// The keys of a JMAP set-of-ids object (`{"m7": true}`) whose value is true.
pub fn true_keys(v: &Value) -> Vec<&String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter(|(_, x)| **x == true)
                .map(|(k, _)| k)
                .collect()
        })
        .unwrap_or_default()
}

/// A /get's `ids`, at most maxObjectsInGet.
pub fn ids_within_limit(ids: Option<Vec<String>>) -> Result<Option<Vec<String>>, Failure> {
    match ids {
        Some(a) if a.len() > MAX_OBJECTS => Err(fail("requestTooLarge", "maxObjectsInGet")),
        other => Ok(other),
    }
}

/// A /get's `properties` (RFC 8620 §5.1): those asked for, or `default`; one that
/// `known` does not know is `invalidArguments`; "id" is always among them.
pub fn properties(
    asked: Option<Vec<String>>,
    default: &[&str],
    known: impl Fn(&str) -> bool,
) -> Result<Vec<String>, Failure> {
    let mut properties: Vec<String> =
        asked.unwrap_or_else(|| default.iter().map(|s| s.to_string()).collect());
    if let Some(p) = properties.iter().find(|p| !known(p)) {
        return Err(fail("invalidArguments", format!("unknown property {p}")));
    }
    if !properties.iter().any(|p| p == "id") {
        properties.insert(0, "id".into());
    }
    Ok(properties)
}

/// A /query's window on its sorted result (RFC 8620 §5.5): from `anchor` (an id that must
/// be in `found`, `anchorNotFound` if not) moved by `anchor_offset`, or else from
/// `position` (negative: from the end), clamped to the result; at most `limit` ids.
/// The start and the ids.
pub fn query_window<'a, T>(
    found: &'a [T],
    id: impl Fn(&'a T) -> &'a String,
    anchor: Option<&String>,
    anchor_offset: i64,
    position: i64,
    limit: usize,
) -> Result<(usize, Vec<&'a String>), Failure> {
    let total = found.len();
    let start = match anchor {
        Some(anchor) => {
            let at = found
                .iter()
                .position(|x| id(x) == anchor)
                .ok_or_else(|| fail("anchorNotFound", anchor.clone()))?;
            (at as i64 + anchor_offset).clamp(0, total as i64) as usize
        }
        None if position < 0 => total.saturating_sub(position.unsigned_abs() as usize),
        None => (position as usize).min(total),
    };
    Ok((start, found[start..].iter().take(limit).map(id).collect()))
}

/// A /changes `maxChanges`: positive when given (RFC 8620 §5.2).
pub fn max_changes(max: Option<u64>) -> Result<Option<usize>, Failure> {
    match max {
        Some(0) => Err(fail("invalidArguments", "maxChanges must be positive")),
        m => Ok(m.map(|m| m.min(u32::MAX as u64) as usize)),
    }
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
fn resolve(args: &mut Map<String, Value>, done: &[Value]) -> Result<(), Failure> {
    let refs: Vec<String> = args
        .keys()
        .filter(|k| k.starts_with('#'))
        .cloned()
        .collect();
    for key in refs {
        let r = args.remove(&key).unwrap_or_default();
        if args.contains_key(&key[1..]) {
            return Err(fail(
                "invalidArguments",
                format!("{} and {key} both given", &key[1..]),
            ));
        }
        let (Some(of), Some(name), Some(path)) = (
            r["resultOf"].as_str(),
            r["name"].as_str(),
            r["path"].as_str(),
        ) else {
            return Err(fail("invalidResultReference", "resultOf, name and path"));
        };
        let found = done
            .iter()
            .find(|d| d[2] == of && d[0] == name)
            .and_then(|d| pointer(&d[1], path))
            .ok_or_else(|| {
                fail(
                    "invalidResultReference",
                    format!("no {name} result {of} at {path}"),
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
    let given_ids = req.get("createdIds").and_then(Value::as_object);
    let mut ctx = Ctx {
        sh,
        user,
        account,
        created: given_ids
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect(),
    };
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
        let answers = match resolve(&mut args, &done) {
            Err(e) => vec![failed(e)],
            Ok(()) => call_one(&mut ctx, name, &args),
        };
        for (rname, result) in answers {
            done.push(json!([rname, result, id]));
        }
    }
    let mut out = json!({"methodResponses": done, "sessionState": SESSION_STATE});
    if given_ids.is_some() {
        out["createdIds"] = json!(ctx.created);
    }
    (200, out)
}

fn failed(e: Failure) -> (String, Value) {
    (
        "error".into(),
        json!({"type": e.kind, "description": e.description}),
    )
}

/// The methods served, each with the capability it needs.
const METHODS: &[&str] = &[
    "Mailbox/get",
    "Mailbox/query",
    "Mailbox/changes",
    "Mailbox/queryChanges",
    "Email/query",
    "Email/get",
    "Email/set",
    "Email/import",
    "Email/changes",
    "Email/queryChanges",
    "Thread/get",
    "Thread/changes",
    "Identity/get",
    "EmailSubmission/get",
    "EmailSubmission/set",
    "EmailSubmission/changes",
    "EmailSubmission/query",
];

/// One call: its response (or error), and the implicit responses that follow it.
fn call_one(ctx: &mut Ctx<'_>, name: &str, args: &Map<String, Value>) -> Vec<(String, Value)> {
    if name == "Core/echo" {
        return vec![(name.into(), Value::Object(args.clone()))];
    }
    if !METHODS.contains(&name) {
        return vec![failed(fail("unknownMethod", name))];
    }
    if args.get("accountId").and_then(Value::as_str) != Some(ctx.account) {
        return vec![failed(fail(
            "accountNotFound",
            "the accountId of the session's account",
        ))];
    }
    let r = match name {
        "Mailbox/get" => mailbox::get(ctx, args),
        "Mailbox/query" => mailbox::query(ctx, args),
        "Mailbox/changes" => mailbox::changes(ctx, args),
        "Mailbox/queryChanges" => Err(fail(
            "cannotCalculateChanges",
            "Mailbox/query again (its canCalculateChanges is false)",
        )),
        "Email/query" => emails::query(ctx, args),
        "Email/get" => emails::get(ctx, args),
        "Email/set" => super::email_set::set(ctx, args),
        "Email/import" => super::email_set::import(ctx, args),
        "Email/changes" => emails::changes(ctx, args, false),
        "Thread/changes" => emails::changes(ctx, args, true),
        "Email/queryChanges" => emails::query_changes(ctx, args),
        "Thread/get" => emails::thread_get(ctx, args),
        "Identity/get" => Ok(identity_get(ctx)),
        "EmailSubmission/set" => return submission::set(ctx, args),
        "EmailSubmission/get" => submission::get(ctx, args),
        "EmailSubmission/changes" => submission::changes(ctx, args),
        "EmailSubmission/query" => submission::query(ctx, args),
        _ => Err(fail("unknownMethod", name)),
    };
    vec![match r {
        Ok(v) => (name.into(), v),
        Err(e) => failed(e),
    }]
}

/// The identity every account has: its address.
pub const IDENTITY: &str = "i1";

fn identity_get(ctx: &Ctx<'_>) -> Value {
    json!({"accountId": ctx.account, "state": SESSION_STATE, "notFound": [],
        "list": [{"id": IDENTITY, "name": "", "email": ctx.user, "replyTo": null, "bcc": null,
                  "textSignature": "", "htmlSignature": "", "mayDelete": false}]})
}
