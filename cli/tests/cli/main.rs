//! The `taskgate` binary, run as a process: the operator verbs on SQLite, PostgreSQL and
//! MariaDB, bad input, an unreachable database, and `check` (streaming, `--json`, an empty
//! filter, Ctrl-C removing its tables), and `serve` (the admin API over a socket).

mod check;
mod common;
mod errors;
mod serve;
mod verbs;
