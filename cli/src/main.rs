//! `taskgate`: the operator's command line. `taskgate check [URL]` runs the whole contract
//! suite against the backend the URL names and prints a table of cases.

mod backends;
mod check;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// taskgate: a durable task broker with one behavioural contract.
#[derive(Debug, Parser)]
#[command(name = "taskgate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the contract suite against a backend and print one line per case.
    Check(check::CheckArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("taskgate: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match cli.command {
        Command::Check(args) => runtime.block_on(check::run(args)),
    }
}
