//! The machine-readable report of a test run: with `TASKGATE_CASE_REPORT=<dir>` set, every
//! generated test ([`contract_tests!`](crate::contract_tests), `workertest::worker_tests!`)
//! appends one JSON line per finished case, scenario, model test, history check and regression
//! run to `<dir>/<package>.<target>.<pid>.jsonl`:
//!
//! ```text
//! {"package":"taskgate-sqlite","target":"contract","backend":"sqlite","suite":"contract","name":"c01_round_trip","outcome":"passed"}
//! ```
//!
//! `outcome` is `passed`, `failed`, `skipped` (no database) or `unsupported` (declared by the
//! backend). CI's `ci/count_cases.py` reads these lines to check that every backend ran every
//! case once; nothing parses `cargo test` output.

use std::io::Write as _;
use std::sync::Mutex;

use crate::Outcome;

/// The environment variable naming the report directory.
pub const REPORT_VAR: &str = "TASKGATE_CASE_REPORT";

/// Which test binary ran a case: the package and the test target that expanded the macro.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The package (`taskgate-sqlite`).
    pub package: &'static str,
    /// The test target (`contract` for `tests/contract.rs`).
    pub target: &'static str,
}

/// The [`Origin`] of the test binary this expands in.
#[macro_export]
macro_rules! origin {
    () => {
        $crate::Origin { package: env!("CARGO_PKG_NAME"), target: env!("CARGO_CRATE_NAME") }
    };
}

/// Appends one report line (nothing when [`REPORT_VAR`] is unset). A report that cannot be
/// written is said on stderr; the count then finds the case missing.
pub fn record(origin: Origin, backend: &str, suite: &str, name: &str, outcome: &Outcome) {
    static WRITING: Mutex<()> = Mutex::new(());
    let Some(dir) = std::env::var_os(REPORT_VAR).filter(|d| !d.is_empty()) else { return };
    let (kind, detail) = match outcome {
        Outcome::Passed => ("passed", ""),
        Outcome::Failed(why) => ("failed", why.as_str()),
        Outcome::Skipped(why) => ("skipped", why.as_str()),
        Outcome::Unsupported(why) => ("unsupported", why.as_str()),
    };
    let fields = [
        ("package", origin.package),
        ("target", origin.target),
        ("backend", backend),
        ("suite", suite),
        ("name", name),
        ("outcome", kind),
        ("detail", detail),
    ];
    let body: Vec<String> =
        fields.iter().map(|(k, v)| format!("\"{k}\":\"{}\"", escape(v))).collect();
    let line = format!("{{{}}}\n", body.join(","));
    let path = std::path::Path::new(&dir).join(format!(
        "{}.{}.{}.jsonl",
        origin.package,
        origin.target,
        std::process::id()
    ));
    let _one_at_a_time = WRITING.lock().unwrap_or_else(|p| p.into_inner());
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::OpenOptions::new().create(true).append(true).open(&path))
        .and_then(|mut file| file.write_all(line.as_bytes()));
    if let Err(e) = written {
        let _ = writeln!(std::io::stderr(), "cannot write the case report {}: {e}", path.display());
    }
}

/// `text` as the inside of a JSON string.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn strings_are_escaped_for_json() {
        assert_eq!(escape("a \"b\" \\ c\nd\u{1}"), "a \\\"b\\\" \\\\ c\\nd\\u0001");
    }
}
