//! The plugin's errors, the `BLOCKPOOL_ERR_*` code each one returns through the C interface,
//! and the two places a failure is remembered for `blockpool_last_error` (this thread's last
//! failure) and `blockpool_last_oom_message` (the process's last out-of-memory).

use std::cell::RefCell;
use std::ffi::c_int;
use std::sync::{Mutex, PoisonError};

use crate::global::StartupError;

/// `BLOCKPOOL_OK`: success.
pub const BLOCKPOOL_OK: c_int = 0;
/// `BLOCKPOOL_ERR_INVALID_ARGUMENT`: a bad value (NULL path, fraction outside [0, 1], ...).
pub const BLOCKPOOL_ERR_INVALID_ARGUMENT: c_int = -1;
/// `BLOCKPOOL_ERR_NO_SUCH_DEVICE`: a device index outside 0 .. device count - 1.
pub const BLOCKPOOL_ERR_NO_SUCH_DEVICE: c_int = -2;
/// `BLOCKPOOL_ERR_BACKEND`: the backend could not start, or the device failed.
pub const BLOCKPOOL_ERR_BACKEND: c_int = -3;
/// `BLOCKPOOL_ERR_OUT_OF_MEMORY`: see `blockpool_last_oom_message`.
pub const BLOCKPOOL_ERR_OUT_OF_MEMORY: c_int = -4;
/// `BLOCKPOOL_ERR_IO`: a file could not be written.
pub const BLOCKPOOL_ERR_IO: c_int = -5;
/// `BLOCKPOOL_ERR_UNKNOWN_POINTER`: not a live pointer of this allocator.
pub const BLOCKPOOL_ERR_UNKNOWN_POINTER: c_int = -6;
/// `BLOCKPOOL_ERR_UNKNOWN_HANDLE`: a leak scope or step detector id that is not live.
pub const BLOCKPOOL_ERR_UNKNOWN_HANDLE: c_int = -7;
/// `BLOCKPOOL_ERR_PANIC`: a bug in blockpool, caught and logged.
pub const BLOCKPOOL_ERR_PANIC: c_int = -8;

/// Why a call of the C interface failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The allocator could not be made; every later call fails the same way (the environment
    /// is read once per process). Not retryable.
    #[error("blockpool could not start: {0}")]
    Startup(StartupError),
    /// The allocator refused. Its out-of-memory is retryable (free memory, `empty_cache`);
    /// bad pointers and devices are not.
    #[error(transparent)]
    Allocator(#[from] blockpool::Error),
    /// A pointer argument that must not be NULL was.
    #[error("{argument} is NULL")]
    NullArgument {
        /// The parameter's name in the header.
        argument: &'static str,
    },
    /// A negative size (`ssize_t`) for an allocation.
    #[error("cannot allocate a negative size ({size} bytes)")]
    NegativeSize {
        /// The size given.
        size: isize,
    },
    /// A negative device index (the allocator reports indices too large itself).
    #[error("device {device} does not exist: device indices count from 0")]
    NegativeDevice {
        /// The index given.
        device: c_int,
    },
    /// `RANK` is set but is not a non-negative integer, so `{rank}` cannot be filled in.
    #[error("RANK is {value:?}, which is not a rank (a non-negative integer), so \"{{rank}}\" in the snapshot path cannot be filled in")]
    InvalidRank {
        /// The variable's value.
        value: String,
    },
    /// A history context level other than 0, 1 or 2.
    #[error("history context {context} is not one of 0 (none), 1 (annotation tags), 2 (tags and native backtraces)")]
    InvalidContext {
        /// The level given.
        context: c_int,
    },
    /// A step detector's growth steps that do not fit the detector (more than `u32::MAX`).
    #[error("growth_steps {growth_steps} is too large (at most {max})", max = u32::MAX)]
    InvalidGrowthSteps {
        /// The count given.
        growth_steps: usize,
    },
    /// A snapshot or report could not be written to a file.
    #[error("could not write {path}: {source}")]
    Io {
        /// The file, as given (after `{rank}` was filled in).
        path: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// `blockpool_annotate_pop` with no tag pushed on this thread.
    #[error("no annotation tag to pop: this thread has none pushed (blockpool_annotate_push)")]
    NoAnnotation,
    /// An id that names no live leak scope.
    #[error("no leak scope has id {id} (ids come from blockpool_leak_scope_begin and end at blockpool_leak_scope_free)")]
    UnknownScope {
        /// The id given.
        id: u64,
    },
    /// An id that names no live step detector.
    #[error("no step detector has id {id} (ids come from blockpool_step_detector_new and end at blockpool_step_detector_free)")]
    UnknownDetector {
        /// The id given.
        id: u64,
    },
    /// A report could not be turned into JSON (never expected: every report is plain data).
    #[error("could not write the report as JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A panic inside blockpool, caught at the boundary: a bug, reported with its message.
    #[error("{function} panicked: {message} (a bug in blockpool; please report it)")]
    Panic {
        /// The C function that was called.
        function: &'static str,
        /// The panic's message.
        message: String,
    },
}

impl Error {
    /// The `BLOCKPOOL_ERR_*` code the C interface returns for this error.
    pub fn code(&self) -> c_int {
        use blockpool::Error as A;
        match self {
            Error::Startup(_) => BLOCKPOOL_ERR_BACKEND,
            Error::Allocator(_) if self.is_out_of_memory() => BLOCKPOOL_ERR_OUT_OF_MEMORY,
            Error::Allocator(e) => match e {
                A::InvalidDevice { .. } => BLOCKPOOL_ERR_NO_SUCH_DEVICE,
                A::UnknownPointer { .. }
                | A::DoubleFree { .. }
                | A::UseAfterFree { .. }
                | A::WrongDevice { .. } => BLOCKPOOL_ERR_UNKNOWN_POINTER,
                A::SizeTooLarge { .. }
                | A::InvalidMemoryFraction { .. }
                | A::InvalidHistorySettings { .. }
                | A::Config(_) => BLOCKPOOL_ERR_INVALID_ARGUMENT,
                A::InvariantViolated { .. } => BLOCKPOOL_ERR_PANIC,
                _ => BLOCKPOOL_ERR_BACKEND,
            },
            Error::NullArgument { .. }
            | Error::NegativeSize { .. }
            | Error::InvalidRank { .. }
            | Error::InvalidContext { .. }
            | Error::InvalidGrowthSteps { .. }
            | Error::NoAnnotation => BLOCKPOOL_ERR_INVALID_ARGUMENT,
            Error::NegativeDevice { .. } => BLOCKPOOL_ERR_NO_SUCH_DEVICE,
            Error::Io { .. } => BLOCKPOOL_ERR_IO,
            Error::UnknownScope { .. } | Error::UnknownDetector { .. } => {
                BLOCKPOOL_ERR_UNKNOWN_HANDLE
            }
            Error::Json(_) | Error::Panic { .. } => BLOCKPOOL_ERR_PANIC,
        }
    }

    /// Whether this is an out-of-memory failure, as PyTorch counts one: the allocator's own
    /// (after releasing what it could), a request larger than the device can ever give, or
    /// the device saying so from another call.
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            Error::Allocator(e) => {
                e.is_retryable() || matches!(e, blockpool::Error::ExceedsCapacity { .. })
            }
            _ => false,
        }
    }

    /// The text `blockpool_last_oom_message` gives for an out-of-memory error: the allocator's
    /// message, which starts "out of memory:" (PyTorch's wording) for its own; the other kinds
    /// get that start too, so a caller can tell them by the text alone.
    fn out_of_memory_message(&self) -> String {
        let message = self.to_string();
        if message.starts_with("out of memory") {
            message
        } else {
            format!("out of memory: {message}")
        }
    }
}

