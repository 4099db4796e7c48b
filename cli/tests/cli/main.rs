//! The `taskgate` binary, run as a process: the operator verbs on SQLite, PostgreSQL and
//! MariaDB, bad input, an unreachable database, and `check` (streaming, `--json`, an empty
//! filter, Ctrl-C removing its tables).

mod check;
mod common;
mod errors;
mod verbs;
