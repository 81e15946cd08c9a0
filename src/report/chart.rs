//! A small hand-written SVG chart module: line charts over time, HDR-style percentile plots
//! (log scale on the percentile axis), metric-vs-parameter scatter/line charts. Output is
//! deterministic text (pinned by snapshot tests) with no script and no external resource,
//! so a report opens anywhere, offline.
//!
//! Every series is downsampled to what a screen can show (min/max per bucket, so spikes
//! survive): a 16-hour soak makes the same size of page as a one-minute run.

use std::fmt::Write;

use self::escape as esc;

/// Points kept per series at most; a chart is ~800 px wide, two points per pixel column.
pub const MAX_POINTS: usize = 1000;

/// Colour-blind-friendly palette (Okabe–Ito, with black last).
pub const PALETTE: &[&str] = &[
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#8C6D1F", "#000000",
];

pub fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XKind {
    /// Seconds since the start; ticks read 30s, 1m, 1h30m.
    Seconds,
    /// A plain number (a swept parameter).
    Linear,
    /// x = -log10(1 - q): ticks read 0%, 90%, 99%, 99.9%…
    LogPercentile,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Line,
    Dashed,
    Points,
    LinePoints,
}

#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub style: Style,
    /// Palette index; None = the series' position.
    pub color: Option<usize>,
}

impl Series {
    pub fn line(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series {
            name: name.into(),
            points,
            style: Style::Line,
            color: None,
        }
    }
    pub fn styled(mut self, style: Style) -> Self {
        self.style = style;
        self
    }
    pub fn colored(mut self, c: usize) -> Self {
        self.color = Some(c);
        self
    }
}

/// A shaded stretch of the x axis across the plot, e.g. a fault from its start to its
/// end (a moment: a thin band).
#[derive(Debug, Clone)]
pub struct Band {
    pub x0: f64,
    pub x1: f64,
    pub label: String,
}

/// A vertical line across the plot, e.g. the saturation point of a sweep.
#[derive(Debug, Clone)]
pub struct Marker {
    pub x: f64,
    pub label: String,
}

#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub x_kind: XKind,
    pub x_label: String,
    /// With its unit, e.g. "latency (ms)".
    pub y_label: String,
    pub series: Vec<Series>,
    pub markers: Vec<Marker>,
    pub bands: Vec<Band>,
    /// A logarithmic y axis (decades), for latencies whose max dwarfs p50/p90.
    pub log_y: bool,
}

impl Chart {
    pub fn new(title: impl Into<String>, x_kind: XKind, x_label: &str, y_label: &str) -> Self {
        Chart {
            title: title.into(),
            x_kind,
            x_label: x_label.to_string(),
            y_label: y_label.to_string(),
            series: Vec::new(),
            markers: Vec::new(),
            bands: Vec::new(),
            log_y: false,
        }
    }
    /// The same chart with a logarithmic y axis.
    pub fn log_y(mut self) -> Self {
        self.log_y = true;
        self
    }
    pub fn time(title: impl Into<String>, y_label: &str) -> Self {
        Chart::new(title, XKind::Seconds, "elapsed time", y_label)
    }
    pub fn push(&mut self, s: Series) {
        self.series.push(s);
    }
    /// True when at least one series has a finite point: charts without data are left out
    /// of a report rather than drawn empty.
    pub fn has_data(&self) -> bool {
        self.series
            .iter()
            .any(|s| s.points.iter().any(|p| p.0.is_finite() && p.1.is_finite()))
    }
}

