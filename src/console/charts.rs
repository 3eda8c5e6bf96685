//! Charts drawn on the server as inline SVG: no script, no inline style (colours come from
//! classes in `console.css`, so the strict Content-Security-Policy holds). Each chart is an
//! image with a title and a description (`role="img"`, `aria-labelledby`); each plotted mark
//! names its series and value in `data-series` and `data-value` and in a `<title>` tooltip.
//! The page puts the same figures in a table next to each chart.

use std::fmt::Write;

/// Text for SVG: the HTML escaping of the sign-in pages serves (same five characters).
use crate::pages::escape as esc;

const WIDTH: f64 = 720.0;
const LEFT: f64 = 48.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 28.0;
const PLOT_HEIGHT: f64 = 160.0;

/// One series: its name (shown in the legend and tooltips), its CSS class and its values.
pub struct Series<'a> {
    pub name: &'a str,
    pub class: &'a str,
    pub values: &'a [i64],
}

/// The opening of a chart `id` of `height` with its accessible title and description.
fn open(out: &mut String, id: &str, height: f64, title: &str, desc: &str) {
    let _ = write!(
        out,
        r#"<svg id="{id}" class="chart" viewBox="0 0 {WIDTH} {height}" role="img" aria-labelledby="{id}-title {id}-desc" xmlns="http://www.w3.org/2000/svg"><title id="{id}-title">{}</title><desc id="{id}-desc">{}</desc>"#,
        esc(title),
        esc(desc)
    );
}

