//! One test binary with a module per area.
mod expandable;
mod expandable_model;
mod expandable_trace;
mod fixtures;
mod history;
mod host;
mod jsonl;
mod model;
mod perfetto;
mod pickle_fixtures;
mod pytorch_export;
mod pytorch_snapshots;
mod rmm_fixture;
mod scenarios;
mod state;
mod stress;
mod trace_roundtrip;
