//! Which backend a URL names, and the contract-suite factory for it.

use std::sync::Arc;

use brokertest::Factory;

/// The URL used when `check` gets none.
pub(crate) const DEFAULT_URL: &str = "memory://";

/// The schemes `check` understands, for error messages and `--help`.
pub(crate) const SCHEMES: &str = "memory://";

/// Why a URL cannot be checked.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BadUrl(pub(crate) String);

impl std::fmt::Display for BadUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The factory for `url`: fresh isolated storage per case on that backend.
pub(crate) fn factory_for(url: &str) -> Result<Arc<dyn Factory>, BadUrl> {
    let scheme = url.split_once("://").map(|(s, _)| s).unwrap_or(url);
    match scheme {
        "memory" => Ok(Arc::new(taskgate_memory::testing::MemoryFactory)),
        "" => Err(BadUrl(format!("empty URL; supported: {SCHEMES}"))),
        other => {
            Err(BadUrl(format!("unsupported scheme {other:?} in {url:?}; supported: {SCHEMES}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_urls() {
        assert!(factory_for("memory://").is_ok());
        assert!(factory_for("memory").is_ok());
    }

    #[test]
    fn unknown_scheme_is_named() {
        let err = factory_for("redis://localhost").err().map(|e| e.0);
        assert_eq!(
            err.as_deref(),
            Some("unsupported scheme \"redis\" in \"redis://localhost\"; supported: memory://")
        );
    }
}
