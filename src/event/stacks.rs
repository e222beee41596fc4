//! Call stacks of allocator calls ([`Backtraces::Rust`](super::Backtraces::Rust)), captured
//! as return addresses and symbolized only when a context is read, once per address.
//!
//! Walking the stack costs microseconds; symbolizing it (function names, files, lines from
//! the binary's debug info) costs tens, and under a lock. PyTorch's `CapturedTraceback`
//! defers symbolizing to the snapshot for the same reason, and so do these: a training step
//! with call stacks on pays for the walk, and a snapshot for each distinct address once.

use super::context::Frame;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

/// The most frames a captured stack keeps, innermost first.
pub const MAX_STACK_FRAMES: usize = 128;

/// The calling thread's call stack as return addresses, innermost first.
pub(crate) fn capture() -> Vec<usize> {
    let mut addresses = Vec::with_capacity(32);
    backtrace::trace(|frame| {
        addresses.push(frame.ip() as usize);
        addresses.len() < MAX_STACK_FRAMES
    });
    addresses
}

/// Symbolized addresses: each resolved once, to the frames it stands for (more than one where
/// calls were inlined).
#[derive(Default)]
pub(crate) struct Symbols {
    resolved: HashMap<usize, Arc<[Frame]>>,
}

impl Symbols {
    /// The frames of a captured stack, innermost first, without the frames of the capture
    /// itself and of blockpool (the same for every event).
    pub(crate) fn frames(&mut self, addresses: &[usize]) -> Vec<Frame> {
        let mut frames = Vec::with_capacity(addresses.len());
        for &address in addresses {
            let resolved = self
                .resolved
                .entry(address)
                .or_insert_with(|| resolve(address));
            frames.extend(resolved.iter().cloned());
        }
        let internal = frames.iter().take_while(|f| is_internal(&f.name)).count();
        frames.drain(..internal);
        frames
    }
}

/// The frames at return address `address`: the function, with its file and line when the
/// binary has debug info, or the address itself.
fn resolve(address: usize) -> Arc<[Frame]> {
    let mut frames = Vec::new();
    backtrace::resolve(address as *mut c_void, |symbol| {
        let name = match symbol.name() {
            // `{:#}`: demangled without the hash, as `std::backtrace` prints it.
            Some(name) => format!("{name:#}"),
            None => format!("{address:#x}"),
        };
        frames.push(Frame {
            name: name.into(),
            filename: symbol
                .filename()
                .map(|path| path.display().to_string())
                .unwrap_or_default()
                .into(),
            line: symbol.lineno().unwrap_or(0),
        });
    });
    if frames.is_empty() {
        frames.push(Frame {
            name: format!("{address:#x}").into(),
            filename: "".into(),
            line: 0,
        });
    }
    frames.into()
}

/// Frames of the capture machinery and of blockpool itself.
fn is_internal(name: &str) -> bool {
    name.starts_with("backtrace::")
        || name.starts_with("<backtrace::")
        || name.starts_with("blockpool::")
        || name.starts_with("<blockpool::")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn caller_of_capture() -> Vec<usize> {
        capture()
    }

    #[test]
    fn a_captured_stack_symbolizes_to_its_callers_without_blockpool_frames() {
        let addresses = caller_of_capture();
        assert!(!addresses.is_empty() && addresses.len() <= MAX_STACK_FRAMES);
        let mut symbols = Symbols::default();
        let frames = symbols.frames(&addresses);
        assert!(
            frames.first().is_some_and(|f| !is_internal(&f.name)),
            "the capture machinery and blockpool's own frames are dropped: {frames:?}"
        );
        assert_eq!(
            symbols.frames(&addresses),
            frames,
            "the same addresses give the same frames (from the cache)"
        );
        let known = symbols.resolved.len();
        symbols.frames(&addresses);
        assert_eq!(symbols.resolved.len(), known, "each address resolved once");
    }
}
