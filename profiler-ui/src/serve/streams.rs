//! `/api/streams`: a device's memory by stream (`memtrace streams --json`'s report, less the
//! file), made when first asked for, with what the stream-ordered policy would have reserved
//! when the server was given a way to replay the trace ([`WhatIf`]).

use super::model::{DeviceModel, TraceModel};
use super::tables;
use crate::analysis::streams::{
    several_streams_allocate, streams_report_from, StreamsReport, ONE_STREAM,
};
use blockpool::trace::Snapshot;
use serde::Serialize;
use std::sync::Arc;

/// Replays a device of a trace twice, under its settings and with `stream_reuse:ordered`
/// (`memtrace streams`' what-if), and gives the result as JSON. The viewer computes from the
/// trace only; the command that serves it lends this.
pub struct WhatIf(pub Box<WhatIfFn>);

/// The function a [`WhatIf`] holds.
pub type WhatIfFn = dyn Fn(&Snapshot, u32) -> anyhow::Result<serde_json::Value> + Send + Sync;

impl std::fmt::Debug for WhatIf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WhatIf(..)")
    }
}

/// What `/api/streams` answers.
#[derive(Debug, Serialize)]
pub struct StreamsView {
    /// The device's memory by stream.
    #[serde(flatten)]
    pub streams: StreamsReport,
    /// What the stream-ordered policy would have reserved (`memtrace streams --json`'s
    /// `ordered`).
    pub ordered: Option<serde_json::Value>,
    /// Why there is no `ordered`, in words.
    pub ordered_note: Option<String>,
}

/// The streams view of `device`, made once (the first request waits for it; later ones share
/// it).
pub fn streams_view(model: &TraceModel, device: &DeviceModel) -> Arc<StreamsView> {
    let view = device.stream_memory.get_or_init(|| {
        // On a clone of the device's walker (no rebuild): other requests go on meanwhile.
        let walker = tables::lock(device).clone();
        let several = several_streams_allocate(walker.events());
        let streams = streams_report_from(walker, device.numbers.clone());
        let (ordered, ordered_note) = match (several, &model.what_if) {
            (false, _) => (None, Some(ONE_STREAM.to_string())),
            (true, None) => (
                None,
                Some("no replay in this viewer: `memtrace streams FILE` replays it".to_string()),
            ),
            (true, Some(what_if)) => match (what_if.0)(&model.snapshot, device.device) {
                Ok(value) => (Some(value), None),
                Err(e) => (None, Some(format!("the replay failed: {e:#}"))),
            },
        };
        Arc::new(StreamsView {
            streams,
            ordered,
            ordered_note,
        })
    });
    Arc::clone(view)
}
