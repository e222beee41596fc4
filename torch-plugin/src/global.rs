//! The one allocator of the process, made on the first call of any function of the C
//! interface: the backend `BLOCKPOOL_BACKEND` asks for, the simulated device's size from
//! `BLOCKPOOL_SIM_DEVICES` / `BLOCKPOOL_SIM_CAPACITY`, and the settings from
//! `BLOCKPOOL_ALLOC_CONF` (else `PYTORCH_CUDA_ALLOC_CONF`).
//!
//! PyTorch writes to every pointer the plugin returns, so the plugin serves device memory or
//! nothing: `auto` (also unset) and `cuda` both mean CUDA, and without a usable driver every
//! call fails with the diagnosis and the fix (`blockpool_malloc` returns NULL). The simulated
//! device, whose addresses have no memory behind them, only when `BLOCKPOOL_BACKEND=sim` says
//! so, and that is said in the log when the allocator is made.
//!
//! The variable is read by the library's one parser (`BackendRequest::from_env_value`); the
//! choice itself ([`new_allocator_with`]) reads the variables through a lookup function, so it
//! is tested without touching the process environment. The CUDA side is the library's
//! (`blockpool::global::default_backend_for`): it probes the driver before any call, so a
//! machine without one gets an error, never a panic.

use std::sync::OnceLock;

use blockpool::cuda::Diagnosis;
use blockpool::error::format_size;
use blockpool::global::{
    default_backend_for, BackendRequest, DefaultAllocatorError, DefaultBackend,
};
use blockpool::{AllocatorConfig, CachingAllocator, LeakTracking, SimBackend};

use crate::error::Error;

/// The environment variable that picks the backend: `auto` (also unset) or `cuda` for the
/// GPUs, `sim` for the simulated device (tests only: its pointers are not device memory).
pub const BACKEND_ENV_VAR: &str = blockpool::global::BACKEND_ENV_VAR;
/// The number of simulated devices (`BLOCKPOOL_BACKEND=sim`).
pub const SIM_DEVICES_ENV_VAR: &str = "BLOCKPOOL_SIM_DEVICES";
/// The capacity of each simulated device: bytes, or a number with a `K`, `M`, `G` or `T`
/// suffix (powers of 1024; `KiB`, `MB` and so on read the same).
pub const SIM_CAPACITY_ENV_VAR: &str = "BLOCKPOOL_SIM_CAPACITY";
/// Simulated devices when [`SIM_DEVICES_ENV_VAR`] is unset.
pub const DEFAULT_SIM_DEVICES: usize = 1;
/// Capacity of each simulated device when [`SIM_CAPACITY_ENV_VAR`] is unset: 80 GiB.
pub const DEFAULT_SIM_CAPACITY: usize = 80 << 30;
/// The most simulated devices accepted (a bound on what a typo can make the process build).
pub const MAX_SIM_DEVICES: usize = 1024;

/// Why the allocator could not be made. Kept for the life of the process: every call of the
/// C interface then fails with it (`BLOCKPOOL_ERR_BACKEND`).
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartupError {
    /// `BLOCKPOOL_BACKEND` is `auto` or unset, and CUDA is unusable: the plugin hands PyTorch
    /// device memory or nothing, so it does not fall back to the simulated device.
    #[error(
        "the PyTorch plugin needs CUDA, and CUDA is unusable: {diagnosis}. {advice} \
         ({BACKEND_ENV_VAR}=sim serves simulated addresses with no memory behind them, for \
         tests that never touch the memory)",
        advice = .diagnosis.advice()
    )]
    CudaRequired {
        /// Why CUDA is unusable, and what to do.
        diagnosis: Diagnosis,
    },
    /// `BLOCKPOOL_SIM_DEVICES` or `BLOCKPOOL_SIM_CAPACITY` cannot be read.
    #[error("{var} is {value:?}: {expected}")]
    InvalidSimSetting {
        /// The variable.
        var: &'static str,
        /// Its value, as set.
        value: String,
        /// What it should be.
        expected: &'static str,
    },
    /// `BLOCKPOOL_BACKEND` is invalid, CUDA was asked for and is unusable or could not be
    /// opened, or the configuration is invalid: the library's own error, which says why and
    /// what to do.
    #[error(transparent)]
    Default(#[from] DefaultAllocatorError),
}

