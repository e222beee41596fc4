//! `memtrace serve FILE [--port N] [--open]`: loads the trace, starts the web viewer on
//! 127.0.0.1 and prints its address; runs until interrupted. `--open` asks the desktop to open
//! the page and carries on without it when there is no browser.

use crate::load::load_trace;
use crate::output::Output;
use crate::serve::{bind, serve_forever, Limits, TraceModel};
use anyhow::Context as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

/// Runs `memtrace serve`.
pub fn run(
    file: &Path,
    port: u16,
    open: bool,
    limits: Limits,
    out: &mut Output,
) -> anyhow::Result<()> {
    let trace = load_trace(file).context("cannot read the trace")?;
    let model = TraceModel::build(file, trace.format.as_str(), trace.snapshot)?;
    let (server, address) = bind(port)?;
    let url = format!("http://{address}/");
    let events: usize = model.devices.iter().map(|d| d.events).sum();
    out.write(&format!(
        "serving {} ({events} events) at {url}\npress Ctrl-C to stop\n",
        file.display()
    ))?;
    out.flush()?;
    if open {
        if let Err(reason) = open_browser(&url) {
            eprintln!("memtrace: could not open a browser ({reason}); open {url} yourself");
        }
    }
    serve_forever(server, Arc::new(model), limits);
    Ok(())
}

/// Asks the desktop to open `url`: `$BROWSER`, else the platform's opener.
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
