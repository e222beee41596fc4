//! `memtrace timeline FILE --out F.svg [--device N]`: allocated, reserved and requested memory
//! over time as an SVG chart, with the outermost annotations (steps) marked.

use crate::analysis::timeline::{memory_series, pick_device, steps, Sample, Step};
use crate::format::{count, duration, format_size};
use crate::load::load_trace;
use crate::output::Output;
use anyhow::Context as _;
use std::fmt::Write as _;
use std::path::Path;

const WIDTH: f64 = 1200.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

/// The curves drawn, with their colours.
const CURVES: [(&str, &str); 3] = [
    ("reserved", "#888888"),
    ("allocated", "#1f77b4"),
    ("requested", "#2ca02c"),
];

/// Runs `memtrace timeline`.
pub fn run(file: &Path, svg: &Path, device: Option<u32>, out: &mut Output) -> anyhow::Result<()> {
    let trace = load_trace(file).context("cannot read the trace")?;
    let snapshot = &trace.snapshot;
    let device = pick_device(snapshot, device)?;
    let series = memory_series(snapshot, device)?;
    let steps = steps(snapshot, device);
    let numbered = snapshot.event_numbers(device).count();
    let chart = render(
        &file.display().to_string(),
        device,
        &series,
        &steps,
        numbered,
    );
    std::fs::write(svg, chart).with_context(|| format!("cannot write {}", svg.display()))?;
    out.write(&format!(
        "wrote {} (device {device}, {})\n",
        svg.display(),
        numbered_events(numbered)
    ))?;
    out.flush()?;
    Ok(())
}

/// "12 events, numbered 0 to 11": how many events the file numbers on a device, and their
/// numbers (see `memtrace --help`, Event numbers).
fn numbered_events(numbered: usize) -> String {
    match numbered {
        0 => "no events".to_owned(),
        1 => "1 event, numbered 0".to_owned(),
        n => format!(
            "{} events, numbered 0 to {}",
            count(n as u64),
            count(n as u64 - 1)
        ),
    }
}

/// The chart. The x axis is time when the events carry distinct times, else the events in
/// order; `numbered` is how many events the file numbers on `device` (inserted annotations
/// have no number), which the axis names.
pub fn render(
    title: &str,
    device: u32,
    series: &[Sample],
    steps: &[Step],
    numbered: usize,
) -> String {
    let by_time = series.windows(2).any(|w| w[1].time_us > w[0].time_us);
    let x_of = |s: &Sample| {
        if by_time {
            s.time_us as f64
        } else {
            s.index as f64
        }
    };
    let x_max = series.iter().map(x_of).fold(0.0_f64, f64::max).max(1.0);
    let x_min = if by_time {
        series
            .iter()
            .skip(1)
            .map(x_of)
            .fold(f64::INFINITY, f64::min)
            .min(x_max)
    } else {
        0.0
    };
    let y_max = series
        .iter()
        .map(|s| s.reserved.max(s.allocated).max(s.requested))
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let px = |x: f64| LEFT + (x - x_min).max(0.0) / (x_max - x_min).max(1.0) * plot_w;
    let py = |y: u64| TOP + plot_h - y as f64 / y_max * plot_h;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="20" font-size="14">{} — device {device}</text>"#,
        escape(title)
    );
    // Steps: alternate shading, labelled.
    let index_x = |index: usize| {
        let sample = series.get(index.min(series.len().saturating_sub(1)));
        sample.map_or(LEFT, |s| px(x_of(s)))
    };
    for (i, step) in steps.iter().enumerate() {
        let (x0, x1) = (index_x(step.start), index_x(step.end));
        if i % 2 == 0 {
            let _ = writeln!(
                svg,
                r##"<rect x="{x0:.1}" y="{TOP}" width="{:.1}" height="{plot_h}" fill="#f3f3f8"/>"##,
                (x1 - x0).max(0.5)
            );
        }
        let _ = writeln!(
            svg,
            r##"<text class="step" x="{:.1}" y="{:.1}" fill="#555">{}</text>"##,
            x0 + 2.0,
            TOP + 12.0,
            escape(&step.tag)
        );
    }
    // Axes and gridlines.
    for i in 0..=4 {
        let bytes = (y_max * i as f64 / 4.0) as u64;
        let y = py(bytes);
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            WIDTH - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            format_size(bytes)
        );
    }
    let axis = if by_time {
        format!("time (µs), {}", duration(x_max - x_min))
    } else {
        format!(
            "events in order (no times recorded): {}",
            numbered_events(numbered)
        )
    };
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 12.0,
        escape(&axis)
    );
    // Curves, one point per pixel column at most (the column's highest value, so peaks show).
    for (name, colour) in CURVES {
        let value = |s: &Sample| match name {
            "reserved" => s.reserved,
            "allocated" => s.allocated,
            _ => s.requested,
        };
        let mut points: Vec<(f64, u64)> = Vec::new();
        for sample in series {
            let x = px(x_of(sample)).round();
            match points.last_mut() {
                Some(last) if last.0 == x => last.1 = last.1.max(value(sample)),
                _ => points.push((x, value(sample))),
            }
        }
        let path: Vec<String> = points
            .iter()
            .map(|&(x, y)| format!("{x:.1},{:.1}", py(y)))
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline class="{name}" fill="none" stroke="{colour}" stroke-width="1.5" points="{}"/>"#,
            path.join(" ")
        );
    }
    for (i, (name, colour)) in CURVES.iter().enumerate() {
        let x = WIDTH - RIGHT - 300.0 + i as f64 * 100.0;
        let _ = writeln!(
            svg,
            r#"<rect x="{x:.1}" y="10" width="12" height="12" fill="{colour}"/><text x="{:.1}" y="20">{name}</text>"#,
            x + 16.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// `text` safe inside SVG text and attributes.
pub fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '&' => escaped.push_str("&amp;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&apos;"),
            c if c.is_control() => escaped.push(' '),
            c => escaped.push(c),
        }
    }
    escaped
}
