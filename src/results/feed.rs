//! One interval of a run as JSON, for `spate watch`: its counters, errors and each
//! phase's histogram (HdrHistogram V2, compressed, base64, as the *.hlog files hold it),
//! so that shards add up exactly while they run. A live view serves them
//! (`ui::web::feed`); `results::merge::LiveMerge` reads them back.

use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer as _, V2DeflateSerializer};
use serde_json::{json, Value};

use crate::metrics::{Counters, Detail, ErrorKey, ErrorKind, ErrorStat, Phase, Shard};

/// Intervals a live view keeps for watchers: ten minutes of seconds.
pub const KEEP: usize = 600;
/// The most phase names a watcher takes from one run (each is kept for the process's life).
pub const MAX_PHASES: usize = 64;

/// One interval (`len_s` long, ending `t_s` seconds into the run) as JSON.
pub fn encode(iv: &Shard, t_s: f64, len_s: f64, active: i64) -> Value {
    let mut ser = V2DeflateSerializer::new();
    let mut bytes = Vec::new();
    let hists: Vec<Value> = iv
        .hists()
        .filter_map(|(phase, h)| {
            bytes.clear();
            ser.serialize(h, &mut bytes).ok()?;
            Some(json!([
                phase.name(),
                base64::engine::general_purpose::STANDARD.encode(&bytes)
            ]))
        })
        .collect();
    let errors: Vec<Value> = iv
        .errors
        .iter()
        .map(|(k, e)| {
            json!({
                "phase": k.phase.name(),
                "kind": k.kind.name(),
                "code": k.code,
                "enhanced": k.detail.map(|d| d.to_string()),
                "text": k.text,
                "count": e.count,
                "sample": e.sample,
            })
        })
        .collect();
    json!({
        "t_s": t_s,
        "len_s": len_s,
        "active": active,
        "counters": iv.counters,
        "hists": hists,
        "errors": errors,
    })
}

/// One interval of a shard, as a watcher reads it back.
#[derive(Debug)]
pub struct Interval {
    /// Seconds into the shard's run at its end, and its length.
    pub t_s: f64,
    pub len_s: f64,
    pub active: i64,
    pub shard: Shard,
}

/// Reads an interval back; `names` holds the phase and error
/// kind names taken so far (at most [`MAX_PHASES`], a guard against a server that is not
/// a spate live view).
pub fn decode(v: &Value, names: &mut Vec<String>) -> Result<Interval, String> {
    let bad = |what: &str| format!("an interval without a valid {what}");
    let mut name = |n: &str| -> Result<(), String> {
        if !names.iter().any(|k| k == n) {
            if names.len() >= MAX_PHASES {
                return Err("more phase names than a spate run has".into());
            }
            names.push(n.to_string());
        }
        Ok(())
    };
    let mut shard = Shard::default();
    shard.counters =
        serde_json::from_value::<Counters>(v["counters"].clone()).map_err(|_| bad("counters"))?;
    let mut de = Deserializer::new();
    for h in v["hists"].as_array().ok_or_else(|| bad("histograms"))? {
        let (Some(phase), Some(b64)) = (h[0].as_str(), h[1].as_str()) else {
            return Err(bad("histogram"));
        };
        name(phase)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|_| bad("histogram"))?;
        let hist: hdrhistogram::Histogram<u64> = de
            .deserialize(&mut bytes.as_slice())
            .map_err(|_| bad("histogram"))?;
        shard.record_hist(Phase::named(phase), &hist);
    }
    for e in v["errors"].as_array().ok_or_else(|| bad("error list"))? {
        let (Some(phase), Some(kind)) = (e["phase"].as_str(), e["kind"].as_str()) else {
            return Err(bad("error"));
        };
        name(phase)?;
        name(kind)?;
        let key = ErrorKey {
            phase: Phase::named(phase),
            kind: ErrorKind::named(kind),
            code: e["code"].as_u64().unwrap_or(0) as u16,
            detail: e["enhanced"]
                .as_str()
                .and_then(|d| d.parse::<Detail>().ok()),
            text: e["text"].as_str().unwrap_or("").to_string(),
        };
        let stat = shard.errors.entry(key).or_insert_with(|| ErrorStat {
            count: 0,
            sample: e["sample"].as_str().unwrap_or("").to_string(),
        });
        stat.count += e["count"].as_u64().unwrap_or(0);
    }
    Ok(Interval {
        t_s: v["t_s"].as_f64().ok_or_else(|| bad("time"))?,
        len_s: v["len_s"].as_f64().ok_or_else(|| bad("length"))?,
        active: v["active"].as_i64().unwrap_or(0),
        shard,
    })
}
