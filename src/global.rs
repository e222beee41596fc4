//! The process-wide default allocator: CUDA when a usable GPU exists, the simulated device
//! otherwise, overridable with `BLOCKPOOL_BACKEND=cuda|sim` (`auto`, also when unset, is the
//! default). [`BackendRequest::from_env_value`] is the one reader of the variable: the PyTorch
//! plugin reads it through this function too (and takes `auto` as CUDA or a refusal, since
//! PyTorch cannot use simulated addresses).
//!
//! [`try_default_allocator`] builds it on first use and hands out the same `&'static`
//! allocator afterwards; with several GPUs it keeps one pool per device, as every
//! [`CachingAllocator`] does. The choice is said once through `tracing` at info level. Its
//! settings come from `BLOCKPOOL_ALLOC_CONF` ([`AllocatorConfig::from_env`]).
//!
//! The choice itself ([`BackendRequest`] and [`default_backend_for`]) takes the variable's value
//! as an argument, so it can be made, and tested, without touching the process environment.

mod backend;
#[cfg(test)]
mod tests;

use std::sync::OnceLock;

pub use backend::{DefaultBackend, DefaultEvent};

use crate::backend::{Backend, BackendError, SimBackend};
use crate::config::{AllocatorConfig, ConfigError};
use crate::cuda::{DeviceReport, Diagnosis};
use crate::CachingAllocator;

/// The environment variable that overrides the default backend: `auto` (also unset or empty),
/// `cuda` or `sim`.
pub const BACKEND_ENV_VAR: &str = "BLOCKPOOL_BACKEND";

/// Which backend the default allocator should use, as `BLOCKPOOL_BACKEND` asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendRequest {
    /// `auto`, unset or empty: CUDA when a usable GPU exists, else the simulated device.
    Auto,
    /// `cuda`: CUDA, or an error saying why it is unusable.
    Cuda,
    /// `sim`: the simulated device, even where a GPU exists.
    Sim,
}

impl BackendRequest {
    /// Reads a value of `BLOCKPOOL_BACKEND` (`None`: unset): `auto`, `cuda` or `sim`. Case and
    /// surrounding whitespace do not matter; an empty value is the same as unset, which is
    /// `auto`.
    ///
    /// ```
    /// use blockpool::global::BackendRequest;
    ///
    /// assert_eq!(BackendRequest::from_env_value(None)?, BackendRequest::Auto);
    /// assert_eq!(BackendRequest::from_env_value(Some(" AUTO "))?, BackendRequest::Auto);
    /// assert_eq!(BackendRequest::from_env_value(Some("sim"))?, BackendRequest::Sim);
    /// let error = BackendRequest::from_env_value(Some("gpu")).err().map(|e| e.to_string());
    /// assert!(error.is_some_and(|e| e.starts_with("invalid BLOCKPOOL_BACKEND `gpu`")));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_env_value(value: Option<&str>) -> Result<BackendRequest, DefaultAllocatorError> {
        let Some(value) = value else {
            return Ok(BackendRequest::Auto);
        };
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(BackendRequest::Auto),
            "cuda" => Ok(BackendRequest::Cuda),
            "sim" => Ok(BackendRequest::Sim),
            _ => Err(DefaultAllocatorError::InvalidBackend {
                var: BACKEND_ENV_VAR,
                value: value.to_owned(),
            }),
        }
    }
}

