//! [`StreamReuse`]: the `stream_reuse` key, which picks the policy for memory cached on one
//! stream and asked for on another.

use std::fmt;

use super::error::ConfigError;
use super::tokenize::Token;

/// Which streams a cached block may serve: the `stream_reuse` key of `BLOCKPOOL_ALLOC_CONF`
/// (blockpool's own; PyTorch has no such key).
///
/// ```
/// use blockpool::config::{AllocatorConfig, StreamReuse};
///
/// let config: AllocatorConfig = "stream_reuse:ordered".parse()?;
/// assert_eq!(config.stream_reuse(), StreamReuse::Ordered);
/// assert_eq!(AllocatorConfig::default().stream_reuse(), StreamReuse::Compatible);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum StreamReuse {
    /// PyTorch's rule: a block freed on stream A serves only requests on A, and a block used on
    /// other streams (`record_stream`) waits in the cache until events recorded on them at its
    /// free have completed on the device, as the host sees it. Every address, statistic and
    /// trace is PyTorch's.
    #[default]
    Compatible,
    /// Stream-ordered reuse, as RAPIDS RMM's pool does it: a request on stream B that nothing
    /// cached for B fits takes a block cached for another stream A after making B wait, on the
    /// device, on an event recorded on A (`cuStreamWaitEvent`); the block then belongs to B.
    /// Other streams' caches are tried before the device is asked for memory. A block used on
    /// other streams is cached at once on its own stream, which is made to wait on events
    /// recorded on those streams, instead of waiting for them to complete. No host
    /// synchronization either way. On a backend without stream waits
    /// ([`Backend::stream_wait_event`](crate::backend::Backend::stream_wait_event) unsupported)
    /// it behaves as [`StreamReuse::Compatible`].
    Ordered,
}

impl StreamReuse {
    /// The value as the config syntax writes it: `compatible` or `ordered`.
    pub fn name(self) -> &'static str {
        match self {
            StreamReuse::Compatible => "compatible",
            StreamReuse::Ordered => "ordered",
        }
    }

    /// Reads the value token of `key` (its name as written).
    pub(super) fn parse(key: &str, value: &Token<'_>) -> Result<StreamReuse, ConfigError> {
        match value.text.as_str() {
            "compatible" => Ok(StreamReuse::Compatible),
            "ordered" => Ok(StreamReuse::Ordered),
            _ => Err(ConfigError::UnknownChoice {
                key: key.to_owned(),
                value: value.raw.to_owned(),
                accepted: "`compatible` or `ordered`",
            }),
        }
    }
}

impl fmt::Display for StreamReuse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_support::{parse_err, parse_ok};

    #[test]
    fn stream_reuse_takes_its_two_words_and_writes_them_back() {
        assert_eq!(
            parse_ok("stream_reuse:ordered").stream_reuse(),
            StreamReuse::Ordered
        );
        assert_eq!(
            parse_ok("stream_reuse:compatible").stream_reuse(),
            StreamReuse::Compatible
        );
        assert_eq!(
            parse_ok("stream_reuse:ordered").to_string(),
            "stream_reuse:ordered"
        );
        assert_eq!(parse_ok("stream_reuse:compatible").to_string(), "");
    }

    #[test]
    fn an_unknown_stream_reuse_names_the_accepted_words() {
        assert_eq!(
            parse_err("stream_reuse:Ordered").to_string(),
            "invalid allocator config: `Ordered` is not a value of `stream_reuse`, which takes \
             `compatible` or `ordered`"
        );
    }
}
