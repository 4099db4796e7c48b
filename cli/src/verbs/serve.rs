//! `taskgate serve`: the admin HTTP API (`taskgate-admin`) on a socket, until Ctrl-C.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use taskgate_admin::{AdminConfig, Limits, DEFAULT_BACKLOG};

use crate::error::{CliError, Outcome};
use crate::output::err;
use crate::Context;

/// The environment variable that holds tokens when no `--token` is given.
const TOKENS_VAR: &str = "TASKGATE_ADMIN_TOKENS";

/// Arguments of `taskgate serve`.
#[derive(Args)]
pub(crate) struct ServeArgs {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    listen: String,
    /// A bearer token, `NAME:read|write[@OWNER]=SECRET` (secret at least 16 bytes, taken
    /// verbatim, commas included); repeatable. Without it, the tokens come from
    /// TASKGATE_ADMIN_TOKENS, comma-separated (a comma followed by `NAME:` starts the next
    /// token; any other comma belongs to the secret). Mutations need a write token; a token
    /// bound to an owner sees only that owner's tasks.
    #[arg(long = "token", value_name = "SPEC")]
    tokens: Vec<String>,
    /// How many connections may wait for their accept (Linux caps it at net.core.somaxconn).
    #[arg(long, default_value_t = DEFAULT_BACKLOG, value_name = "N")]
    backlog: u32,
    /// How many connections are open at once; more wait in the backlog [default: the open-files
    /// limit (ulimit -n) less 64, at most 10000].
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// How long a connection may take to send a request's line and headers (from its start, or
    /// from its previous answer) before it is closed: 500ms, 10s, 2m.
    #[arg(long, default_value = "10s", value_name = "TIME", value_parser = parse_timeout)]
    header_timeout: Duration,
    /// How long a request's body may take to arrive before it is answered 408.
    #[arg(long, default_value = "30s", value_name = "TIME", value_parser = parse_timeout)]
    body_timeout: Duration,
}

impl std::fmt::Debug for ServeArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secrets.
        f.debug_struct("ServeArgs")
            .field("listen", &self.listen)
            .field("tokens", &self.tokens.len())
            .field("backlog", &self.backlog)
            .field("max_connections", &self.max_connections)
            .field("header_timeout", &self.header_timeout)
            .field("body_timeout", &self.body_timeout)
            .finish()
    }
}

/// `500ms`, `10s`, `2m`: a positive time.
fn parse_timeout(text: &str) -> Result<Duration, String> {
    let refuse = || format!("{text:?} is not a time like 500ms, 10s or 2m");
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let number: u64 = digits.parse().map_err(|_| refuse())?;
    let time = match &text[digits.len()..] {
        "ms" => Some(Duration::from_millis(number)),
        "s" => Some(Duration::from_secs(number)),
        "m" => number.checked_mul(60).map(Duration::from_secs),
        _ => None,
    };
    time.filter(|t| !t.is_zero()).ok_or_else(refuse)
}

/// The configuration: the tokens of `--token` (each verbatim) or of `TASKGATE_ADMIN_TOKENS`,
/// and the limits. A token that does not parse is named by its name or position, never by its
/// text, which may hold a secret.
fn config(args: &ServeArgs) -> Result<AdminConfig, CliError> {
    let from_env = std::env::var(TOKENS_VAR).unwrap_or_default();
    let (specs, source) = if args.tokens.is_empty() {
        (taskgate_admin::split_token_list(&from_env), TOKENS_VAR)
    } else {
        (args.tokens.iter().map(String::as_str).collect(), "--token")
    };
    if specs.is_empty() {
        return Err(CliError::invalid(
            "token",
            "at least one --token NAME:read|write[@OWNER]=SECRET (or TASKGATE_ADMIN_TOKENS) is \
             required: the API has no anonymous access",
        ));
    }
    let config = AdminConfig::from_specs(specs)
        .map_err(|e| CliError::invalid("token", format!("{source}: {e}")))?;
    let mut limits = Limits {
        header_timeout: args.header_timeout,
        body_timeout: args.body_timeout,
        ..Limits::default()
    };
    if let Some(max) = args.max_connections {
        if max == 0 {
            return Err(CliError::invalid("max-connections", "must be at least 1"));
        }
        limits.max_connections = max;
    }
    Ok(config.with_limits(limits))
}

/// `taskgate serve`: checks the tokens and the database, binds, serves until Ctrl-C.
pub(crate) async fn serve(args: ServeArgs, ctx: &Context) -> Outcome {
    let config = config(&args)?;
    let broker = ctx.db.open().await?;
    let listener = taskgate_admin::bind(&args.listen, args.backlog).await.map_err(|e| {
        CliError::invalid("listen", format!("cannot listen on {}: {e}", args.listen))
    })?;
    let addr = listener.local_addr().map_or_else(|_| args.listen.clone(), |a| a.to_string());
    err(&format!("taskgate: serving the admin API on http://{addr}/api/v1 (Ctrl-C stops)"));
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let served = taskgate_admin::serve(listener, broker.clone(), config, stop).await;
    broker.close().await.ok();
    served.map_err(|e| CliError::invalid("listen", format!("the server stopped: {e}")))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_parse_with_a_unit_and_are_positive() {
        for (text, want) in [("500ms", 500), ("10s", 10_000), ("2m", 120_000)] {
            assert_eq!(parse_timeout(text), Ok(Duration::from_millis(want)), "{text}");
        }
        for text in ["", "10", "0s", "-1s", "1h", "s", "1.5s"] {
            assert!(parse_timeout(text).is_err(), "{text}");
        }
    }
}
