//! Reading the config from the environment: `BLOCKPOOL_ALLOC_CONF`, else PyTorch's
//! `PYTORCH_CUDA_ALLOC_CONF`, else the defaults.

use super::error::ConfigError;
use super::settings::AllocatorConfig;

/// Environment variable read first by [`AllocatorConfig::from_env`].
pub const ENV_VAR: &str = "BLOCKPOOL_ALLOC_CONF";
/// Environment variable read when [`ENV_VAR`] is unset: PyTorch's name for the same setting.
pub const PYTORCH_ENV_VAR: &str = "PYTORCH_CUDA_ALLOC_CONF";

impl AllocatorConfig {
    /// Reads the config from `BLOCKPOOL_ALLOC_CONF`, else from `PYTORCH_CUDA_ALLOC_CONF`, else
    /// gives the default. See [`from_env_with`](Self::from_env_with).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_env_with(|name| {
            std::env::var_os(name).map(|value| value.to_string_lossy().into_owned())
        })
    }

    /// Like [`from_env`](Self::from_env), with `lookup` in place of the process environment
    /// (`None`: the variable is unset).
    ///
    /// A variable that is set wins even when empty, so `BLOCKPOOL_ALLOC_CONF=` selects the
    /// defaults over whatever `PYTORCH_CUDA_ALLOC_CONF` says. An error is
    /// [`ConfigError::InEnvVar`], naming the variable.
    pub fn from_env_with<F>(mut lookup: F) -> Result<Self, ConfigError>
    where
        F: FnMut(&str) -> Option<String>,
    {
        for var in [ENV_VAR, PYTORCH_ENV_VAR] {
            if let Some(conf) = lookup(var) {
                return Self::parse(&conf).map_err(|error| ConfigError::InEnvVar {
                    var,
                    error: Box::new(error),
                });
            }
        }
        Ok(Self::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_support::MIB_U;

    #[test]
    fn from_env_prefers_blockpool_variable_then_pytorch_then_default() {
        let both = |name: &str| match name {
            ENV_VAR => Some("max_split_size_mb:100".to_owned()),
            PYTORCH_ENV_VAR => Some("max_split_size_mb:200".to_owned()),
            _ => None,
        };
        let from_both = AllocatorConfig::from_env_with(both);
        assert_eq!(from_both.map(|c| c.max_split_size()), Ok(100 * MIB_U));
        let pytorch_only =
            |name: &str| (name == PYTORCH_ENV_VAR).then(|| "max_split_size_mb:200".to_owned());
        let from_pytorch = AllocatorConfig::from_env_with(pytorch_only);
        assert_eq!(from_pytorch.map(|c| c.max_split_size()), Ok(200 * MIB_U));
        assert_eq!(
            AllocatorConfig::from_env_with(|_| None),
            Ok(AllocatorConfig::default())
        );
    }

    #[test]
    fn empty_blockpool_variable_shadows_the_pytorch_one() {
        let lookup = |name: &str| match name {
            ENV_VAR => Some(String::new()),
            _ => Some("max_split_sise_mb:1".to_owned()),
        };
        assert_eq!(
            AllocatorConfig::from_env_with(lookup),
            Ok(AllocatorConfig::default())
        );
    }

    #[test]
    fn env_error_names_the_variable() {
        let lookup = |name: &str| (name == ENV_VAR).then(|| "max_split_sise_mb:100".to_owned());
        let error = match AllocatorConfig::from_env_with(lookup) {
            Ok(c) => panic!("misspelt key should be rejected, got {c:?}"),
            Err(error) => error,
        };
        assert!(
            error.to_string().starts_with(
                "invalid BLOCKPOOL_ALLOC_CONF: unknown key `max_split_sise_mb`; accepted keys: \
                 backend, max_split_size_mb,"
            ),
            "got: {error}"
        );
        let pytorch =
            |name: &str| (name == PYTORCH_ENV_VAR).then(|| "backend:cudaMallocAsync".to_owned());
        let error = AllocatorConfig::from_env_with(pytorch)
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            error.as_deref(),
            Some(
                "invalid PYTORCH_CUDA_ALLOC_CONF: backend `cudaMallocAsync` is not available: \
                 blockpool is the native caching allocator, so only `backend:native` is accepted"
            )
        );
    }
}
