//! The web viewer behind `memtrace serve`: a loopback-only HTTP server ([`server`], [`http`])
//! that answers a fixed set of routes ([`routes`]) from traces loaded once ([`model`]; several
//! files side by side: [`files`], [`set`], [`compare`]), with the
//! level of detail of every curve and band computed here ([`lod`]) so the page draws a few
//! thousand shapes whatever the trace's size; the event list and out-of-memory markers come
//! from [`history`]. The page itself (`profiler-ui/assets/`) is
//! embedded in the binary ([`assets`]); nothing is read from disk after the trace.

pub mod assets;
pub mod compare;
pub mod error;
pub mod files;
pub mod filter;
pub mod history;
pub mod http;
pub mod lifetimes;
pub mod lod;
pub mod model;
pub mod query;
pub mod routes;
pub mod server;
pub mod set;
pub mod streams;
pub mod tables;
pub mod tree;

pub use model::TraceModel;
pub use server::{bind, serve_forever, Limits};
pub use set::TraceSet;

/// What a scoped thread returned; its panic (a bug) is raised again here, as it would have
/// been had the work run on this thread.
fn joined<T>(handle: std::thread::ScopedJoinHandle<'_, T>) -> T {
    handle
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Helpers of the serve modules' tests.
#[cfg(test)]
pub(crate) mod testing {
    /// A deterministic stream of numbers below a bound (xorshift), for the random cases.
    pub(crate) fn random(mut seed: u64) -> impl FnMut(usize) -> usize {
        move |bound| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % bound as u64) as usize
        }
    }
}