/// Reads a byte count: digits, then optionally `K`, `M`, `G` or `T` (powers of 1024, any case,
/// optionally followed by `iB` or `B`) or `B`. `None` when malformed or past `usize::MAX`.
///
/// ```
/// use blockpool_torch::parse_byte_size;
///
/// assert_eq!(parse_byte_size("1073741824"), Some(1 << 30));
/// assert_eq!(parse_byte_size("80G"), Some(80 << 30));
/// assert_eq!(parse_byte_size("512MiB"), Some(512 << 20));
/// assert_eq!(parse_byte_size("1.5G"), None);
/// ```
pub fn parse_byte_size(text: &str) -> Option<usize> {
    let text = text.trim();
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(digits_end);
    if digits.is_empty() {
        return None;
    }
    let number: usize = digits.parse().ok()?;
    let suffix = suffix.trim().to_ascii_lowercase();
    let unit = suffix
        .strip_suffix("ib")
        .or_else(|| suffix.strip_suffix('b'))
        .unwrap_or(&suffix);
    let shift = match unit {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return None,
    };
    // "ib" alone ("512ib") is no unit.
    if unit.is_empty() && suffix == "ib" {
        return None;
    }
    number.checked_mul(1usize.checked_shl(shift)?)
}

/// The simulated backend the variables describe.
fn simulated_backend<F>(lookup: &mut F) -> Result<SimBackend, StartupError>
where
    F: FnMut(&str) -> Option<String>,
{
    let devices = match lookup(SIM_DEVICES_ENV_VAR) {
        None => DEFAULT_SIM_DEVICES,
        Some(value) => match value.trim().parse::<usize>() {
            Ok(n) if (1..=MAX_SIM_DEVICES).contains(&n) => n,
            _ => {
                return Err(StartupError::InvalidSimSetting {
                    var: SIM_DEVICES_ENV_VAR,
                    value,
                    expected: "a whole number of devices from 1 to 1024",
                })
            }
        },
    };
    let capacity = match lookup(SIM_CAPACITY_ENV_VAR) {
        None => DEFAULT_SIM_CAPACITY,
        Some(value) => match parse_byte_size(&value) {
            Some(bytes) if bytes > 0 => bytes,
            _ => {
                return Err(StartupError::InvalidSimSetting {
                    var: SIM_CAPACITY_ENV_VAR,
                    value,
                    expected: "a positive number of bytes, optionally with a K, M, G or T suffix (powers of 1024)",
                })
            }
        },
    };
    Ok(SimBackend::builder()
        .devices(devices)
        .capacity(capacity)
        .build())
}

/// A new allocator as the plugin makes its one, reading the variables through `lookup`
/// instead of the process environment (`None`: unset). Leak tracking is at
/// [`LeakTracking::Context`], so allocations made through the C interface carry the
/// thread's annotation tags in their site (crate docs, "Leak sites").
///
/// ```
/// use blockpool::DeviceIndex;
/// use blockpool_torch::new_allocator_with;
///
/// let alloc = new_allocator_with(|name| match name {
///     "BLOCKPOOL_BACKEND" => Some("sim".to_owned()),
///     "BLOCKPOOL_SIM_DEVICES" => Some("2".to_owned()),
///     "BLOCKPOOL_SIM_CAPACITY" => Some("16G".to_owned()),
///     _ => None,
/// })?;
/// assert_eq!(alloc.device_count(), 2);
/// assert_eq!(alloc.mem_get_info(DeviceIndex::new(1))?.total_bytes, 16 << 30);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn new_allocator_with<F>(
    mut lookup: F,
) -> Result<CachingAllocator<DefaultBackend>, StartupError>
where
    F: FnMut(&str) -> Option<String>,
{
    let config =
        AllocatorConfig::from_env_with(&mut lookup).map_err(DefaultAllocatorError::from)?;
    let request = BackendRequest::from_env_value(lookup(BACKEND_ENV_VAR).as_deref())?;
    let backend = match request {
        BackendRequest::Sim => {
            let sim = simulated_backend(&mut lookup)?;
            tracing::warn!(
                "{}, as {BACKEND_ENV_VAR}=sim asks: its pointers are not device memory, for \
                 tests that never touch it",
                describe_sim(&sim)
            );
            DefaultBackend::Sim(sim)
        }
        BackendRequest::Cuda => default_backend_for(Some("cuda"))?,
        // `auto` is CUDA or a refusal: PyTorch would write to simulated addresses.
        _ => match default_backend_for(Some("cuda")) {
            Ok(cuda) => cuda,
            Err(DefaultAllocatorError::CudaUnavailable { diagnosis, .. }) => {
                return Err(StartupError::CudaRequired { diagnosis })
            }
            Err(other) => return Err(other.into()),
        },
    };
    let alloc = CachingAllocator::new(backend, config);
    alloc.set_leak_tracking(LeakTracking::Context);
    Ok(alloc)
}