/// Min/max-preserving downsampling: points sorted by x are split into `max / 2` buckets
/// of equal x width and each bucket keeps its lowest and highest point, in x order.
pub fn downsample(points: &[(f64, f64)], max: usize) -> Vec<(f64, f64)> {
    let pts: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .collect();
    if pts.len() <= max || max < 4 {
        return pts;
    }
    let buckets = max / 2;
    let (x0, x1) = (pts[0].0, pts[pts.len() - 1].0);
    let width = (x1 - x0).max(f64::MIN_POSITIVE);
    let mut out = Vec::with_capacity(max);
    let mut i = 0;
    for b in 0..buckets {
        let end_x = x0 + width * (b + 1) as f64 / buckets as f64;
        let start = i;
        while i < pts.len() && (pts[i].0 <= end_x || b == buckets - 1) {
            i += 1;
        }
        let bucket = &pts[start..i];
        if bucket.is_empty() {
            continue;
        }
        let (mut lo, mut hi) = (0, 0);
        for (k, p) in bucket.iter().enumerate() {
            if p.1 < bucket[lo].1 {
                lo = k;
            }
            if p.1 > bucket[hi].1 {
                hi = k;
            }
        }
        out.push(bucket[lo.min(hi)]);
        if lo != hi {
            out.push(bucket[lo.max(hi)]);
        }
    }
    // Keep the ends, so the axis still spans the whole run.
    if out.first() != pts.first() {
        out.insert(0, pts[0]);
    }
    if out.last() != pts.last() {
        out.push(pts[pts.len() - 1]);
    }
    out
}

/// "Nice" ticks (1, 2, 2.5, 5 × 10^k) covering [lo, hi], about `n` of them.
pub fn nice_ticks(lo: f64, hi: f64, n: usize) -> (Vec<f64>, f64) {
    let span = (hi - lo).abs().max(1e-9);
    let raw = span / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let first = (lo / step).floor() * step;
    let mut ticks = Vec::new();
    let mut k = 0;
    while k < 100 {
        let t = first + step * k as f64;
        if t > hi + step * 1e-6 {
            break;
        }
        ticks.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        k += 1;
    }
    (ticks, step)
}

fn time_step(span: f64) -> f64 {
    const STEPS: &[f64] = &[
        1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0,
        10800.0, 21600.0, 43200.0, 86400.0,
    ];
    STEPS
        .iter()
        .copied()
        .find(|s| span / s <= 8.0)
        .unwrap_or(86400.0 * (span / 86400.0 / 8.0).ceil())
}

/// Elapsed seconds as people read them: 45s, 2m, 1m30s, 3h, 1h30m.
pub fn fmt_elapsed(s: f64) -> String {
    let s = s.round() as i64;
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        match s % 60 {
            0 => format!("{}m", s / 60),
            r => format!("{}m{r}s", s / 60),
        }
    } else {
        match (s % 3600) / 60 {
            0 => format!("{}h", s / 3600),
            m => format!("{}h{m}m", s / 3600),
        }
    }
}

/// A tick label for a value on an axis whose ticks are `step` apart.
pub fn fmt_num(v: f64, step: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        trim(format!("{:.2}", v / 1e9)) + "G"
    } else if a >= 1e6 {
        trim(format!("{:.2}", v / 1e6)) + "M"
    } else if a >= 1e4 {
        trim(format!("{:.1}", v / 1e3)) + "k"
    } else {
        let digits = if step >= 1.0 || step <= 0.0 {
            0
        } else {
            (-step.log10()).ceil().min(6.0) as usize
        };
        trim(format!("{v:.digits$}"))
    }
}

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The percentile label of x = -log10(1 - q): 0 → 0%, 1 → 90%, 3 → 99.9%.
pub fn fmt_percentile_x(x: f64) -> String {
    let q = 100.0 * (1.0 - 10f64.powf(-x));
    let digits = (x.round() as i64 - 2).max(0) as usize;
    format!("{q:.digits$}%")
}

/// Escapes text for HTML and SVG.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            _ => o.push(c),
        }
    }
    o
}

const W: f64 = 720.0;
const H: f64 = 300.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 24.0;
const BOTTOM: f64 = 48.0;

/// A series as drawn: its palette index, the series, and its downsampled points.
type Drawn<'a> = (usize, &'a Series, Vec<(f64, f64)>);

/// The plot area and its scales, once the data and the legend have fixed them.
struct Frame {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
    xticks: Vec<f64>,
    xstep: f64,
    yticks: Vec<f64>,
    /// The label of each y tick (a log axis labels 10^t, not t).
    ylabels: Vec<String>,
    top: f64,
    pw: f64,
    ph: f64,
}

