//! One test binary with a module per area.
mod model;
mod pickle_fixtures;
mod rmm_fixture;
mod scenarios;
mod stress;
