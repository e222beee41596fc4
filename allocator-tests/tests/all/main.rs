//! One test binary with a module per area.
mod fixtures;
mod history;
mod model;
mod pickle_fixtures;
mod pytorch_snapshots;
mod rmm_fixture;
mod scenarios;
mod stress;
