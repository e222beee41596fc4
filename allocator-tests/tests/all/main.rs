//! One test binary with a module per area.
mod model;
mod scenarios;
mod stress;
