//! Allocator settings, and the parser for `BLOCKPOOL_ALLOC_CONF` in the syntax of PyTorch's
//! `PYTORCH_CUDA_ALLOC_CONF`.
//!
//! [`AllocatorConfig`] holds every knob of the device caching allocator and of the pinned host
//! cache; the pool code reads it through accessors in bytes. A config comes from a string
//! ([`AllocatorConfig::parse`], [`FromStr`](std::str::FromStr)), from the environment
//! ([`AllocatorConfig::from_env`]: `BLOCKPOOL_ALLOC_CONF`, else `PYTORCH_CUDA_ALLOC_CONF`), or from
//! code ([`AllocatorConfig::builder`]). All three apply the same checks, and
//! [`Display`](std::fmt::Display) writes a config back in the same syntax, so that parsing what it
//! writes gives the same config. The semantics are those of PyTorch's
//! `c10/core/AllocatorConfig.cpp` and `c10/cuda/CUDAAllocatorConfig.cpp`; the few places where this
//! parser is stricter are listed on [`AllocatorConfig::parse`].

mod builder;
mod checks;
mod display;
mod divisions_list;
mod env;
mod error;
mod key;
mod parse;
#[cfg(test)]
mod proptests;
mod settings;
mod stream_reuse;
#[cfg(test)]
mod test_support;
mod tokenize;

pub use builder::AllocatorConfigBuilder;
pub use checks::PINNED_MAX_REGISTER_THREADS;
pub use env::{ENV_VAR, PYTORCH_ENV_VAR};
pub use error::ConfigError;
pub use settings::{AllocatorConfig, ROUNDUP_POWER2_INTERVALS};
pub use stream_reuse::StreamReuse;
