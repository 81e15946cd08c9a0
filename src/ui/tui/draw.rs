//! One frame of the dashboard, drawn from a [`Model`] and the user's [`Ui`] choices into
//! any ratatui frame (the terminal's, or a `TestBackend` in the tests).
//!
//! From top to bottom: the title; progress toward the run's bound (a gauge) or
//! "open-ended"; throughput and counts in the protocol's own words; a throughput
//! sparkline; the percentile table per phase beside the latency histogram of the selected
//! phase; errors by class under the error rate; active sessions and generator CPU; the keys.
//! Fixed rows are one line each and say the most important thing first, so 80 columns
//! never wrap them; the sparkline, the table, the histogram and the error list take what
//! rows and columns are left, so a 200×60 terminal shows more history, more buckets, more
//! columns and more error classes.

use std::time::Duration;

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Bar, BarChart, Block, Borders, Cell, Clear, Gauge, Paragraph, Row, Sparkline, SparklineBar,
    Table, TableState, Wrap,
};
use ratatui::Frame;

use super::model::{log_buckets, Model, Ui};
use crate::units::{fmt_bytes, fmt_duration};

/// Width from which the percentile table adds count, mean and p99.9.
const WIDE: u16 = 130;

fn bold() -> Style {
    Style::new().add_modifier(Modifier::BOLD)
}

pub(super) fn lat(us: u64) -> String {
    fmt_duration(Duration::from_micros(us))
}

