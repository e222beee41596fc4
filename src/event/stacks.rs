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
    let push = |frame: &backtrace::Frame| {
        addresses.push(frame.ip() as usize);
        addresses.len() < MAX_STACK_FRAMES
    };
    // `backtrace::trace` serializes every walk in the process behind one lock, which only
    // Windows' dbghelp needs: 16 threads recording stacks on 2 cores spent most of their
    // time waiting there (benches/README.md, "history with call stacks").
    #[cfg(windows)]
    backtrace::trace(push);
    // SAFETY: on other platforms the walk is the system unwinder's (`_Unwind_Backtrace`),
    // which is thread-safe, so the lock guards nothing here (std walks unsynchronized too);
    // the callback only pushes to this call's own vector. Symbolizing, which is not
    // thread-safe, still goes through `backtrace::resolve` and its lock.
    #[cfg(not(windows))]
    unsafe {
        backtrace::trace_unsynchronized(push)
    };
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

    /// `backtrace::trace` holds the crate's process-wide lock while its callback runs: a
    /// capture that took that lock waits here until the other walk gives up (and the test
    /// fails), where an unsynchronized one is done at once.
    #[cfg(not(windows))]
    #[test]
    fn a_capture_does_not_wait_for_a_walk_on_another_thread() {
        use std::sync::mpsc;
        use std::time::Duration;
        let (inside_tx, inside_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let walker = std::thread::spawn(move || {
            let mut released = false;
            backtrace::trace(|_| {
                let _ = inside_tx.send(());
                released = done_rx.recv_timeout(Duration::from_secs(20)).is_ok();
                false
            });
            released
        });
        inside_rx
            .recv()
            .expect("the other thread is inside its walk");
        let addresses = caller_of_capture();
        let _ = done_tx.send(());
        assert!(!addresses.is_empty());
        assert!(
            walker.join().expect("the walker does not panic"),
            "the capture finished while another thread's walk held backtrace's lock"
        );
    }
}
