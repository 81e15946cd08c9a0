//! A sweep's analysis: per-value means and spread over repetitions, the USL fit, the knee,
//! and experiment E4's table (one column per value).

use serde::Serialize;

use super::row::{Param, Row};
use super::usl::{self, Usl};

/// Mean, extremes and standard deviation over the repetitions of a step.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Spread {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    pub sd: f64,
}

impl Spread {
    pub fn of(v: &[f64]) -> Option<Spread> {
        if v.is_empty() {
            return None;
        }
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = if v.len() > 1 {
            v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
        } else {
            0.0
        };
        let r = |x: f64| (x * 1000.0).round() / 1000.0;
        Some(Spread {
            mean: r(mean),
            min: r(v.iter().copied().fold(f64::INFINITY, f64::min)),
            max: r(v.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
            sd: r(var.sqrt()),
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct StepStats {
    pub value: u64,
    pub repeats: usize,
    pub test_time_s: Option<Spread>,
    pub latency_mean_ms: Option<Spread>,
    pub latency_p50_ms: Option<Spread>,
    pub latency_p99_ms: Option<Spread>,
    pub throughput_per_s: Option<Spread>,
    pub errors: u64,
    pub net_kbps: Option<Spread>,
    pub disk_kbps: Option<Spread>,
    pub disk_ms: Option<Spread>,
    pub cpu_pct: Option<Spread>,
    pub cpu_us_per_unit: Option<Spread>,
    pub mem_mb: Option<Spread>,
    pub ping_ms: Option<Spread>,
}

/// What one more unit of the swept option costs: least-squares slopes over every row
/// (repeats included), for a sweep of an option or a size with at least 3 values.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Slopes {
    /// The latency columns' phase.
    pub latency_phase: String,
    pub latency_p50_us: Option<f64>,
    pub latency_p99_us: Option<f64>,
    /// The monitored server's CPU per accepted unit (None without a followed process).
    pub cpu_us_per_unit: Option<f64>,
    pub throughput_per_s: Option<f64>,
    /// Each slope's standard error (same units): a slope within about two of them of
    /// zero is not told apart from none.
    pub latency_p50_us_se: Option<f64>,
    pub latency_p99_us_se: Option<f64>,
    pub cpu_us_per_unit_se: Option<f64>,
    pub throughput_per_s_se: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Analysis {
    pub param: String,
    pub values: Vec<u64>,
    /// Fitted for concurrency-like parameters (users, a server setting changed by a
    /// hook, --param users or max-in-flight) with 3 or more values.
    pub usl: Option<Usl>,
    pub knee_value: Option<u64>,
    pub knee_rule: &'static str,
    /// Why there is no knee and no fit although there were steps: they were too short to
    /// judge, or the model did not describe them (said instead of a meaningless figure).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_judged: Option<String>,
    /// Values where a run's generator was the limit (`bound_by`): left out of the knee
    /// and the USL fit, which would otherwise describe spate rather than the server.
    pub generator_bound: Vec<u64>,
    /// What cpu_pct measures: "host" (user+system of all cores) or the monitored process
    /// groups summed ("proc.smtpd+proc.cleanup", percent of one core).
    pub cpu_basis: String,
    pub steps: Vec<StepStats>,
    pub slopes: Option<Slopes>,
    /// The throughput's unit: "msg/s", or "req/s" for request/response steps.
    pub unit: &'static str,
}

/// What a sweep is of, beyond its values.
pub struct Swept<'a> {
    pub param: Param,
    pub name: &'a str,
    /// Whether the value is a concurrency (a USL fit makes sense).
    pub concurrency: bool,
    pub unit: &'static str,
}

pub const KNEE_RULE: &str = "first value whose mean latency grew by a larger factor than its throughput, relative to the value before (L_i/L_(i-1) > X_i/X_(i-1) and L_i/L_(i-1) > 1.05)";

/// The knee: index into `steps` (by order of values) per [`KNEE_RULE`].
pub fn knee(points: &[(f64, f64)]) -> Option<usize> {
    (1..points.len()).find(|&i| {
        let (x0, l0) = points[i - 1];
        let (x1, l1) = points[i];
        if x0 <= 0.0 || l0 <= 0.0 {
            return false;
        }
        let (gx, gl) = (x1 / x0, l1 / l0);
        gl > gx && gl > 1.05
    })
}

/// The shortest step whose figures judge a knee or fit a model: a step of a few tens of
/// milliseconds is mostly its own start and end.
const MIN_JUDGED_S: f64 = 1.0;
/// Below this r², a USL fit describes noise, not the steps.
const MIN_R2: f64 = 0.5;

pub fn analyse(sw: &Swept<'_>, values: &[u64], rows: &[Row]) -> Analysis {
    let (param, name) = (sw.param, sw.name);
    let mut steps = Vec::new();
    for &v in values {
        let r: Vec<&Row> = rows.iter().filter(|r| r.value == v).collect();
        if r.is_empty() {
            continue;
        }
        let of = |f: &dyn Fn(&Row) -> f64| Spread::of(&r.iter().map(|x| f(x)).collect::<Vec<_>>());
        let of_opt = |f: &dyn Fn(&Row) -> Option<f64>| {
            Spread::of(&r.iter().filter_map(|x| f(x)).collect::<Vec<_>>())
        };
        steps.push(StepStats {
            value: v,
            repeats: r.len(),
            test_time_s: of(&|x| x.test_time_s),
            latency_mean_ms: of(&|x| x.latency_mean_ms),
            latency_p50_ms: of(&|x| x.latency_p50_ms),
            latency_p99_ms: of(&|x| x.latency_p99_ms),
            throughput_per_s: of(&|x| x.throughput_per_s),
            errors: r.iter().map(|x| x.errors).sum(),
            net_kbps: of_opt(&|x| x.net_kbps),
            disk_kbps: of_opt(&|x| x.disk_kbps),
            disk_ms: of_opt(&|x| x.disk_ms),
            cpu_pct: of_opt(&|x| x.cpu_pct),
            cpu_us_per_unit: of_opt(&|x| x.cpu_us_per_unit),
            mem_mb: of_opt(&|x| x.mem_mb),
            ping_ms: of_opt(&|x| x.ping_ms),
        });
    }
    let mut generator_bound: Vec<u64> = rows
        .iter()
        .filter(|r| r.bound_by == "generator")
        .map(|r| r.value)
        .collect();
    generator_bound.sort_unstable();
    generator_bound.dedup();
    let server_bound = |v: u64| !generator_bound.contains(&v);
    let usl = match param {
        Param::Users | Param::Value if sw.concurrency => usl::fit(
            &rows
                .iter()
                .filter(|r| server_bound(r.value))
                .map(|r| (r.value as f64, r.throughput_per_s))
                .collect::<Vec<_>>(),
        ),
        _ => None,
    };
    let judged: Vec<&StepStats> = steps.iter().filter(|s| server_bound(s.value)).collect();
    let pts: Vec<(f64, f64)> = judged
        .iter()
        .map(|s| {
            (
                s.throughput_per_s.map_or(0.0, |x| x.mean),
                s.latency_mean_ms.map_or(0.0, |x| x.mean),
            )
        })
        .collect();
    let mut knee_value = knee(&pts).map(|i| judged[i].value);
    let mut usl = usl;
    let mut not_judged = None;
    let short: Vec<f64> = judged
        .iter()
        .filter_map(|s| s.test_time_s.map(|t| t.mean))
        .filter(|t| *t < MIN_JUDGED_S)
        .collect();
    if !short.is_empty() {
        let (lo, hi) = short
            .iter()
            .fold((f64::MAX, 0.0f64), |(lo, hi), t| (lo.min(*t), hi.max(*t)));
        not_judged = Some(format!(
            "{} step{} of {:.0}-{:.0} ms: too short to judge a knee or fit a model (each step needs at least {MIN_JUDGED_S:.0} s: give --duration)",
            short.len(),
            if short.len() == 1 { "" } else { "s" },
            lo * 1000.0,
            hi * 1000.0
        ));
        knee_value = None;
        usl = None;
    } else if let Some(u) = usl.as_ref().filter(|u| u.r2 < MIN_R2) {
        not_judged = Some(format!(
            "the scalability model does not describe these steps (r² {:.3}, under {MIN_R2}): no fit given",
            u.r2
        ));
        usl = None;
    }
    let slopes = matches!(param, Param::Value | Param::Size)
        .then(|| slopes(rows))
        .filter(|s| s.latency_p50_us.is_some());
    Analysis {
        param: name.to_string(),
        values: values.to_vec(),
        usl,
        knee_value,
        knee_rule: KNEE_RULE,
        not_judged,
        generator_bound,
        cpu_basis: rows
            .first()
            .map_or("host".to_string(), |r| r.cpu_basis.clone()),
        steps,
        slopes,
        unit: sw.unit,
    }
}

fn slopes(rows: &[Row]) -> Slopes {
    let r3 = |v: f64| (v * 1000.0).round() / 1000.0;
    let of = |f: &dyn Fn(&Row) -> Option<f64>| {
        let pts: Vec<(f64, f64)> = rows
            .iter()
            .filter_map(|r| f(r).map(|y| (r.value as f64, y)))
            .collect();
        crate::monitor::slope::slope_se(&pts).map(|(b, se)| (r3(b), r3(se)))
    };
    let p50 = of(&|r| Some(r.latency_p50_ms * 1000.0));
    let p99 = of(&|r| Some(r.latency_p99_ms * 1000.0));
    let cpu = of(&|r| r.cpu_us_per_unit);
    let thr = of(&|r| Some(r.throughput_per_s));
    Slopes {
        latency_phase: rows
            .first()
            .map_or(String::new(), |r| r.latency_phase.clone()),
        latency_p50_us: p50.map(|x| x.0),
        latency_p99_us: p99.map(|x| x.0),
        cpu_us_per_unit: cpu.map(|x| x.0),
        throughput_per_s: thr.map(|x| x.0),
        latency_p50_us_se: p50.map(|x| x.1),
        latency_p99_us_se: p99.map(|x| x.1),
        cpu_us_per_unit_se: cpu.map(|x| x.1),
        throughput_per_s_se: thr.map(|x| x.1),
    }
}

/// E4's table: one column per value; `mean±sd` when steps were repeated.
pub fn render(a: &Analysis, _rows: &[Row]) -> String {
    type Get = fn(&StepStats) -> Option<Spread>;
    let lines: [(&str, Get, usize); 7] = [
        ("test time [s]", |s| s.test_time_s, 1),
        ("app latency [ms]", |s| s.latency_mean_ms, 1),
        ("throughput", |s| s.throughput_per_s, 1),
        ("network [KiB/s]", |s| s.net_kbps, 0),
        ("disk [KiB/s]", |s| s.disk_kbps, 0),
        ("disk latency [ms]", |s| s.disk_ms, 2),
        ("CPU [%]", |s| s.cpu_pct, 0),
    ];
    let cell = |sp: Option<Spread>, prec: usize, reps: usize| match sp {
        None => "-".to_string(),
        Some(s) if reps > 1 => format!("{:.p$}±{:.p$}", s.mean, s.sd, p = prec),
        Some(s) => format!("{:.p$}", s.mean, p = prec),
    };
    let mut grid: Vec<Vec<String>> = vec![std::iter::once(a.param.clone())
        .chain(a.steps.iter().map(|s| s.value.to_string()))
        .collect()];
    // The ping probe's line only when a step had one (E4's smtpping column).
    let ping: (&str, Get, usize) = ("ping latency [ms]", |s| s.ping_ms, 1);
    let with_ping = a.steps.iter().any(|s| s.ping_ms.is_some());
    // The cost of one more unit of the swept option (E5: an address of a multicast):
    // the server's CPU per unit, and that per unit of the value.
    let per_unit: [(&str, Get, usize); 2] = [
        ("server CPU per unit [µs]", |s| s.cpu_us_per_unit, 0),
        (
            "… per unit of the value [µs]",
            |s| {
                s.cpu_us_per_unit.map(|c| Spread {
                    mean: c.mean / s.value.max(1) as f64,
                    min: c.min / s.value.max(1) as f64,
                    max: c.max / s.value.max(1) as f64,
                    sd: c.sd / s.value.max(1) as f64,
                })
            },
            1,
        ),
    ];
    let with_cost = a.slopes.is_some() && a.steps.iter().any(|s| s.cpu_us_per_unit.is_some());
    let cost = per_unit.into_iter().filter(|_| with_cost);
    for (label, get, prec) in lines
        .into_iter()
        .chain(cost)
        .chain(with_ping.then_some(ping))
    {
        let label = match label {
            "throughput" => format!("throughput [{}]", a.unit),
            "… per unit of the value [µs]" => format!("… per {} [µs]", a.param),
            l => l.to_string(),
        };
        grid.push(
            std::iter::once(label)
                .chain(a.steps.iter().map(|s| cell(get(s), prec, s.repeats)))
                .collect(),
        );
    }
    let mut out = aligned(&grid);
    if a.cpu_basis != "host" {
        out.push_str(&format!("CPU: {} (% of one core)\n", a.cpu_basis));
    } else {
        out.push_str("CPU: host user+system (% of all cores)\n");
    }
    models(&mut out, a);
    if let Some(why) = &a.not_judged {
        out.push_str(&format!("not judged: {why}\n"));
    }
    match a.knee_value {
        None if a
            .not_judged
            .as_deref()
            .is_some_and(|w| w.contains("too short")) => {}
        Some(v) => out.push_str(&format!(
            "knee: from {} = {v}, latency grows faster than throughput\n",
            a.param
        )),
        None => out.push_str("knee: none (latency never grew faster than throughput)\n"),
    }
    if !a.generator_bound.is_empty() {
        let v: Vec<String> = a.generator_bound.iter().map(u64::to_string).collect();
        out.push_str(&format!(
            "generator-bound: {} = {} (spate itself was the limit there: see bound_by in their summaries); not used for the knee or the scalability model: give spate more CPU, fewer sessions per process, or --shard\n",
            a.param,
            v.join(", ")
        ));
    }
    out
}

/// The grid as text: the labels left-aligned, the cells right-aligned in equal columns.
fn aligned(grid: &[Vec<String>]) -> String {
    let w0 = grid.iter().map(|r| r[0].chars().count()).max().unwrap_or(0);
    let w = grid
        .iter()
        .flat_map(|r| r.iter().skip(1))
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(0)
        .max(6);
    let mut out = String::new();
    for row in grid {
        out.push_str(&format!("{:<w0$}", row[0]));
        for c in &row[1..] {
            out.push_str(&format!("  {c:>w$}"));
        }
        out.push('\n');
    }
    out
}

/// What the models say: the USL fit and the slopes per unit of the value.
fn models(out: &mut String, a: &Analysis) {
    if let Some(u) = &a.usl {
        out.push_str(&format!(
            "USL fit: sigma {:.4}, kappa {:.6}, lambda {:.2}/s, r² {:.3}; ",
            u.sigma, u.kappa, u.lambda, u.r2
        ));
        match (u.peak_x, u.peak_throughput) {
            (Some(n), Some(x)) => out.push_str(&format!(
                "predicted peak {x:.1}/s at {} = {n:.1}\n",
                a.param
            )),
            (None, Some(x)) => out.push_str(&format!("no peak; throughput approaches {x:.1}/s\n")),
            _ => out.push_str("linear scaling, no peak in sight\n"),
        }
    }
    if let Some(sl) = &a.slopes {
        let f = |v: Option<f64>, se: Option<f64>, unit: &str| match (v, se) {
            (Some(v), Some(se)) => format!("{v:+.1} ± {se:.1} {unit}"),
            (Some(v), None) => format!("{v:+.1} {unit}"),
            _ => "not measurable".to_string(),
        };
        out.push_str(&format!(
            "slope per {} (± standard error): {} latency p50 {}, p99 {}; server CPU per unit {}; throughput {}\n",
            a.param,
            sl.latency_phase,
            f(sl.latency_p50_us, sl.latency_p50_us_se, "µs"),
            f(sl.latency_p99_us, sl.latency_p99_us_se, "µs"),
            f(sl.cpu_us_per_unit, sl.cpu_us_per_unit_se, "µs"),
            f(sl.throughput_per_s, sl.throughput_per_s_se, "/s"),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knee_where_latency_outgrows_throughput() {
        // Throughput doubles until 4, then flat; latency flat, then doubles.
        let pts = [
            (50.0, 20.0),
            (100.0, 20.5),
            (200.0, 21.0),
            (200.0, 40.0),
            (200.0, 80.0),
        ];
        assert_eq!(knee(&pts), Some(3));
        assert_eq!(knee(&pts[..3]), None);
    }

    #[test]
    fn generator_bound_steps_name_no_knee_and_fit_no_usl() {
        // Flat throughput, latency doubling from 40 on: a knee at 40 — but the generator
        // was the limit from 40 on, so it says nothing about the server.
        let row = |value: u64, tput: f64, lat: f64, bound: &str| Row {
            value,
            test_time_s: 5.0,
            throughput_per_s: tput,
            latency_mean_ms: lat,
            bound_by: bound.into(),
            ..Row::default()
        };
        let sw = Swept {
            param: Param::Users,
            name: "users",
            concurrency: true,
            unit: "msg/s",
        };
        let values = [10, 20, 40, 80];
        let mut rows = vec![
            row(10, 100.0, 10.0, "server"),
            row(20, 200.0, 10.0, "server"),
            row(40, 200.0, 20.0, "server"),
            row(80, 200.0, 40.0, "server"),
        ];
        assert_eq!(analyse(&sw, &values, &rows).knee_value, Some(40));
        rows[2].bound_by = "generator".into();
        rows[3].bound_by = "generator".into();
        let a = analyse(&sw, &values, &rows);
        assert_eq!(a.knee_value, None);
        assert_eq!(a.generator_bound, [40, 80]);
        assert!(a.usl.is_none(), "two server-bound points fit no USL");
        assert!(render(&a, &rows).contains("generator-bound: users = 40, 80"));
    }

    #[test]
    fn steps_too_short_or_a_fit_that_describes_nothing_are_not_judged() {
        let row = |value: u64, t: f64, tput: f64, lat: f64| Row {
            value,
            test_time_s: t,
            throughput_per_s: tput,
            latency_mean_ms: lat,
            bound_by: "server".into(),
            ..Row::default()
        };
        let sw = Swept {
            param: Param::Users,
            name: "users",
            concurrency: true,
            unit: "msg/s",
        };
        let values = [10, 20, 40, 80];
        // The README tour's steps: 57-89 ms each, a knee and an r² 0 fit from noise.
        let rows = vec![
            row(10, 0.057, 100.0, 10.0),
            row(20, 0.089, 200.0, 10.0),
            row(40, 0.070, 200.0, 20.0),
            row(80, 0.080, 200.0, 40.0),
        ];
        let a = analyse(&sw, &values, &rows);
        assert_eq!(a.knee_value, None);
        assert!(a.usl.is_none());
        let text = render(&a, &rows);
        assert!(
            text.contains("4 steps of 57-89 ms: too short to judge"),
            "{text}"
        );
        assert!(!text.contains("knee: none"), "{text}");
    }

    #[test]
    fn spread() {
        let s = Spread::of(&[1.0, 2.0, 3.0]).unwrap();
        assert_eq!((s.mean, s.min, s.max, s.sd), (2.0, 1.0, 3.0, 1.0));
        assert!(Spread::of(&[]).is_none());
    }
}