fn hms(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    format!("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

/// Joins `parts` with two spaces, leaving out the trailing ones that would not fit in
/// `width` columns (the first is always kept): a line is shortened by whole items, never
/// cut in the middle of a number.
pub fn fit(parts: &[String], width: usize) -> String {
    let mut out = String::new();
    for p in parts {
        let extra = if out.is_empty() { 0 } else { 2 } + p.chars().count();
        if !out.is_empty() && out.chars().count() + extra > width {
            break;
        }
        if !out.is_empty() {
            out.push_str("  ");
        }
        out.push_str(p);
    }
    out
}

/// Draws the whole dashboard for `m` as `ui` says.
pub fn render(f: &mut Frame, m: &Model, ui: &Ui) {
    let area = f.area();
    if !m.started {
        let lines = vec![
            Line::styled(m.title.clone(), bold()),
            Line::raw("starting… (q stops, ? shows the keys)"),
        ];
        f.render_widget(Paragraph::new(lines), area);
        return;
    }
    let spark_h = (area.height / 8).clamp(2, 6);
    let [head, spark, mid, errs, foot, keys] = Layout::vertical([
        Constraint::Length(4),
        Constraint::Length(spark_h),
        Constraint::Min(6),
        Constraint::Length(errors_height(m, area.height)),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(area);
    header(f, head, m);
    let width = spark.width as usize;
    // The seconds a --fault was in force are drawn red: the fault's band.
    let bars = m
        .throughput
        .last(width)
        .into_iter()
        .zip(m.fault_hist.last(width))
        .map(|(v, fault)| {
            let bar = SparklineBar::from(v);
            if fault > 0 {
                bar.style(Style::new().fg(Color::Red))
            } else {
                bar
            }
        });
    f.render_widget(
        Sparkline::default()
            .data(bars)
            .style(Style::new().fg(Color::Green)),
        spark,
    );
    let table_w = if mid.width >= WIDE { 74 } else { 45 };
    let [left, right] = Layout::horizontal([Constraint::Length(table_w), Constraint::Min(20)])
        .spacing(1)
        .areas(mid);
    percentiles(f, left, m, ui);
    histogram(f, right, m, ui);
    errors(f, errs, m);
    footer(f, foot, m);
    keys_line(f, keys, ui);
    if ui.help {
        help(f, area);
    }
}

/// Rows for the error block: its title and one row per class, at most a fifth of the
/// screen (and at least three classes' worth).
fn errors_height(m: &Model, height: u16) -> u16 {
    let want = m.errors.len().max(1) as u16 + 1;
    want.min((height / 5).max(4))
}

/// Title, progress, throughput and counts: four rows.
fn header(f: &mut Frame, area: Rect, m: &Model) {
    let [title, progress, rates, counts] = Layout::vertical([Constraint::Length(1); 4]).areas(area);
    let w = area.width as usize;
    f.render_widget(Paragraph::new(Line::styled(m.title.clone(), bold())), title);
    gauge(f, progress, m);
    let u = &m.units;
    let c = &m.totals;
    let mut parts = vec![
        format!("throughput {:.0} {} now", m.rate_now, u.rate),
        format!("{:.1} avg", m.rate_avg),
    ];
    parts.push(format!("{} {}", fmt_bytes(c.bytes), u.bytes));
    parts.push(format!("{:.1} KiB/s", m.kbytes_per_s));
    for (name, per_s) in &m.own_now {
        parts.push(format!("{name} {per_s:.0}/s"));
    }
    f.render_widget(Paragraph::new(fit(&parts, w)), rates);
    let mut parts = vec![
        format!("{}: attempted {}", u.unit, c.attempted),
        format!("accepted {}", c.accepted),
        format!("rejected {}", c.rejected),
        format!("failed {}", c.failed),
    ];
    if c.unfinished > 0 {
        parts.push(format!("unfinished {}", c.unfinished));
    }
    if c.reconnections > 0 {
        parts.push(format!("reconnections {}", c.reconnections));
    }
    parts.extend(c.own.said());
    if !m.faults_now.is_empty() {
        parts.insert(0, format!("FAULT {}", m.faults_now.join(" + ")));
    }
    f.render_widget(Paragraph::new(fit(&parts, w)), counts);
}

/// Progress toward the run's bound: its duration, else its count; "open-ended" when it
/// has neither (it runs until stopped).
fn gauge(f: &mut Frame, area: Rect, m: &Model) {
    let (ratio, label) = match (m.planned_s, m.planned_count) {
        (Some(d), _) if d > 0.0 => (
            m.t_s / d,
            format!(
                "elapsed {} of {}  {:.0}%  {} left",
                hms(m.t_s),
                hms(d),
                (m.t_s / d * 100.0).min(100.0),
                hms(d - m.t_s)
            ),
        ),
        (_, Some(n)) if n > 0 => {
            let r = m.totals.attempted as f64 / n as f64;
            let label = format!(
                "{} of {} {}  {:.0}%  elapsed {}",
                m.totals.attempted,
                n,
                m.units.unit,
                (r * 100.0).min(100.0),
                hms(m.t_s)
            );
            (r, label)
        }
        _ => {
            let text = format!(
                "elapsed {}  open-ended: no duration or count bounds this run",
                hms(m.t_s)
            );
            f.render_widget(Paragraph::new(text), area);
            return;
        }
    };
    let g = Gauge::default()
        .ratio(ratio.clamp(0.0, 1.0))
        .label(Span::styled(label, bold()))
        .use_unicode(true)
        .gauge_style(Style::new().fg(Color::Blue).bg(Color::Black));
    f.render_widget(g, area);
}

/// The percentile table, one row per phase, the selected phase highlighted.
fn percentiles(f: &mut Frame, area: Rect, m: &Model, ui: &Ui) {
    let wide = area.width >= 70;
    let mut head = vec!["phase"];
    if wide {
        head.extend(["count", "mean"]);
    }
    head.extend(["p50", "p90", "p99"]);
    if wide {
        head.push("p99.9");
    }
    head.push("max");
    let right = |s: String| Cell::from(Line::from(s).right_aligned());
    let rows: Vec<Row> = m
        .phases
        .iter()
        .map(|p| {
            let mut cells = vec![Cell::from(p.phase.clone())];
            if wide {
                cells.push(right(p.count.to_string()));
                cells.push(right(lat(p.mean_us as u64)));
            }
            cells.extend([lat(p.p50_us), lat(p.p90_us), lat(p.p99_us)].map(right));
            if wide {
                cells.push(right(lat(p.p999_us)));
            }
            cells.push(right(lat(p.max_us)));
            Row::new(cells)
        })
        .collect();
    let mut widths = vec![Constraint::Length(11)];
    if wide {
        widths.extend([Constraint::Length(10), Constraint::Length(7)]);
    }
    widths.extend(std::iter::repeat_n(
        Constraint::Length(7),
        head.len() - widths.len(),
    ));
    let header = Row::new(head.into_iter().map(|h| match h {
        "phase" => Cell::from(h),
        _ => Cell::from(Line::from(h).right_aligned()),
    }))
    .style(bold());
    let table = Table::new(rows, widths)
        .header(header)
        .column_spacing(1)
        .block(
            Block::new()
                .borders(Borders::TOP)
                .title(" latency by phase, whole run "),
        )
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .highlight_symbol("▸ ");
    let mut state = TableState::new().with_selected(ui.selected_index(m));
    f.render_stateful_widget(table, area, &mut state);
}

/// The selected phase's latency distribution over the whole run: one bar per bucket of a
/// log scale, as many buckets as there are rows.
fn histogram(f: &mut Frame, area: Rect, m: &Model, ui: &Ui) {
    let phase = ui.selected_index(m).map(|i| &m.phases[i]);
    let name = phase.map_or("latency", |p| p.phase.as_str());
    let mut title = format!(" {name}: histogram, log scale ");
    if area.width >= 70 {
        if let Some(p) = phase {
            title.push_str(&format!(
                "({} samples; Tab or ←/→ for another phase) ",
                p.count
            ));
        }
    }
    let block = Block::new().borders(Borders::TOP).title(title);
    let inner = block.inner(area);
    f.render_widget(block, area);
    let hist = m
        .hists
        .iter()
        .find(|(p, _)| p.name() == name)
        .map(|(_, h)| h);
    let Some(h) = hist.filter(|h| !h.is_empty()) else {
        f.render_widget(Paragraph::new("no samples yet"), inner);
        return;
    };
    let bars: Vec<Bar> = log_buckets(h, inner.height as usize)
        .into_iter()
        .map(|b| {
            Bar::default()
                .value(b.count)
                .label(Line::from(format!("≤{}", lat(b.upper_us))))
                .text_value(b.count.to_string())
        })
        .collect();
    let chart = BarChart::horizontal(bars)
        .bar_width(1)
        .bar_gap(0)
        .bar_style(Style::new().fg(Color::Cyan))
        .value_style(Style::new().fg(Color::Black).bg(Color::Cyan));
    f.render_widget(chart, inner);
}

/// Error classes, most frequent first, under the error rate.
fn errors(f: &mut Frame, area: Rect, m: &Model) {
    let c = &m.totals;
    let title = match m.error_rate() {
        Some(r) => format!(
            " errors by class · error rate {r:.2}% ({} of {} attempted {}) ",
            c.rejected + c.failed,
            c.attempted,
            m.units.unit
        ),
        None => " errors by class · error rate - (nothing attempted yet) ".to_string(),
    };
    let block = Block::new().borders(Borders::TOP).title(title);
    let inner = block.inner(area);
    f.render_widget(block, area);
    if m.errors.is_empty() {
        f.render_widget(Paragraph::new("none"), inner);
        return;
    }
    let rows_for = inner.height as usize;
    let more = m.error_classes.saturating_sub(rows_for);
    let shown = if more > 0 {
        rows_for.saturating_sub(1)
    } else {
        rows_for
    };
    let mut rows: Vec<Row> = m
        .errors
        .iter()
        .take(shown)
        .map(|e| {
            let class =
                crate::report::data::class_label(&e.phase, &e.kind, e.code, e.enhanced.as_deref());
            Row::new([
                Cell::from(Line::from(e.count.to_string()).right_aligned()),
                Cell::from(class),
                Cell::from(e.text.clone()),
            ])
        })
        .collect();
    if more > 0 {
        let rest = m.error_classes - shown;
        rows.push(Row::new([
            Cell::from(""),
            Cell::from(format!("… {rest} more classes (errors.jsonl has them all)")),
        ]));
    }
    let widths = [
        Constraint::Length(9),
        Constraint::Length(24),
        Constraint::Fill(1),
    ];
    f.render_widget(Table::new(rows, widths).column_spacing(1), inner);
}

/// Active sessions and generator CPU, each with its sparkline.
fn footer(f: &mut Frame, area: Rect, m: &Model) {
    let [left, right] = Layout::horizontal([Constraint::Fill(1); 2])
        .spacing(2)
        .areas(area);
    let items = [
        (
            format!("active sessions {} ", m.active),
            &m.active_hist,
            left,
            Color::Magenta,
        ),
        (
            format!("generator CPU {:.0}% ", m.cpu_pct),
            &m.cpu_hist,
            right,
            Color::Yellow,
        ),
    ];
    for (label, hist, area, color) in items {
        let [l, s] = Layout::horizontal([
            Constraint::Length(label.chars().count() as u16),
            Constraint::Fill(1),
        ])
        .areas(area);
        f.render_widget(Paragraph::new(label), l);
        f.render_widget(
            Sparkline::default()
                .data(hist.last(s.width as usize))
                .style(Style::new().fg(color)),
            s,
        );
    }
}

/// The keys, after the state the screen is in (paused, stopping). Each state's
/// explanation goes first when the line would not fit, never the state itself.
fn keys_line(f: &mut Frame, area: Rect, ui: &Ui) {
    let badge = Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD);
    let hint = if ui.paused.is_some() {
        "q stop  ? help"
    } else {
        "q stop  p pause  Tab/←→ phase  ? help  Ctrl-C interrupt"
    };
    let mut states = Vec::new();
    if ui.paused.is_some() {
        states.push((
            " PAUSED ",
            badge.fg(Color::Yellow),
            " the run goes on, p resumes  ",
        ));
    }
    if ui.stopping {
        states.push((
            " STOPPING ",
            badge.fg(Color::Red),
            " finishing work in flight  ",
        ));
    }
    let long: usize = states
        .iter()
        .map(|(b, _, t)| b.chars().count() + t.chars().count())
        .sum::<usize>()
        + hint.chars().count();
    let explain = long <= area.width as usize;
    let mut spans = Vec::new();
    for (b, style, text) in states {
        spans.push(Span::styled(b, style));
        spans.push(Span::raw(if explain { text } else { " " }));
    }
    spans.push(Span::styled(hint, Style::new().fg(Color::DarkGray)));
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// The help box, over the middle of the screen.
fn help(f: &mut Frame, area: Rect) {
    let text = [
        "q, Esc      stop the run: work in flight finishes, results are written, the run is recorded as interrupted",
        "Ctrl-C      interrupt as without the dashboard (a second one stops at once)",
        "p           pause or resume drawing (the run goes on)",
        "Tab, →      next phase in the histogram; Shift-Tab, ← the previous one",
        "?           hide this help",
    ];
    let w = area.width.saturating_sub(4).min(100);
    let h = 9.min(area.height);
    let r = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(text.map(Line::raw).to_vec())
            .wrap(Wrap { trim: false })
            .block(Block::bordered().title(" keys ")),
        r,
    );
}
