//! Beyond one server (issue 39): where the handles of the report's topology rows connect —
//! PostgreSQL directly or through PgBouncer in transaction mode, and MariaDB on the single
//! server or on a 3-node Galera cluster with every handle on node 1 or the handles spread over
//! the nodes — and why a family of rows cannot run here.
//!
//! The servers come from the environment that `ci/services.sh` exports:
//! `TASKGATE_PG_URL` and `TASKGATE_PGBOUNCER_URL` (`?pooler=transaction`, with a
//! `listen_url` to the server itself), `TASKGATE_MYSQL_URL` and `TASKGATE_GALERA_URLS`
//! (three nodes; `TASKGATE_GALERA=0` opts out).

use std::fmt;

use taskgate_postgres::{PgOptions, Pooler};

use crate::backend::{
    Backend, Env, Placement, GALERA_OPT_VAR, GALERA_URLS_VAR, MYSQL_URL_VAR, PGBOUNCER_URL_VAR,
    PG_URL_VAR,
};

/// Broker handles of every MariaDB topology bed (the single server's too, so that the three
/// setups differ only in where the handles connect): one per Galera node.
pub const GALERA_HANDLES: usize = 3;

/// Where one topology row's handles connect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Setup {
    /// PostgreSQL, one handle straight to the server (`TASKGATE_PG_URL`).
    PgDirect,
    /// PostgreSQL, one handle through PgBouncer in transaction mode
    /// (`TASKGATE_PGBOUNCER_URL`, `?pooler=transaction`).
    PgBouncer,
    /// MariaDB, [`GALERA_HANDLES`] handles on the single server (`TASKGATE_MYSQL_URL`).
    MySqlSingle,
    /// [`GALERA_HANDLES`] handles, every one on node 1 of the Galera cluster (the cluster still
    /// replicates each write set to all three nodes).
    GaleraNode1,
    /// [`GALERA_HANDLES`] handles, handle `i` on node `i mod 3` of the Galera cluster.
    GaleraSpread,
}

impl Setup {
    /// The column's heading.
    pub fn label(self) -> &'static str {
        match self {
            Setup::PgDirect => "direct",
            Setup::PgBouncer => "through PgBouncer",
            Setup::MySqlSingle => "single server",
            Setup::GaleraNode1 => "Galera, every handle on node 1",
            Setup::GaleraSpread => "Galera, handles on nodes 1–3",
        }
    }

    /// The backend the setup runs.
    pub fn backend(self) -> Backend {
        match self {
            Setup::PgDirect | Setup::PgBouncer => Backend::Postgres,
            _ => Backend::MySql,
        }
    }

    /// The family of rows the setup belongs to.
    pub fn family(self) -> Family {
        match self {
            Setup::PgDirect | Setup::PgBouncer => Family::PgBouncer,
            _ => Family::Galera,
        }
    }

    /// Broker handles of a bed of this setup (and runtimes of a drain).
    pub fn handles(self) -> usize {
        match self.family() {
            Family::PgBouncer => 1,
            Family::Galera => GALERA_HANDLES,
        }
    }

    /// Where the handles and the harness's own pool connect, from `env` (an error when the
    /// family cannot run: [`Family::skip_reason`]).
    pub fn placement(self, env: &Env) -> Result<Placement, String> {
        if let Some(why) = self.family().skip_reason(env) {
            return Err(why);
        }
        let need = |v: &Option<String>, var: &str| v.clone().ok_or(format!("{var} is not set"));
        let backend = self.backend();
        let n = self.handles();
        Ok(match self {
            Setup::PgDirect => {
                let url = need(&env.pg_url, PG_URL_VAR)?;
                Placement { backend, handles: vec![url.clone()], raw: url }
            }
            Setup::PgBouncer => {
                let url = need(&env.pgbouncer_url, PGBOUNCER_URL_VAR)?;
                Placement { backend, handles: vec![url.clone()], raw: pg_direct_url(&url, env)? }
            }
            Setup::MySqlSingle => {
                let url = need(&env.mysql_url, MYSQL_URL_VAR)?;
                Placement { backend, handles: vec![url.clone(); n], raw: url }
            }
            Setup::GaleraNode1 => {
                let url = env.galera_urls[0].clone();
                Placement { backend, handles: vec![url.clone(); n], raw: url }
            }
            Setup::GaleraSpread => {
                let nodes = &env.galera_urls;
                let handles = (0..n).map(|i| nodes[i % nodes.len()].clone()).collect();
                Placement { backend, handles, raw: nodes[0].clone() }
            }
        })
    }
}

impl fmt::Display for Setup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Setup::PgDirect => "postgres direct",
            Setup::PgBouncer => "postgres pgbouncer",
            Setup::MySqlSingle => "mysql single",
            Setup::GaleraNode1 => "galera node1",
            Setup::GaleraSpread => "galera spread",
        };
        f.write_str(name)
    }
}

