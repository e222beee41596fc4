//! [`ConfigError`], the error of every way of making a config, and its messages.

use std::fmt;

use super::key::Key;

/// A config string (or builder value) the allocator refuses. Every message quotes the
/// offending text as written and says what is accepted. Never retryable: fix the config.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A key blockpool does not know.
    #[error("invalid allocator config: {}", Detail(self))]
    UnknownKey {
        /// The key as written.
        key: String,
    },
    /// The syntax breaks off: a missing `:`, value, `,` or key.
    #[error("invalid allocator config: {}", Detail(self))]
    UnexpectedToken {
        /// What was expected, in words.
        expected: &'static str,
        /// The text it should have followed (`None`: the start of the string).
        after: Option<String>,
        /// What came instead (`None`: the end of the string).
        found: Option<String>,
    },
    /// A value that is not a number.
    #[error("invalid allocator config: {}", Detail(self))]
    NotANumber {
        /// The key as written.
        key: String,
        /// The value as written.
        value: String,
        /// What the key accepts.
        accepted: &'static str,
    },
    /// A value other than `True` or `False` for a switch.
    #[error("invalid allocator config: {}", Detail(self))]
    NotABool {
        /// The key as written.
        key: String,
        /// The value as written.
        value: String,
    },
    /// A number outside the range the key accepts.
    #[error("invalid allocator config: {}", Detail(self))]
    OutOfRange {
        /// The key as written.
        key: String,
        /// The value as written.
        value: String,
        /// What the key accepts.
        accepted: &'static str,
    },
    /// A number that must be a power of two and is not.
    #[error("invalid allocator config: {}", Detail(self))]
    NotPowerOfTwo {
        /// The key as written.
        key: String,
        /// The value as written.
        value: String,
        /// What the key accepts.
        accepted: &'static str,
    },
    /// A `[` with no `]` after it.
    #[error("invalid allocator config: {}", Detail(self))]
    UnclosedList {
        /// The key as written.
        key: String,
        /// The list from its `[` to the end of the string.
        list: String,
    },
    /// A `roundup_power2_divisions` list with two `>` entries.
    #[error("invalid allocator config: {}", Detail(self))]
    DuplicateRemainder {
        /// The key as written.
        key: String,
        /// The whole list.
        list: String,
    },
    /// A `backend` other than `native` or PyTorch's async backends.
    #[error("invalid allocator config: {}", Detail(self))]
    UnknownBackend {
        /// The backend as written.
        backend: String,
    },
    /// `backend:cudaMallocAsync` (or `hipMallocAsync`): PyTorch's other allocator, which
    /// blockpool does not provide.
    #[error("invalid allocator config: {}", Detail(self))]
    UnsupportedBackend {
        /// The backend as written.
        backend: String,
    },
    /// A value that is none of the words a key accepts (such as `stream_reuse`'s policies).
    #[error("invalid allocator config: {}", Detail(self))]
    UnknownChoice {
        /// The key as written.
        key: String,
        /// The value as written.
        value: String,
        /// The words the key accepts.
        accepted: &'static str,
    },
    /// A byte size given to the builder that the config syntax cannot write (it counts MiB).
    #[error("invalid allocator config: {}", Detail(self))]
    NotWholeMebibytes {
        /// The key the size is written under.
        key: &'static str,
        /// The size given, in bytes.
        bytes: usize,
    },
    /// An error in the value of an environment variable.
    #[error("invalid {var}: {}", Detail(error))]
    InEnvVar {
        /// The variable read.
        var: &'static str,
        /// What is wrong with its value.
        error: Box<ConfigError>,
    },
}

/// The message of a [`ConfigError`] without the "invalid ...:" prefix, so that
/// [`ConfigError::InEnvVar`] can name the variable in its place.
struct Detail<'e>(&'e ConfigError);

impl fmt::Display for Detail<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            ConfigError::UnknownKey { key } => {
                write!(f, "unknown key `{key}`; accepted keys: ")?;
                for (i, known) in Key::ALL.iter().enumerate() {
                    write!(f, "{}{}", if i == 0 { "" } else { ", " }, known.name())?;
                }
                Ok(())
            }
            ConfigError::UnexpectedToken {
                expected,
                after,
                found,
            } => {
                write!(f, "expected {expected}")?;
                match after {
                    Some(after) => write!(f, " after `{after}`")?,
                    None => f.write_str(" at the start")?,
                }
                match found {
                    Some(found) => write!(f, ", found `{found}`"),
                    None => f.write_str(", found the end of the string"),
                }
            }
            ConfigError::NotANumber {
                key,
                value,
                accepted,
            } => {
                write!(f, "`{value}` is not a number; `{key}` takes {accepted}")
            }
            ConfigError::NotABool { key, value } => {
                write!(
                    f,
                    "`{value}` is not `True` or `False`, the values `{key}` takes"
                )
            }
            ConfigError::OutOfRange {
                key,
                value,
                accepted,
            } => {
                write!(
                    f,
                    "`{value}` is out of range for `{key}`, which takes {accepted}"
                )
            }
            ConfigError::NotPowerOfTwo {
                key,
                value,
                accepted,
            } => {
                write!(
                    f,
                    "`{value}` is not a power of two; `{key}` takes {accepted}"
                )
            }
            ConfigError::UnclosedList { key, list } => {
                write!(f, "the list `{list}` of `{key}` has no closing `]`")
            }
            ConfigError::DuplicateRemainder { key, list } => write!(
                f,
                "the list `{list}` of `{key}` has two `>` entries; `>` may appear once, for \
                 the size classes above the last size given"
            ),
            ConfigError::UnknownBackend { backend } => {
                write!(
                    f,
                    "unknown backend `{backend}`; the only backend is `native`"
                )
            }
            ConfigError::UnsupportedBackend { backend } => write!(
                f,
                "backend `{backend}` is not available: blockpool is the native caching \
                 allocator, so only `backend:native` is accepted"
            ),
            ConfigError::UnknownChoice {
                key,
                value,
                accepted,
            } => write!(
                f,
                "`{value}` is not a value of `{key}`, which takes {accepted}"
            ),
            ConfigError::NotWholeMebibytes { key, bytes } => write!(
                f,
                "`{bytes}` bytes is not a whole number of MiB, the unit of `{key}`; give a \
                 multiple of 1048576 bytes"
            ),
            ConfigError::InEnvVar { var, error } => write!(f, "in {var}: {}", Detail(error)),
        }
    }
}