thread_local! {
    /// This thread's last failure, for `blockpool_last_error`.
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// The process's last out-of-memory message, for `blockpool_last_oom_message`.
static LAST_OOM: Mutex<String> = Mutex::new(String::new());

/// Remembers `error` as this thread's last failure (and, for an out-of-memory, as the
/// process's last one), and returns its code.
pub(crate) fn remember(error: &Error) -> c_int {
    let message = if error.is_out_of_memory() {
        let message = error.out_of_memory_message();
        *LAST_OOM.lock().unwrap_or_else(PoisonError::into_inner) = message.clone();
        message
    } else {
        error.to_string()
    };
    // `try_with`: a call made while the thread is being torn down still returns its code.
    let _ = LAST_ERROR.try_with(|last| *last.borrow_mut() = message);
    error.code()
}

/// This thread's last failure; empty when none.
pub(crate) fn last_error() -> String {
    LAST_ERROR
        .try_with(|last| last.borrow().clone())
        .unwrap_or_default()
}

/// The process's last out-of-memory message; empty when none.
pub(crate) fn last_oom_message() -> String {
    LAST_OOM
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockpool::DeviceIndex;

    #[test]
    fn codes_follow_the_header() {
        let unknown = Error::from(blockpool::Error::DoubleFree {
            device: DeviceIndex::new(0),
            ptr: 8,
        });
        assert_eq!(unknown.code(), BLOCKPOOL_ERR_UNKNOWN_POINTER);
        let device = Error::from(blockpool::Error::InvalidDevice {
            device: DeviceIndex::new(3),
            device_count: 1,
        });
        assert_eq!(device.code(), BLOCKPOOL_ERR_NO_SUCH_DEVICE);
        let never = Error::from(blockpool::Error::ExceedsCapacity {
            device: DeviceIndex::new(0),
            requested_bytes: 1 << 40,
            limit_bytes: 1 << 30,
            limited: false,
        });
        assert_eq!(
            never.code(),
            BLOCKPOOL_ERR_OUT_OF_MEMORY,
            "PyTorch calls it OOM"
        );
        assert!(never
            .out_of_memory_message()
            .starts_with("out of memory: cannot allocate"));
        assert_eq!(Error::NoAnnotation.code(), BLOCKPOOL_ERR_INVALID_ARGUMENT);
        assert_eq!(
            Error::UnknownScope { id: 9 }.code(),
            BLOCKPOOL_ERR_UNKNOWN_HANDLE
        );
    }

    #[test]
    fn last_error_is_per_thread_and_oom_is_per_process() {
        let oom = Error::from(blockpool::Error::ExceedsCapacity {
            device: DeviceIndex::new(0),
            requested_bytes: 3 << 30,
            limit_bytes: 1 << 30,
            limited: false,
        });
        std::thread::spawn(move || {
            assert_eq!(remember(&oom), BLOCKPOOL_ERR_OUT_OF_MEMORY);
            assert!(last_error().contains("3.00 GiB"), "{}", last_error());
        })
        .join()
        .expect("the thread runs");
        assert_eq!(
            last_error(),
            "",
            "another thread's failure is not this thread's"
        );
        assert!(
            last_oom_message().contains("3.00 GiB"),
            "the out-of-memory message is process-wide: {}",
            last_oom_message()
        );
    }
}
