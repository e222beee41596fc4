//! Helpers shared by the config tests in every file of this module.

use super::{AllocatorConfig, ConfigError, ROUNDUP_POWER2_INTERVALS};

pub(super) const MIB_U: usize = 1 << 20;

pub(super) fn parse_err(conf: &str) -> ConfigError {
    match AllocatorConfig::parse(conf) {
        Ok(config) => panic!("`{conf}` should be rejected, parsed as {config:?}"),
        Err(error) => error,
    }
}

pub(super) fn parse_ok(conf: &str) -> AllocatorConfig {
    match AllocatorConfig::parse(conf) {
        Ok(config) => config,
        Err(error) => panic!("`{conf}` should parse, got: {error}"),
    }
}

pub(super) fn divisions(conf: &str) -> [usize; ROUNDUP_POWER2_INTERVALS] {
    parse_ok(conf).roundup_power2_divisions_per_class()
}