/// The harness's direct URL beside a PgBouncer URL: its `listen_url` (by definition a direct
/// URL of the same database), else `TASKGATE_PG_URL`. An error when the URL does not say
/// `?pooler=transaction` (the broker would then use named statements, which fail behind a
/// transaction pooler).
fn pg_direct_url(bouncer: &str, env: &Env) -> Result<String, String> {
    let options = PgOptions::from_url(bouncer).map_err(|e| format!("{PGBOUNCER_URL_VAR}: {e}"))?;
    if options.get_pooler() != Pooler::Transaction {
        return Err(format!("{PGBOUNCER_URL_VAR} does not say ?pooler=transaction"));
    }
    match (options.get_listen_url(), &env.pg_url) {
        (Some(url), _) => Ok(url.to_owned()),
        (None, Some(url)) => Ok(url.clone()),
        (None, None) => Err(format!("{PG_URL_VAR} is not set")),
    }
}

/// A family of topology rows, each measured beside the single-server figure of the same run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// PostgreSQL direct vs through PgBouncer.
    PgBouncer,
    /// MariaDB single server vs Galera node 1 vs Galera spread over three nodes.
    Galera,
}

impl Family {
    /// Both families, in report order.
    pub const ALL: [Family; 2] = [Family::PgBouncer, Family::Galera];

    /// The setups compared, the reference (the single server) first.
    pub fn setups(self) -> &'static [Setup] {
        match self {
            Family::PgBouncer => &[Setup::PgDirect, Setup::PgBouncer],
            Family::Galera => &[Setup::MySqlSingle, Setup::GaleraNode1, Setup::GaleraSpread],
        }
    }

    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            Family::PgBouncer => "PgBouncer",
            Family::Galera => "Galera",
        }
    }

    /// Why the family's rows cannot run here, if they cannot.
    pub fn skip_reason(self, env: &Env) -> Option<String> {
        let rows = self.name();
        match self {
            Family::PgBouncer if env.pg_url.is_none() => {
                Some(format!("{rows} rows skipped: {PG_URL_VAR} is not set"))
            }
            Family::PgBouncer if env.pgbouncer_url.is_none() => Some(format!(
                "{rows} rows skipped: {PGBOUNCER_URL_VAR} is not set (`. ci/services.sh` starts \
                 PgBouncer and exports it)"
            )),
            Family::Galera if env.galera_opted_out => Some(format!(
                "{rows} rows skipped: {GALERA_OPT_VAR}=0 (the cluster was opted out of)"
            )),
            Family::Galera if env.mysql_url.is_none() => {
                Some(format!("{rows} rows skipped: {MYSQL_URL_VAR} is not set"))
            }
            Family::Galera if env.galera_urls.is_empty() => Some(format!(
                "{rows} rows skipped: {GALERA_URLS_VAR} is not set (`. ci/services.sh` starts \
                 the 3-node cluster and exports it)"
            )),
            Family::Galera if env.galera_urls.len() < GALERA_HANDLES => Some(format!(
                "{rows} rows skipped: {GALERA_URLS_VAR} names {} node(s), not {GALERA_HANDLES}",
                env.galera_urls.len()
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Env {
        Env {
            pg_url: Some("postgres://u@db:5432/app".into()),
            mysql_url: Some("mysql://root@db:3306/test".into()),
            pgbouncer_url: Some(
                "postgres://u@pgb:6432/app?pooler=transaction&listen_url=postgres%3A%2F%2Fu%40db2%3A5432%2Fapp"
                    .into(),
            ),
            galera_urls: vec!["mysql://n1/test".into(), "mysql://n2/test".into(), "mysql://n3/test".into()],
            galera_opted_out: false,
        }
    }

    #[test]
    fn handles_are_placed_as_the_rows_say() {
        let env = env();
        let p = Setup::PgBouncer.placement(&env).unwrap();
        assert_eq!(p.handles.len(), 1);
        assert_eq!(p.raw, "postgres://u@db2:5432/app", "the harness's pool bypasses the pooler");
        let p = Setup::GaleraNode1.placement(&env).unwrap();
        assert_eq!(p.handles, vec!["mysql://n1/test"; 3]);
        let p = Setup::GaleraSpread.placement(&env).unwrap();
        assert_eq!(p.handles, vec!["mysql://n1/test", "mysql://n2/test", "mysql://n3/test"]);
        assert_eq!(p.raw, "mysql://n1/test");
        let p = Setup::MySqlSingle.placement(&env).unwrap();
        assert_eq!(p.handles, vec!["mysql://root@db:3306/test"; 3]);
    }

    #[test]
    fn missing_services_skip_with_a_reason() {
        let mut env = env();
        env.galera_opted_out = true;
        assert!(Family::Galera.skip_reason(&env).unwrap().contains("TASKGATE_GALERA=0"));
        env.galera_opted_out = false;
        env.galera_urls.truncate(2);
        assert!(Setup::GaleraSpread.placement(&env).unwrap_err().contains("2 node(s)"));
        env.pgbouncer_url = Some("postgres://u@pgb:6432/app".into());
        assert!(Setup::PgBouncer.placement(&env).unwrap_err().contains("pooler=transaction"));
        env.pgbouncer_url = None;
        assert!(Family::PgBouncer.skip_reason(&env).unwrap().contains("TASKGATE_PGBOUNCER_URL"));
        assert!(Family::PgBouncer.skip_reason(&Env { pg_url: None, ..env }).is_some());
    }
}