impl Frame {
    fn sx(&self, x: f64) -> f64 {
        LEFT + (x - self.x0) / (self.x1 - self.x0) * self.pw
    }
    fn sy(&self, y: f64) -> f64 {
        self.top + self.ph - (y - self.y0) / (self.y1 - self.y0) * self.ph
    }
    fn bottom(&self) -> f64 {
        self.top + self.ph
    }
}

/// Renders the chart as one `<svg>` element (classes: chart, series, axis, legend).
pub fn render(c: &Chart) -> String {
    let series: Vec<Drawn> = c
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let pts = downsample(&s.points, MAX_POINTS);
            (
                s.color.unwrap_or(i),
                s,
                if c.log_y { to_log(pts) } else { pts },
            )
        })
        .collect();
    let (legend, ly) = legend(&series);
    let f = frame(c, &series, ly + 14.0);

    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" role="img" aria-label="{t}"><title>{t}</title><text class="title" x="{LEFT}" y="20">{t}</text>"#,
        t = esc(&c.title)
    );
    write_x_axis(&mut o, c, &f);
    write_y_axis(&mut o, c, &f);
    let _ = write!(
        o,
        r#"<rect class="frame" x="{LEFT}" y="{top:.1}" width="{pw:.1}" height="{ph:.1}"/>"#,
        top = f.top,
        pw = f.pw,
        ph = f.ph
    );
    write_bands(&mut o, &c.bands, &f);
    write_markers(&mut o, &c.markers, &f);
    for (i, s, pts) in &series {
        write_series(&mut o, color(*i), s, pts, &f);
    }
    let _ = write!(o, r#"<g class="legend">{legend}</g></svg>"#);
    o
}