/// A value axis from 0 to `max` with three ticks, and the time labels under the plot.
fn axes(out: &mut String, max: i64, ticks: &[(usize, String)], slots: usize) {
    let bottom = TOP + PLOT_HEIGHT;
    for k in 0..=2 {
        let value = max * k / 2;
        let y = bottom - PLOT_HEIGHT * k as f64 / 2.0;
        let _ = write!(
            out,
            r#"<line class="grid" x1="{LEFT}" x2="{}" y1="{y}" y2="{y}"/><text class="axis" x="{}" y="{}" text-anchor="end">{value}</text>"#,
            WIDTH - RIGHT,
            LEFT - 6.0,
            y + 4.0
        );
    }
    let step = (WIDTH - LEFT - RIGHT) / slots.max(1) as f64;
    for (i, label) in ticks {
        let x = LEFT + step * *i as f64;
        let anchor = if *i == 0 {
            "start"
        } else if *i + 1 >= slots {
            "end"
        } else {
            "middle"
        };
        let _ =
            write!(out, r#"<text class="axis" x="{x:.1}" y="{}" text-anchor="{anchor}">{}</text>"#, bottom + 18.0, esc(label));
    }
}

/// The largest value of `values`, at least 1 (an empty chart still has an axis).
fn ceiling(values: impl Iterator<Item = i64>) -> i64 {
    // Rounded up to an even number so the middle tick is whole.
    let max = values.max().unwrap_or(0).max(1);
    max + max % 2
}

/// Bars per time slot, one stacked segment per series. `labels[i]` names slot `i` in
/// tooltips; `ticks` are the slots labelled under the axis.
pub fn stacked_bars(
    id: &str,
    title: &str,
    desc: &str,
    labels: &[String],
    ticks: &[(usize, String)],
    series: &[Series],
) -> String {
    let slots = labels.len();
    let max = ceiling((0..slots).map(|i| series.iter().map(|s| s.values.get(i).copied().unwrap_or(0)).sum()));
    let mut out = String::new();
    open(&mut out, id, TOP + PLOT_HEIGHT + BOTTOM, title, desc);
    axes(&mut out, max, ticks, slots);
    let step = (WIDTH - LEFT - RIGHT) / slots.max(1) as f64;
    let width = (step * 0.8).max(1.0);
    for (i, label) in labels.iter().enumerate() {
        let mut base = TOP + PLOT_HEIGHT;
        for s in series {
            let n = s.values.get(i).copied().unwrap_or(0);
            if n == 0 {
                continue;
            }
            let h = PLOT_HEIGHT * n as f64 / max as f64;
            base -= h;
            let _ = write!(
                out,
                r#"<rect class="{}" data-series="{}" data-slot="{i}" data-value="{n}" x="{:.1}" y="{base:.1}" width="{width:.1}" height="{h:.1}"><title>{}: {n} {}</title></rect>"#,
                s.class,
                esc(s.name),
                LEFT + step * i as f64 + (step - width) / 2.0,
                esc(label),
                esc(s.name)
            );
        }
    }
    legend(&mut out, series.iter().map(|s| (s.name, s.class)));
    out.push_str("</svg>");
    out
}

/// One line per series over the time slots.
pub fn lines(id: &str, title: &str, desc: &str, labels: &[String], ticks: &[(usize, String)], series: &[Series]) -> String {
    let slots = labels.len();
    let max = ceiling(series.iter().flat_map(|s| s.values.iter().copied()));
    let mut out = String::new();
    open(&mut out, id, TOP + PLOT_HEIGHT + BOTTOM, title, desc);
    axes(&mut out, max, ticks, slots);
    let step = (WIDTH - LEFT - RIGHT) / slots.max(1) as f64;
    for s in series {
        let points: Vec<String> = (0..slots)
            .map(|i| {
                let n = s.values.get(i).copied().unwrap_or(0);
                format!("{:.1},{:.1}", LEFT + step * (i as f64 + 0.5), TOP + PLOT_HEIGHT - PLOT_HEIGHT * n as f64 / max as f64)
            })
            .collect();
        let total: i64 = s.values.iter().sum();
        let _ = write!(
            out,
            r#"<polyline class="{}" data-series="{}" data-value="{total}" fill="none" points="{}"><title>{}: {total} in the range</title></polyline>"#,
            s.class,
            esc(s.name),
            points.join(" "),
            esc(s.name)
        );
    }
    legend(&mut out, series.iter().map(|s| (s.name, s.class)));
    out.push_str("</svg>");
    out
}

/// Horizontal bars: one group per row label, one bar per series, each with its value written
/// at its end (`unit` after it).
pub fn bar_rows(id: &str, title: &str, desc: &str, rows: &[String], series: &[(&str, &str, Vec<f64>)], unit: &str) -> String {
    let per_row = 18.0 + 14.0 * series.len() as f64;
    let height = TOP + per_row * rows.len().max(1) as f64 + 24.0;
    let max = series.iter().flat_map(|(_, _, v)| v.iter().copied()).fold(0.0_f64, f64::max).max(1.0);
    let span = WIDTH - LEFT - RIGHT - 90.0;
    let mut out = String::new();
    open(&mut out, id, height, title, desc);
    for (r, label) in rows.iter().enumerate() {
        let top = TOP + per_row * r as f64;
        let _ = write!(
            out,
            r#"<text class="label" x="{LEFT}" y="{:.1}">{}</text>"#,
            top + 12.0,
            esc(if label.is_empty() { "(none)" } else { label })
        );
        for (k, (name, class, values)) in series.iter().enumerate() {
            let v = values.get(r).copied().unwrap_or(0.0);
            let y = top + 16.0 + 14.0 * k as f64;
            let w = (span * v / max).max(1.0);
            let shown = if v.fract() == 0.0 { format!("{v:.0}") } else { format!("{v:.1}") };
            let _ = write!(
                out,
                r#"<rect class="{class}" data-series="{}" data-label="{}" data-value="{shown}" x="{LEFT}" y="{y:.1}" width="{w:.1}" height="11"><title>{} {}: {shown}{unit}</title></rect><text class="axis" x="{:.1}" y="{:.1}">{shown}{unit}</text>"#,
                esc(name),
                esc(label),
                esc(label),
                esc(name),
                LEFT + w + 4.0,
                y + 10.0
            );
        }
    }
    legend(&mut out, series.iter().map(|(name, class, _)| (*name, *class)));
    out.push_str("</svg>");
    out
}

/// The legend across the chart's top right.
fn legend<'a>(out: &mut String, entries: impl Iterator<Item = (&'a str, &'a str)>) {
    let mut x = WIDTH - RIGHT;
    let entries: Vec<_> = entries.collect();
    for (name, class) in entries.iter().rev() {
        let width = 16.0 + 7.0 * name.chars().count() as f64;
        x -= width + 10.0;
        let _ = write!(
            out,
            r#"<rect class="{class}" x="{x:.1}" y="2" width="10" height="10"/><text class="axis" x="{:.1}" y="11">{}</text>"#,
            x + 14.0,
            esc(name)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("t{i}")).collect()
    }

    #[test]
    fn stacked_bars_draw_one_mark_per_nonzero_value_with_its_figure() {
        let ok = [0, 3, 0, 1];
        let error = [2, 0, 0, 1];
        let svg = stacked_bars(
            "calls",
            "Calls",
            "Calls per slot",
            &labels(4),
            &[(0, "t0".into()), (3, "t3".into())],
            &[Series { name: "ok", class: "s-ok", values: &ok }, Series { name: "error", class: "s-error", values: &error }],
        );
        assert!(svg.starts_with("<svg id=\"calls\"") && svg.ends_with("</svg>"));
        assert_eq!(svg.matches("data-series=\"ok\"").count(), 2);
        assert_eq!(svg.matches("data-series=\"error\"").count(), 2);
        assert!(svg.contains(r#"data-series="ok" data-slot="1" data-value="3""#));
        assert!(svg.contains("role=\"img\"") && svg.contains("<title id=\"calls-title\">Calls</title>"));
        // The tallest stack (slot 1: 3 calls, rounded up to 4) fills three quarters.
        assert!(svg.contains(r#"data-slot="1" data-value="3" x="#) && svg.contains(r#"height="120.0""#));
    }

    #[test]
    fn text_is_escaped_everywhere() {
        let v = [1];
        let svg =
            lines("e", "<t>", "\"d\"", &labels(1), &[(0, "<x>".into())], &[Series { name: "a&b", class: "l0", values: &v }]);
        assert!(!svg.contains("<t>") && !svg.contains("<x>") && !svg.contains("a&b"));
        assert!(svg.contains("&lt;t&gt;") && svg.contains("a&amp;b") && svg.contains("&quot;d&quot;"));
        let rows = bar_rows("b", "t", "d", &["<script>".into()], &[("p50", "s-ok", vec![1.5])], " ms");
        assert!(!rows.contains("<script>") && rows.contains(r#"data-value="1.5""#));
    }

    #[test]
    fn an_empty_chart_still_has_its_axis_and_no_marks() {
        let svg = stacked_bars("c", "t", "d", &labels(3), &[], &[Series { name: "ok", class: "s-ok", values: &[0, 0, 0] }]);
        assert_eq!(svg.matches("data-series=").count(), 0);
        assert_eq!(svg.matches("class=\"grid\"").count(), 3);
    }

    #[test]
    fn lines_carry_their_totals() {
        let svg = lines("e", "t", "d", &labels(3), &[], &[Series { name: "timeout", class: "l0", values: &[1, 0, 2] }]);
        assert!(svg.contains(r#"data-series="timeout" data-value="3""#));
        assert_eq!(svg.matches("<polyline").count(), 1);
    }
}
