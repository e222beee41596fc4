//! `memtrace serve FILE... [--port N] [--open] [--max-connections N] [--idle-timeout S]
//! [--request-timeout S]`: loads
//! the traces, starts the web viewer on 127.0.0.1 and prints its address; runs until
//! interrupted. One file gets the viewer's page; several (or a folder, or a rank pattern) the
//! page that sets them side by side. `--open` asks the desktop to open the page and carries on
//! without it when there is no browser.

use crate::format::counted;
use crate::load::load_trace;
use crate::output::Output;
use crate::serve::files::resolve;
use crate::serve::streams::WhatIf;
use crate::serve::{bind, serve_forever, Limits, TraceModel, TraceSet};
use anyhow::Context as _;
use blockpool::trace::file::TraceFormat;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;

/// Runs `memtrace serve` on `files` (files, folders or rank patterns, see
/// [`crate::serve::files`]).
pub fn run(
    files: &[PathBuf],
    port: u16,
    open: bool,
    limits: Limits,
    out: &mut Output,
) -> anyhow::Result<()> {
    let entries = resolve(files)?;
    let several = entries.len() > 1;
    let mut traces = Vec::with_capacity(entries.len());
    for entry in &entries {
        let trace = load_trace(&entry.path).with_context(|| match several {
            true => format!("cannot read the trace of {}", entry.label),
            false => "cannot read the trace".to_string(),
        })?;
        let format = trace.format;
        let model = TraceModel::build(&entry.path, format.as_str(), trace.snapshot)?;
        traces.push(model.with_what_if(what_if(format)));
    }
    let set = TraceSet::new(entries, traces)?;
    let (listener, address) = bind(port)?;
    let url = format!("http://{address}/");
    let mut text = String::new();
    if several {
        for (entry, trace) in set.files.iter().zip(&set.traces) {
            let events: usize = trace.devices.iter().map(|d| d.events).sum();
            let _ = writeln!(
                text,
                "  {}: {} ({})",
                entry.label,
                entry.path.display(),
                counted(events as u64, "event")
            );
        }
        let _ = writeln!(
            text,
            "serving {} files side by side at {url}",
            set.files.len()
        );
    } else {
        let events: usize = set.traces[0].devices.iter().map(|d| d.events).sum();
        let _ = writeln!(
            text,
            "serving {} ({}) at {url}",
            set.files[0].path.display(),
            counted(events as u64, "event")
        );
    }
    text.push_str("press Ctrl-C to stop\n");
    out.write(&text)?;
    out.flush()?;
    if open {
        if let Err(reason) = open_browser(&url) {
            eprintln!("memtrace: could not open a browser ({reason}); open {url} yourself");
        }
    }
    serve_forever(listener, Arc::new(set), limits);
    Ok(())
}

/// Asks the desktop to open `url`: `$BROWSER`, else the platform's opener.
/// The viewer's what-if of the stream-ordered policy: `memtrace streams`' two replays, with
/// the trace's own settings.
pub(crate) fn what_if(format: TraceFormat) -> WhatIf {
    WhatIf(Box::new(move |snapshot, device| {
        let what_if = super::streams::ordered_what_if(snapshot, format, device, None)?;
        Ok(serde_json::to_value(what_if)?)
    }))
}

fn open_browser(url: &str) -> Result<(), String> {
    let browser = std::env::var("BROWSER")
        .ok()
        .filter(|b| !b.trim().is_empty());
    let (program, args): (String, Vec<&str>) = match &browser {
        Some(b) => (b.clone(), vec![url]),
        None if cfg!(target_os = "macos") => ("open".into(), vec![url]),
        None if cfg!(windows) => ("cmd".into(), vec!["/C", "start", "", url]),
        None => ("xdg-open".into(), vec![url]),
    };
    let mut child = Command::new(&program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{program}: {e}"))?;
    // Reap the opener when it exits, without holding up the server.
    std::thread::spawn(move || child.wait());
    Ok(())
}