/// Why the default allocator could not be made.
///
/// None of these is retryable within the process: [`try_default_allocator`] keeps the first
/// outcome, error or allocator, for the life of the process.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum DefaultAllocatorError {
    /// `BLOCKPOOL_BACKEND` holds something other than `auto`, `cuda` or `sim`.
    #[error(
        "invalid {var} `{value}`: accepted values are `auto`, `cuda` and `sim` (`auto`, also \
         when unset: CUDA when a GPU is usable, else the simulated device)"
    )]
    InvalidBackend {
        /// The variable, [`BACKEND_ENV_VAR`].
        var: &'static str,
        /// The value, as set.
        value: String,
    },
    /// `BLOCKPOOL_BACKEND=cuda`, but CUDA is unusable in this process.
    #[error("{var}=cuda, but CUDA is unusable: {diagnosis}. {}", .diagnosis.advice())]
    CudaUnavailable {
        /// The variable, [`BACKEND_ENV_VAR`].
        var: &'static str,
        /// Why, and what to do.
        diagnosis: Diagnosis,
    },
    /// The driver works and reports GPUs, but `CudaBackend::new` failed after the probe. A
    /// device that cannot be opened (a GPU held by another process in exclusive compute mode)
    /// fails later, at its first use: devices open lazily. A machine with GPUs never falls
    /// back to the simulated device silently.
    #[error(
        "CUDA looks usable, but its devices could not be opened: {error} (BLOCKPOOL_BACKEND=sim \
         uses the simulated device instead)"
    )]
    CudaBackend {
        /// What the CUDA backend said.
        error: BackendError,
    },
    /// `BLOCKPOOL_ALLOC_CONF` (or `PYTORCH_CUDA_ALLOC_CONF`) is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// Why the simulated device was chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SimReason {
    /// `BLOCKPOOL_BACKEND=sim`.
    Requested,
    /// CUDA is unusable, for this reason.
    CudaUnusable(Diagnosis),
}

/// The outcome of [`choose`]: an opened CUDA backend, or the simulated device and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Choice<C> {
    /// CUDA, opened; `requested` when `BLOCKPOOL_BACKEND=cuda` asked for it.
    Cuda { backend: C, requested: bool },
    /// The simulated device.
    Sim(SimReason),
}

/// The selection logic, with the driver check (`probe`) and the opening of CUDA (`open_cuda`)
/// passed in, so tests can script both.
///
/// `sim` asks nothing of the driver. Otherwise `probe` says whether CUDA is usable: if not,
/// `Auto` takes the simulated device and `Cuda` fails with the diagnosis; if so, CUDA is
/// opened, and a failure to open is an error either way.
pub(crate) fn choose<C>(
    request: BackendRequest,
    probe: impl FnOnce() -> DeviceReport,
    open_cuda: impl FnOnce() -> Result<C, DefaultAllocatorError>,
) -> Result<Choice<C>, DefaultAllocatorError> {
    if request == BackendRequest::Sim {
        return Ok(Choice::Sim(SimReason::Requested));
    }
    match (request, probe().diagnosis) {
        (BackendRequest::Cuda, Some(diagnosis)) => Err(DefaultAllocatorError::CudaUnavailable {
            var: BACKEND_ENV_VAR,
            diagnosis,
        }),
        (_, Some(diagnosis)) => Ok(Choice::Sim(SimReason::CudaUnusable(diagnosis))),
        (_, None) => Ok(Choice::Cuda {
            backend: open_cuda()?,
            requested: request == BackendRequest::Cuda,
        }),
    }
}

/// The CUDA backend (`CudaBackend::new`, which opens each device on its first use), with its
/// error as ours.
#[cfg(feature = "cuda")]
fn open_cuda() -> Result<DefaultBackend, DefaultAllocatorError> {
    crate::cuda::CudaBackend::new()
        .map(DefaultBackend::Cuda)
        .map_err(|error| DefaultAllocatorError::CudaBackend { error })
}

/// Without the `cuda` feature there is nothing to open (the probe already said so).
#[cfg(not(feature = "cuda"))]
fn open_cuda() -> Result<DefaultBackend, DefaultAllocatorError> {
    Err(DefaultAllocatorError::CudaUnavailable {
        var: BACKEND_ENV_VAR,
        diagnosis: Diagnosis::NotBuiltWithCuda,
    })
}

