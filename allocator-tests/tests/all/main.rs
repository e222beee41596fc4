//! One test binary with a module per area.
mod scenarios;
