//! The request target split into its path and decoded query parameters, and typed reads of
//! those parameters. Nothing here touches the filesystem: a path is only ever compared with the
//! fixed route names.

use super::error::RequestError;
use std::collections::HashMap;

/// A request target (`/api/timeline?from=0&width=800`), split and decoded.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Target {
    /// The path, exactly as sent (not decoded, so `%2e%2e` never becomes `..`).
    pub path: String,
    /// The query parameters, decoded; a repeated name keeps its last value.
    pub params: HashMap<String, String>,
}

impl Target {
    /// Splits `target` at the first `?` and decodes the query (`+` is a space).
    pub fn parse(target: &str) -> Result<Target, RequestError> {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let mut params = HashMap::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            params.insert(decode(name)?, decode(value)?);
        }
        Ok(Target {
            path: path.to_string(),
            params,
        })
    }

    /// The parameter `name`, if present and not empty.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.params
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// The parameter `name` as an unsigned integer, `None` when absent or empty.
    pub fn number(&self, name: &'static str) -> Result<Option<u64>, RequestError> {
        match self.text(name) {
            None => Ok(None),
            Some(text) => {
                text.trim()
                    .parse::<u64>()
                    .map(Some)
                    .map_err(|_| RequestError::BadParameter {
                        name,
                        reason: format!("{text:?} is not a whole number from 0 to 2^64-1"),
                    })
            }
        }
    }

    /// The parameter `name` as a switch: `1` or `true` on, `0`, `false` or absent off.
    pub fn flag(&self, name: &'static str) -> Result<bool, RequestError> {
        match self.text(name) {
            None | Some("0") | Some("false") => Ok(false),
            Some("1") | Some("true") => Ok(true),
            Some(other) => Err(RequestError::BadParameter {
                name,
                reason: format!("{other:?} is neither 0 nor 1"),
            }),
        }
    }

    /// The parameter `name` as a device index, `None` when absent.
    pub fn device(&self) -> Result<Option<u32>, RequestError> {
        match self.number("device")? {
            None => Ok(None),
            Some(d) => u32::try_from(d)
                .map(Some)
                .map_err(|_| RequestError::NoDevice(u32::MAX)),
        }
    }

    /// The parameter `name` as an integer clamped to `min..=max`, `default` when absent.
    pub fn clamped(
        &self,
        name: &'static str,
        default: u64,
        min: u64,
        max: u64,
    ) -> Result<u64, RequestError> {
        Ok(self.number(name)?.unwrap_or(default).clamp(min, max))
    }
}

/// Percent-decodes `text` (`+` as a space) into UTF-8.
fn decode(text: &str) -> Result<String, RequestError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).ok_or(RequestError::BadEncoding)?;
                let digit = |b: u8| (b as char).to_digit(16).ok_or(RequestError::BadEncoding);
                // Both digits must be hex: `from_str_radix` would also take a sign (`%+1`).
                out.push((digit(hex[0])? * 16 + digit(hex[1])?) as u8);
                i += 2;
            }
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| RequestError::BadEncoding)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_is_split_and_decoded_but_the_path_is_not() {
        let target = Target::parse("/a%2e%2e/b?q=attn+block%2F2&width=800&empty=&q2").unwrap();
        assert_eq!(target.path, "/a%2e%2e/b", "the path stays as sent");
        assert_eq!(target.text("q"), Some("attn block/2"));
        assert_eq!(target.number("width").unwrap(), Some(800));
        assert_eq!(target.text("empty"), None, "an empty value reads as absent");
        assert_eq!(target.text("q2"), None);
        assert_eq!(target.number("missing").unwrap(), None);
    }

    #[test]
    fn malformed_queries_are_errors_not_panics() {
        for bad in [
            "/?q=%",
            "/?q=%4",
            "/?q=%zz",
            "/?q=%+1",
            "/?q=%ff%fe",
            "/?%c3=1",
        ] {
            assert!(
                matches!(Target::parse(bad), Err(RequestError::BadEncoding)),
                "{bad} should be refused"
            );
        }
        let target = Target::parse("/?width=-3&from=1e9&to=99999999999999999999").unwrap();
        for name in ["width", "from", "to"] {
            assert!(
                matches!(target.number(name), Err(RequestError::BadParameter { .. })),
                "{name} is not a u64"
            );
        }
        assert_eq!(
            Target::parse("/?width=99999")
                .unwrap()
                .clamped("width", 800, 1, 4000)
                .unwrap(),
            4000
        );
    }
}
