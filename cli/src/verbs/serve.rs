//! `taskgate serve`: the admin HTTP API (`taskgate-admin`) on a socket, until Ctrl-C.

use std::process::ExitCode;

use clap::Args;
use taskgate_admin::AdminConfig;

use crate::error::{CliError, Outcome};
use crate::output::err;
use crate::Context;

/// Arguments of `taskgate serve`.
#[derive(Args)]
pub(crate) struct ServeArgs {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    listen: String,
    /// A bearer token, `NAME:read|write[@OWNER]=SECRET` (secret at least 16 bytes); repeatable,
    /// or comma-separated in `TASKGATE_ADMIN_TOKENS`. Mutations need a write token; a token
    /// bound to an owner sees only that owner's tasks.
    #[arg(
        long = "token",
        value_name = "SPEC",
        env = "TASKGATE_ADMIN_TOKENS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    tokens: Vec<String>,
}

impl std::fmt::Debug for ServeArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secrets.
        f.debug_struct("ServeArgs")
            .field("listen", &self.listen)
            .field("tokens", &self.tokens.len())
            .finish()
    }
}

/// `taskgate serve`: checks the tokens and the database, binds, serves until Ctrl-C.
pub(crate) async fn serve(args: ServeArgs, ctx: &Context) -> Outcome {
    if args.tokens.is_empty() {
        return Err(CliError::invalid(
            "token",
            "at least one --token NAME:read|write[@OWNER]=SECRET (or TASKGATE_ADMIN_TOKENS) is \
             required: the API has no anonymous access",
        ));
    }
    let config = AdminConfig::from_specs(args.tokens.iter().map(String::as_str))
        .map_err(|e| CliError::invalid("token", e.to_string()))?;
    let broker = ctx.db.open().await?;
    let listener = tokio::net::TcpListener::bind(&args.listen).await.map_err(|e| {
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