/// The extent of the drawn points and markers, (x0, x1, y0, y1), before rounding to ticks.
fn data_bounds(series: &[Drawn], markers: &[Marker]) -> (f64, f64, f64, f64) {
    let all = series.iter().flat_map(|s| s.2.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY);
    let mut y0 = f64::INFINITY;
    for &(x, y) in all {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    for m in markers {
        x0 = x0.min(m.x);
        x1 = x1.max(m.x);
    }
    if !x0.is_finite() {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    // Counts and latencies start at zero so that the height of a line means something.
    y0 = y0.min(0.0);
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    (x0, x1, y0, y1)
}

/// Scales and ticks for a plot area starting at `top`.
fn frame(c: &Chart, series: &[Drawn], top: f64) -> Frame {
    let (mut x0, mut x1, mut y0, mut y1) = data_bounds(series, &c.markers);
    let (yticks, ylabels) = if c.log_y {
        log_ticks(series, &mut y0, &mut y1)
    } else {
        // The axis ends on a labelled tick at or above the highest point.
        let (mut yticks, ystep) = nice_ticks(y0, y1, 5);
        if let Some(&last) = yticks.last() {
            if last < y1 - ystep * 1e-9 {
                yticks.push(last + ystep);
            }
            y1 = *yticks.last().unwrap();
        }
        let labels = yticks.iter().map(|&t| fmt_num(t, ystep)).collect();
        (yticks, labels)
    };
    if c.x_kind == XKind::Seconds {
        x0 = x0.min(0.0);
    }
    let (xticks, xstep) = x_ticks(c.x_kind, &mut x0, &mut x1);
    Frame {
        x0,
        x1,
        y0,
        y1,
        xticks,
        xstep,
        yticks,
        ylabels,
        top,
        pw: W - LEFT - RIGHT,
        ph: H - top - BOTTOM,
    }
}

/// The x ticks and their spacing; a percentile axis also widens [x0, x1] to whole decades.
fn x_ticks(kind: XKind, x0: &mut f64, x1: &mut f64) -> (Vec<f64>, f64) {
    match kind {
        XKind::Seconds => {
            let step = time_step(*x1 - *x0);
            let first = (*x0 / step).ceil() * step;
            let ticks = (0..100)
                .map(|k| first + step * k as f64)
                .take_while(|t| *t <= *x1 + 1e-9)
                .collect();
            (ticks, step)
        }
        XKind::Linear => {
            let (t, s) = nice_ticks(*x0, *x1, 8);
            let t: Vec<f64> = t
                .into_iter()
                .filter(|v| *v >= *x0 - s * 1e-6 && *v <= *x1 + s * 1e-6)
                .collect();
            (t, s)
        }
        XKind::LogPercentile => {
            *x0 = 0.0;
            *x1 = x1.ceil().max(1.0);
            ((0..=*x1 as i64).map(|v| v as f64).collect(), 1.0)
        }
    }
}

fn dash_attr(style: Style) -> &'static str {
    if style == Style::Dashed {
        r#" stroke-dasharray="5 3""#
    } else {
        ""
    }
}

/// Legend rows, laid out left to right under the title; also returns the last row's baseline.
fn legend(series: &[Drawn]) -> (String, f64) {
    let mut legend = String::new();
    let (mut lx, mut ly) = (LEFT, 40.0);
    for (i, s, _) in series {
        let wlen = 32.0 + 8.0 * s.name.chars().count() as f64;
        if lx + wlen > W - RIGHT && lx > LEFT {
            lx = LEFT;
            ly += 18.0;
        }
        let _ = write!(
            legend,
            r#"<line x1="{lx}" y1="{y}" x2="{x2}" y2="{y}" stroke="{col}" stroke-width="3"{dash}/><text x="{tx}" y="{ty}">{name}</text>"#,
            y = ly - 4.0,
            x2 = lx + 18.0,
            col = color(*i),
            dash = dash_attr(s.style),
            tx = lx + 22.0,
            ty = ly,
            name = esc(&s.name)
        );
        lx += wlen;
    }
    (legend, ly)
}

fn write_x_axis(o: &mut String, c: &Chart, f: &Frame) {
    o.push_str(r#"<g class="axis x">"#);
    for &t in &f.xticks {
        let label = match c.x_kind {
            XKind::Seconds => fmt_elapsed(t),
            XKind::Linear => fmt_num(t, f.xstep),
            XKind::LogPercentile => fmt_percentile_x(t),
        };
        let _ = write!(
            o,
            r#"<line class="grid" x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{b:.1}"/><text class="tick" x="{x:.1}" y="{ty:.1}" text-anchor="middle">{label}</text>"#,
            x = f.sx(t),
            top = f.top,
            b = f.bottom(),
            ty = f.bottom() + 16.0,
        );
    }
    let _ = write!(
        o,
        r#"<text class="axis-label" x="{x:.1}" y="{y:.1}" text-anchor="middle">{l}</text></g>"#,
        x = LEFT + f.pw / 2.0,
        y = H - 8.0,
        l = esc(&c.x_label)
    );
}

fn write_y_axis(o: &mut String, c: &Chart, f: &Frame) {
    o.push_str(r#"<g class="axis y">"#);
    for (&t, label) in f.yticks.iter().zip(&f.ylabels) {
        let _ = write!(
            o,
            r#"<line class="grid" x1="{LEFT}" y1="{y:.1}" x2="{r:.1}" y2="{y:.1}"/><text class="tick" x="{tx}" y="{ty:.1}" text-anchor="end">{label}</text>"#,
            y = f.sy(t),
            r = LEFT + f.pw,
            tx = LEFT - 6.0,
            ty = f.sy(t) + 4.0,
        );
    }
    let _ = write!(
        o,
        r#"<text class="axis-label" transform="translate(16 {y:.1}) rotate(-90)" text-anchor="middle">{l}</text></g>"#,
        y = f.top + f.ph / 2.0,
        l = esc(&if c.log_y {
            format!("{}, log scale", c.y_label)
        } else {
            c.y_label.clone()
        })
    );
}

/// Points on a log axis: y becomes log10(y); values at or below zero (nothing to show
/// on a log scale) go to the axis floor, a thousandth of the smallest positive value.
fn to_log(pts: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    let min_pos = pts
        .iter()
        .map(|p| p.1)
        .filter(|y| *y > 0.0 && y.is_finite())
        .fold(f64::INFINITY, f64::min);
    let floor = if min_pos.is_finite() {
        min_pos / 1000.0
    } else {
        1.0
    };
    pts.into_iter()
        .map(|(x, y)| (x, if y > 0.0 { y.log10() } else { floor.log10() }))
        .collect()
}

/// Decade ticks of a log axis spanning the (already log10) points; 2 and 5 between
/// decades when there are few. Widens [y0, y1] to whole decades.
fn log_ticks(series: &[Drawn], y0: &mut f64, y1: &mut f64) -> (Vec<f64>, Vec<String>) {
    let ys = series.iter().flat_map(|s| s.2.iter().map(|p| p.1));
    let (lo, hi) = ys
        .filter(|y| y.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), y| {
            (a.min(y), b.max(y))
        });
    let (lo, hi) = if lo.is_finite() { (lo, hi) } else { (0.0, 1.0) };
    *y0 = lo.floor();
    *y1 = hi.ceil().max(*y0 + 1.0);
    let decades = (*y1 - *y0) as i64;
    let mut ticks = Vec::new();
    for d in 0..=decades {
        let base = *y0 + d as f64;
        ticks.push(base);
        if decades <= 2 && d < decades {
            ticks.extend([base + 2f64.log10(), base + 5f64.log10()]);
        }
    }
    let labels = ticks
        .iter()
        .map(|&t| {
            let v = 10f64.powf(t);
            fmt_num(v, 10f64.powf(t.floor()))
        })
        .collect();
    (ticks, labels)
}

fn write_bands(o: &mut String, bands: &[Band], f: &Frame) {
    for b in bands {
        let (x0, x1) = (f.sx(b.x0), f.sx(b.x1));
        let _ = write!(
            o,
            r#"<g class="band"><rect x="{x0:.1}" y="{top:.1}" width="{w:.1}" height="{h:.1}"><title>{l}</title></rect><text x="{tx:.1}" y="{ty:.1}">{l}</text></g>"#,
            top = f.top,
            w = (x1 - x0).max(2.0),
            h = f.ph,
            tx = x0 + 3.0,
            ty = f.bottom() - 4.0,
            l = esc(&b.label)
        );
    }
}

fn write_markers(o: &mut String, markers: &[Marker], f: &Frame) {
    for m in markers {
        let x = f.sx(m.x);
        let _ = write!(
            o,
            r#"<g class="marker"><line x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{b:.1}"/><text x="{tx:.1}" y="{ty:.1}">{l}</text></g>"#,
            top = f.top,
            b = f.bottom(),
            tx = x + 4.0,
            ty = f.top + 12.0,
            l = esc(&m.label)
        );
    }
}

fn write_series(o: &mut String, col: &str, s: &Series, pts: &[(f64, f64)], f: &Frame) {
    if pts.is_empty() {
        return;
    }
    if s.style != Style::Points {
        let mut d = String::new();
        for (k, &(x, y)) in pts.iter().enumerate() {
            let _ = write!(
                d,
                "{}{:.1} {:.1}",
                if k == 0 { "M" } else { " L" },
                f.sx(x),
                f.sy(y)
            );
        }
        if pts.len() == 1 {
            // A run shorter than an interval: a visible dash, not an empty path.
            let _ = write!(d, " L{:.1} {:.1}", f.sx(pts[0].0) + 6.0, f.sy(pts[0].1));
        }
        let _ = write!(
            o,
            r#"<path class="series" d="{d}" stroke="{col}"{dash}><title>{n}</title></path>"#,
            dash = dash_attr(s.style),
            n = esc(&s.name)
        );
    }
    if matches!(s.style, Style::Points | Style::LinePoints) || pts.len() == 1 {
        let _ = write!(o, r#"<g class="points" fill="{col}">"#);
        for &(x, y) in pts {
            let _ = write!(
                o,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3"/>"#,
                f.sx(x),
                f.sy(y)
            );
        }
        o.push_str("</g>");
    }
}

/// The style sheet the charts need, for pages that embed them.
pub const CSS: &str =
    "svg.chart{width:100%;max-width:960px;height:auto;font:13px sans-serif;background:#fff}\
svg.chart .title{font-size:16px;font-weight:600}\
svg.chart .grid{stroke:#e4e4e4;stroke-width:1}\
svg.chart .frame{fill:none;stroke:#999}\
svg.chart .tick{fill:#444}\
svg.chart .axis-label{fill:#222;font-size:13px}\
svg.chart path.series{fill:none;stroke-width:1.6;stroke-linejoin:round}\
svg.chart .marker line{stroke:#c00;stroke-width:1.5;stroke-dasharray:4 3}\
svg.chart .band rect{fill:#d22;fill-opacity:.13}svg.chart .band text{fill:#a00;font-size:10px}\
svg.chart .marker text{fill:#c00;font-weight:600}\
svg.chart .legend text{fill:#222}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downsampling_keeps_extremes_and_bounds_size() {
        let mut pts: Vec<(f64, f64)> = (0..100_000).map(|i| (i as f64, 1.0)).collect();
        pts[54_321].1 = 99.0;
        pts[77_777].1 = -5.0;
        let d = downsample(&pts, 1000);
        assert!(d.len() <= 1002, "{}", d.len());
        assert_eq!((d[0], d[d.len() - 1]), (pts[0], pts[99_999]));
        assert!(d.contains(&(54_321.0, 99.0)));
        assert!(d.contains(&(77_777.0, -5.0)));
        assert!(d.windows(2).all(|w| w[0].0 <= w[1].0));
        assert_eq!(downsample(&pts[..10], 1000).len(), 10);
    }

    #[test]
    fn ticks_are_nice() {
        let (t, s) = nice_ticks(0.0, 97.0, 5);
        assert_eq!(s, 20.0);
        assert_eq!(t, vec![0.0, 20.0, 40.0, 60.0, 80.0]);
        assert_eq!(fmt_num(2.5, 0.5), "2.5");
        assert_eq!(fmt_num(25_000.0, 5000.0), "25k");
        assert_eq!(fmt_num(1_500_000.0, 500_000.0), "1.5M");
        assert_eq!(fmt_elapsed(90.0), "1m30s");
        assert_eq!(fmt_elapsed(5400.0), "1h30m");
        assert_eq!(fmt_percentile_x(0.0), "0%");
        assert_eq!(fmt_percentile_x(2.0), "99%");
        assert_eq!(fmt_percentile_x(3.0), "99.9%");
        assert_eq!(time_step(16.0 * 3600.0), 7200.0);
    }

    #[test]
    fn a_long_series_makes_a_bounded_svg() {
        let mut c = Chart::time("soak", "messages/s");
        let pts = (0..57_600).map(|i| (i as f64, (i % 97) as f64)).collect();
        c.push(Series::line("accepted", pts));
        let svg = render(&c);
        assert!(svg.len() < 40_000, "{}", svg.len());
        assert!(svg.contains(">2h</text>"));
        assert!(svg.contains("messages/s"));
    }

    #[test]
    fn a_log_axis_keeps_the_median_off_the_floor() {
        let p50: Vec<(f64, f64)> = (1..=30)
            .map(|t| (t as f64, 1.0 + (t % 3) as f64 * 0.2))
            .collect();
        let max: Vec<(f64, f64)> = (1..=30)
            .map(|t| (t as f64, if t == 15 { 2000.0 } else { 5.0 }))
            .collect();
        let mut c = Chart::time("latency", "latency (ms)").log_y();
        c.push(Series::line("p50", p50.clone()));
        c.push(Series::line("max", max));
        let svg = render(&c);
        for tick in [">1<", ">10<", ">100<", ">1000<", ">10k<"] {
            assert!(svg.contains(tick), "no tick {tick}");
        }
        assert!(svg.contains("latency (ms), log scale"));
        // On a linear axis up to 2000, p50 (1-1.4 ms) would sit within a pixel of the
        // floor; on the log one it is about a quarter of the way up (4 decades).
        let (ys, _) = (to_log(p50), ());
        let drawn = ys.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
        assert!(drawn > 0.1 && drawn < 0.2, "{drawn}");
        let mut lin = Chart::time("latency", "latency (ms)");
        lin.push(Series::line("p50", vec![(1.0, 1.0), (2.0, 1.0)]));
        assert!(!render(&lin).contains("log scale"));
    }
}