/// "the simulated device: 2 device(s) of 80.00 GiB".
fn describe_sim(sim: &SimBackend) -> String {
    use blockpool::Backend;
    use blockpool::DeviceIndex;
    let capacity = sim
        .mem_get_info(DeviceIndex::new(0))
        .map_or(0, |info| info.total_bytes);
    format!(
        "using the simulated device: {} device(s) of {}",
        sim.device_count(),
        format_size(capacity as u64)
    )
}

/// The allocator the C interface uses, made on the first call from the process environment
/// (module docs); every later call returns the same one, or the same startup error.
///
/// Rust code in the same process (a PyO3 extension, a test) can use it directly: what it
/// allocates shows in the same statistics, snapshots and leak reports.
///
/// ```
/// std::env::set_var("BLOCKPOOL_BACKEND", "sim");
/// let alloc = blockpool_torch::allocator()?;
/// assert!(alloc.device_count() >= 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn allocator() -> Result<&'static CachingAllocator<DefaultBackend>, Error> {
    static ALLOCATOR: OnceLock<Result<CachingAllocator<DefaultBackend>, StartupError>> =
        OnceLock::new();
    ALLOCATOR
        .get_or_init(|| {
            crate::log::install_default();
            let made = new_allocator_with(|name| {
                std::env::var_os(name).map(|value| value.to_string_lossy().into_owned())
            });
            if let Err(error) = &made {
                tracing::error!("blockpool could not start: {error}");
            }
            made
        })
        .as_ref()
        .map_err(|error| Error::Startup(error.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl FnMut(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn byte_sizes_take_plain_bytes_and_binary_suffixes() {
        assert_eq!(parse_byte_size("4096"), Some(4096));
        assert_eq!(parse_byte_size(" 2k "), Some(2048));
        assert_eq!(parse_byte_size("3M"), Some(3 << 20));
        assert_eq!(parse_byte_size("3MB"), Some(3 << 20));
        assert_eq!(parse_byte_size("1T"), Some(1 << 40));
        assert_eq!(parse_byte_size("7B"), Some(7));
        for bad in [
            "",
            "G",
            "-1",
            "1.5G",
            "12X",
            "12ib",
            "99999999999999999999999T",
        ] {
            assert_eq!(parse_byte_size(bad), None, "{bad:?} should be refused");
        }
    }

    #[test]
    fn sim_is_made_with_the_devices_and_capacity_asked_for() {
        let vars = [
            (BACKEND_ENV_VAR, "SIM"),
            (SIM_DEVICES_ENV_VAR, "3"),
            (SIM_CAPACITY_ENV_VAR, "1G"),
        ];
        let alloc = new_allocator_with(env(&vars)).expect("a valid simulated device");
        assert_eq!(alloc.device_count(), 3);
        assert_eq!(
            alloc.mem_get_info(2).map(|m| m.total_bytes).ok(),
            Some(1 << 30)
        );
        assert_eq!(alloc.leak_tracking(), LeakTracking::Context);
    }

    #[test]
    fn sim_defaults_to_one_device_of_80_gib() {
        let alloc = new_allocator_with(env(&[(BACKEND_ENV_VAR, "sim")])).expect("defaults");
        assert_eq!(alloc.device_count(), 1);
        assert_eq!(
            alloc.mem_get_info(0).map(|m| m.total_bytes).ok(),
            Some(80 << 30)
        );
    }

    #[test]
    fn bad_variables_are_errors_that_name_them() {
        let cases: [&[(&str, &str)]; 4] = [
            &[(BACKEND_ENV_VAR, "gpu")],
            &[(BACKEND_ENV_VAR, "sim"), (SIM_DEVICES_ENV_VAR, "0")],
            &[(BACKEND_ENV_VAR, "sim"), (SIM_CAPACITY_ENV_VAR, "lots")],
            &[
                (BACKEND_ENV_VAR, "sim"),
                ("BLOCKPOOL_ALLOC_CONF", "max_split_sise_mb:1"),
            ],
        ];
        let names = [
            BACKEND_ENV_VAR,
            SIM_DEVICES_ENV_VAR,
            SIM_CAPACITY_ENV_VAR,
            "BLOCKPOOL_ALLOC_CONF",
        ];
        for (vars, name) in cases.iter().zip(names) {
            let error = new_allocator_with(env(vars)).err().map(|e| e.to_string());
            assert!(
                error.as_deref().is_some_and(|e| e.contains(name)),
                "{vars:?} should fail naming {name}: {error:?}"
            );
        }
    }
}