/// The simulated device of the default allocator: one device of 16 GiB with fake addresses.
fn simulated_device() -> DefaultBackend {
    DefaultBackend::Sim(SimBackend::builder().build())
}

/// The backend the default allocator would use for `BLOCKPOOL_BACKEND=value` (`None`: unset),
/// asking the real driver; the choice is said through `tracing` at info level.
///
/// Checking for CUDA starts the driver and counts the devices but makes no context; opening
/// CUDA makes none either: each device gets its context on its first use.
///
/// ```
/// use blockpool::global::default_backend_for;
/// use blockpool::Backend;
///
/// let backend = default_backend_for(Some("sim"))?;
/// assert_eq!((backend.name(), backend.device_count()), ("sim", 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn default_backend_for(value: Option<&str>) -> Result<DefaultBackend, DefaultAllocatorError> {
    let request = BackendRequest::from_env_value(value)?;
    let backend = match choose(request, crate::cuda::probe_driver, open_cuda)? {
        Choice::Cuda { backend, requested } => {
            let why = if requested {
                "as BLOCKPOOL_BACKEND=cuda asks"
            } else {
                "a usable GPU exists"
            };
            tracing::info!(
                devices = backend.device_count(),
                "blockpool default allocator: CUDA, {why}"
            );
            backend
        }
        Choice::Sim(SimReason::Requested) => {
            tracing::info!(
                "blockpool default allocator: simulated device, as BLOCKPOOL_BACKEND=sim asks"
            );
            simulated_device()
        }
        Choice::Sim(SimReason::CudaUnusable(diagnosis)) => {
            tracing::info!(
                condition = %diagnosis.condition(),
                "blockpool default allocator: simulated device, because CUDA is unusable: \
                 {diagnosis}"
            );
            simulated_device()
        }
    };
    Ok(backend)
}

/// A new allocator as the default one is made, reading `BLOCKPOOL_BACKEND` and
/// `BLOCKPOOL_ALLOC_CONF` (then `PYTORCH_CUDA_ALLOC_CONF`) through `lookup` instead of the
/// process environment (`None`: unset). The config is checked before any driver call.
///
/// ```
/// use blockpool::global::new_default_allocator_with;
///
/// let alloc = new_default_allocator_with(|name| match name {
///     "BLOCKPOOL_BACKEND" => Some("sim".to_owned()),
///     "BLOCKPOOL_ALLOC_CONF" => Some("max_split_size_mb:64".to_owned()),
///     _ => None,
/// })?;
/// assert_eq!(alloc.config().max_split_size(), 64 << 20);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn new_default_allocator_with<F>(
    mut lookup: F,
) -> Result<CachingAllocator<DefaultBackend>, DefaultAllocatorError>
where
    F: FnMut(&str) -> Option<String>,
{
    let config = AllocatorConfig::from_env_with(&mut lookup)?;
    let backend = default_backend_for(lookup(BACKEND_ENV_VAR).as_deref())?;
    Ok(CachingAllocator::new(backend, config))
}

/// The process-wide allocator, made on first use from the process environment
/// (`BLOCKPOOL_BACKEND`, `BLOCKPOOL_ALLOC_CONF`): CUDA when a usable GPU exists, else the
/// simulated device. Every later call returns the same allocator, or the same error: the
/// environment is read once.
///
/// ```
/// let alloc = blockpool::global::try_default_allocator()?;
/// println!("default allocator on {} with {} device(s)",
///     blockpool::Backend::name(alloc.backend()), alloc.device_count());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn try_default_allocator(
) -> Result<&'static CachingAllocator<DefaultBackend>, DefaultAllocatorError> {
    static DEFAULT: OnceLock<Result<CachingAllocator<DefaultBackend>, DefaultAllocatorError>> =
        OnceLock::new();
    DEFAULT
        .get_or_init(|| {
            new_default_allocator_with(|name| {
                std::env::var_os(name).map(|value| value.to_string_lossy().into_owned())
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}
