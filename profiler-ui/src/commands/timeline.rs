//! `memtrace timeline FILE --out F.svg [--device N]`: allocated, reserved and requested memory
//! over time as an SVG chart, with the outermost annotations (steps) marked.

use crate::analysis::timeline::{
    memory_series, note_other_devices_out_of_memory, pick_device, steps, Sample, Step,
};
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
    note_other_devices_out_of_memory(snapshot, device);
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
    // A label only where the one before it has ended: narrow steps keep their shading.
    let mut free_from = LEFT;
    for (i, step) in steps.iter().enumerate() {
        let (x0, x1) = (index_x(step.start), index_x(step.end));
        if i % 2 == 0 {
            let _ = writeln!(
                svg,
                r##"<rect x="{x0:.1}" y="{TOP}" width="{:.1}" height="{plot_h}" fill="#f3f3f8"/>"##,
                (x1 - x0).max(0.5)
            );
        }
        if x0 + 2.0 >= free_from {
            let _ = writeln!(
                svg,
                r##"<text class="step" x="{:.1}" y="{:.1}" fill="#555">{}</text>"##,
                x0 + 2.0,
                TOP + 12.0,
                escape(&step.tag)
            );
            free_from = x0 + 2.0 + label_width(&step.tag) + 8.0;
        }
    }
    // Gridlines at round sizes.
    for bytes in byte_ticks(y_max as u64) {
        let y = py(bytes);
        let _ = writeln!(
            svg,
            r##"<line class="ytick" x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            WIDTH - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            format_size(bytes)
        );
    }
    // Ticks at round times since the first event, or round event numbers.
    let bottom = TOP + plot_h;
    let span = x_max - x_min;
    // Whole microseconds or events at the finest.
    let step = nice_step(span, X_TICKS).max(1.0);
    let mut tick = 0.0;
    while tick <= span {
        let x = px(x_min + tick);
        let label = if tick == 0.0 {
            "0".to_owned()
        } else if by_time {
            duration(tick)
        } else {
            count(tick as u64)
        };
        let _ = writeln!(
            svg,
            r##"<line class="xtick" x1="{x:.1}" y1="{bottom:.1}" x2="{x:.1}" y2="{:.1}" stroke="#888"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            bottom + 5.0,
            bottom + 18.0,
            escape(&label)
        );
        tick += step;
    }
    let axis = if by_time {
        format!(
            "time since the first event (of {})",
            duration(x_max - x_min)
        )
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

/// About how many ticks the x axis gets.
const X_TICKS: f64 = 8.0;

/// The width of `text` at the chart's 12 px font, about.
fn label_width(text: &str) -> f64 {
    text.chars().count() as f64 * 7.0
}

/// The step from the 1-2-5 series (times a power of ten) that cuts `span` into at most about
/// `target` parts.
fn nice_step(span: f64, target: f64) -> f64 {
    let raw = (span / target).max(f64::MIN_POSITIVE);
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|&step| step >= raw)
        .unwrap_or(10.0 * magnitude)
}

/// Gridlines from 0 to `max` bytes: a 1-2-5 step in the binary unit `max` is written in (so
/// the labels are round: 512 MiB, 1.00 GiB, ...; GiB at most, as sizes are printed), about
/// four of them.
fn byte_ticks(max: u64) -> Vec<u64> {
    let mut unit = 1u64;
    while unit < 1 << 30 && max >= unit * 1024 {
        unit *= 1024;
    }
    let step = ((nice_step(max as f64 / unit as f64, 4.0) * unit as f64) as u64).max(1);
    (0..=max / step).map(|i| i * step).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_come_from_the_1_2_5_series() {
        assert_eq!(nice_step(10.0, 8.0), 2.0);
        assert_eq!(nice_step(7_300_000.0, 8.0), 1_000_000.0);
        assert_eq!(nice_step(3.0, 8.0), 0.5);
        assert_eq!(nice_step(123_456.0, 8.0), 20_000.0);
    }

    #[test]
    fn gridlines_are_round_sizes_not_quarters_of_the_peak() {
        const MIB: u64 = 1 << 20;
        const GIB: u64 = 1 << 30;
        // 5.48 GiB: quarters would be 1.37 GiB apart.
        assert_eq!(byte_ticks(5 * GIB + GIB / 2), [0, 2 * GIB, 4 * GIB]);
        assert_eq!(byte_ticks(300 * MIB), [0, 100 * MIB, 200 * MIB, 300 * MIB]);
        assert_eq!(byte_ticks(0), [0]);
        assert_eq!(byte_ticks(2200 * GIB), [0, 1000 * GIB, 2000 * GIB]);
    }

    fn sample(index: usize, time_us: u64, bytes: u64) -> Sample {
        Sample {
            index,
            time_us,
            allocated: bytes,
            reserved: bytes,
            requested: bytes,
            active: bytes,
        }
    }

    #[test]
    fn the_x_axis_has_round_ticks_and_step_labels_do_not_overlap() {
        let series: Vec<Sample> = (0..1000)
            .map(|i| sample(i, 1_000_000 + i as u64 * 7_000, (i as u64 % 10) << 20))
            .collect();
        let steps: Vec<Step> = (0..100)
            .map(|i| Step {
                tag: format!("step {i}"),
                start: i * 10,
                end: i * 10 + 10,
            })
            .collect();
        let svg = render("t", 0, &series, &steps, 1000);
        // 6.993 s in 1 s steps: 0 s to 6 s.
        assert_eq!(svg.matches(r#"<line class="xtick""#).count(), 7);
        assert!(svg.contains(">1.000 s</text>") && svg.contains(">6.000 s</text>"));
        // 100 steps of 10 px each: a label fits every few steps only.
        let labels = svg.matches(r#"<text class="step""#).count();
        assert!((10..=25).contains(&labels), "{labels} step labels");
        let untimed: Vec<Sample> = (0..1000).map(|i| sample(i, 0, 1 << 20)).collect();
        let svg = render("t", 0, &untimed, &[], 1000);
        assert!(svg.contains(">800</text>") && !svg.contains(">1,000</text>"));
    }
}
