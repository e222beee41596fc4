//! `memtrace tune`'s report as text: what was replayed, how far to trust it, the ranking, and
//! the line to use.

use super::{TuneReport, MIN_SAVING};
use crate::commands::replay::prepare::capacity_words;
use crate::format::{count, counted, format_size, signed_size};
use std::fmt::Write as _;

/// The report as text.
pub fn render(report: &TuneReport) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "tune of {}, device {}: {}, {} replayed ({} at once, from the {})",
        report.file,
        report.device,
        counted(report.events, "event"),
        counted(report.ranked.len() as u64, "setting"),
        report.jobs,
        if report.mode == "fresh" {
            "live blocks alone"
        } else {
            "trace's first state"
        }
    );
    let recorded = match report.recorded_config.as_str() {
        "" => "PyTorch's defaults".to_string(),
        config => config.to_string(),
    };
    let source = match report.recorded_config_source {
        "trace" => "as the trace records them",
        "default" => "assumed: the trace does not record them",
        other => other,
    };
    let _ = writeln!(text, "recorded:   {recorded} ({source})");
    if let Some(note) = &report.config_note {
        let _ = writeln!(text, "            {note}");
    }
    let source = capacity_words(
        report.capacity_source,
        report.device,
        &report.out_of_memory_elsewhere,
    );
    let _ = writeln!(
        text,
        "capacity:   {} ({source})",
        format_size(report.capacity_bytes)
    );
    let _ = writeln!(text, "confidence: {}", confidence(report));
    text.push('\n');
    let _ = writeln!(
        text,
        "{:>4}  {:>13}  {:>8}  {:>13}  {:>14}  settings (change from the recorded)",
        "rank", "peak reserved", "change", "out of memory", "segment allocs"
    );
    for tried in &report.ranked {
        let change = if tried.baseline {
            "-".to_string()
        } else if tried.peak_reserved_change == 0.0 {
            "same".to_string()
        } else {
            format!("{:+.1} %", tried.peak_reserved_change * 100.0)
        };
        let _ = writeln!(
            text,
            "{:>4}  {:>13}  {:>8}  {:>13}  {:>14}  {}",
            tried.rank,
            format_size(tried.peak_reserved_bytes),
            change,
            count(tried.out_of_memory),
            count(tried.segment_allocs),
            tried.change
        );
    }
    text.push('\n');
    match &report.recommended {
        Some(best) => {
            let _ = writeln!(text, "use:        {}={}", best.variable, best.config);
            if best.variable != blockpool::config::PYTORCH_ENV_VAR {
                text.push_str(
                    "            (blockpool's own setting: PyTorch's allocator has no such key; it \
                     acts where blockpool allocates, as with torch-plugin)\n",
                );
            }
            let baseline = best.peak_reserved_bytes as i128 + best.saved_bytes;
            let _ = write!(
                text,
                "            peak reserved {} instead of {} ({})",
                format_size(best.peak_reserved_bytes),
                format_size(u64::try_from(baseline).unwrap_or(u64::MAX)),
                signed_size(-best.saved_bytes)
            );
            match best.avoids_recorded_oom {
                Some(true) => text.push_str("; the recorded out-of-memory error does not happen"),
                Some(false) => text.push_str("; the recorded out-of-memory error still happens"),
                None => {}
            }
            if best.avoids_recorded_oom.is_none()
                && best.out_of_memory < best.recorded_settings_out_of_memory
            {
                let _ = write!(
                    text,
                    "; {} where the recorded settings meet {}",
                    counted(best.out_of_memory, "out-of-memory error"),
                    count(best.recorded_settings_out_of_memory)
                );
            }
            text.push('\n');
        }
        None => {
            let _ = writeln!(
                text,
                "use:        the recorded settings: no setting tried avoids more out-of-memory \
                 errors or saves {:.0} % of the peak",
                MIN_SAVING * 100.0
            );
        }
    }
    let best_notes = report
        .ranked
        .iter()
        .find(|t| match &report.recommended {
            Some(best) => t.config == best.config,
            None => t.baseline,
        })
        .map_or(&[][..], |t| &t.notes[..]);
    for note in report.notes.iter().chain(best_notes) {
        let _ = writeln!(text, "note:       {note}");
    }
    text
}

/// The confidence line: the replay under the recorded settings against the recording.
fn confidence(report: &TuneReport) -> String {
    let c = &report.confidence;
    let replayed = format_size(c.replayed_peak_reserved_bytes);
    let recorded = report
        .recorded_peak_reserved_bytes
        .map(format_size)
        .unwrap_or_default();
    let ratio = c.ratio.map_or(String::new(), |r| format!("{r:.3}"));
    match c.level {
        "exact" => format!(
            "exact: under the recorded settings the replay reserves {replayed} at its peak, as \
             the recording did"
        ),
        "close" => format!(
            "close: under the recorded settings the replay reserves {replayed} at its peak, \
             the recording {recorded} (ratio {ratio})"
        ),
        "rough" => format!(
            "rough: under the recorded settings the replay reserves {replayed} at its peak, \
             the recording {recorded} (ratio {ratio}); the ranking is blockpool's allocator's, \
             which here differs from the recording's: check the chosen settings on the GPU"
        ),
        _ => format!(
            "unknown: the trace records no segments to compare with (the replay under the \
             recorded settings reserves {replayed} at its peak)"
        ),
    }
}
