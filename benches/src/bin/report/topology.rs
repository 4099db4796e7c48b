//! The topology rows (issue 39): the claim cells and runtime drains of the plan on
//! PostgreSQL directly and through PgBouncer, and on the MariaDB single server, Galera node 1
//! and the Galera nodes 1–3, every setup of a row measured in the same run, round by round.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use benches::backend::{Bed, Env};
use benches::drive::Spec;
use benches::report::{TopologyCell, TopologyRun, TopologyWork};
use benches::runtime::RtSpec;
use benches::stats::rate;
use benches::topology::{Family, Setup};
use benches::Result;

use crate::plan::Plan;
use crate::run::{claim_on, drain_on, utc_now};

/// Every topology row that can run here; families that cannot are skipped with a loud
/// message (and named in the result). `command` is what the page says measured them.
pub(crate) async fn topology(env: &Env, plan: &Plan, rounds: usize, command: &str) -> TopologyRun {
    let started = Instant::now();
    let load_max = Arc::new(Mutex::new(benches::facts::load_average()));
    let sampler = {
        let load_max = load_max.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                let now = benches::facts::load_average();
                if let Ok(mut max) = load_max.lock() {
                    *max = max.max(now);
                }
            }
        })
    };
    let mut run = TopologyRun {
        command: command.to_owned(),
        started: utc_now(),
        load: (benches::facts::load_average(), 0.0),
        rounds: rounds.max(1),
        cell_secs: plan.cell.as_secs_f64(),
        ..TopologyRun::default()
    };
    for family in Family::ALL {
        if let Some(why) = family.skip_reason(env) {
            eprintln!("report: ==== SKIPPED: {why}");
            run.skipped.push(why);
            continue;
        }
        eprintln!("report: topology rows, {} (load {:.2})", family.name(), run.load.0);
        settings(env, family, &mut run).await;
        rows(env, plan, family, &mut run).await;
    }
    sampler.abort();
    run.load.1 = benches::facts::load_average();
    run.load_max = load_max.lock().map_or(f64::NAN, |m| m.max(run.load.1));
    run.wall_secs = started.elapsed().as_secs_f64();
    run
}

/// The servers' settings of the family's setups (the single server's and node 1's; PgBouncer
/// runs on the direct server's).
async fn settings(env: &Env, family: Family, run: &mut TopologyRun) {
    for &setup in family.setups() {
        if setup == Setup::GaleraSpread {
            continue; // the same nodes as node 1's
        }
        let read = async {
            let placement = setup.placement(env)?;
            let bed = Bed::open_placed(&placement, 1).await.map_err(|e| e.to_string())?;
            let mut list = benches::facts::database_settings(&bed).await;
            if setup == Setup::GaleraNode1 {
                if let Ok(list) = &mut list {
                    list.extend(benches::facts::galera_settings(&bed).await.unwrap_or_default());
                }
            }
            let _ = bed.close().await;
            let mut list = list.map_err(|e| e.to_string())?;
            if setup == Setup::PgBouncer {
                list = vec![
                    ("pool_mode".to_owned(), "transaction (`?pooler=transaction`)".to_owned()),
                    ("server".to_owned(), "the direct row's".to_owned()),
                ];
            }
            Ok::<_, String>(list)
        };
        let list = read.await.unwrap_or_else(|e| vec![("error".to_owned(), e)]);
        run.settings.push((setup, list));
    }
}

/// Each work of the plan on each setup of `family`, `run.rounds` times; the setups alternate:
/// round `r` starts at setup `r mod setups`.
async fn rows(env: &Env, plan: &Plan, family: Family, run: &mut TopologyRun) {
    let setups = family.setups();
    let works: Vec<TopologyWork> = plan
        .topology_claims
        .iter()
        .map(|s| TopologyWork::Claim(*s))
        .chain(plan.topology_drains.iter().map(|s| TopologyWork::Drain(*s, plan.runtime_backlog)))
        .collect();
    let mut last: HashMap<(Setup, usize), f64> = HashMap::new();
    for work in works {
        let mut cells: Vec<TopologyCell> = setups
            .iter()
            .map(|&setup| TopologyCell {
                setup,
                work,
                rates: Vec::new(),
                failures: Vec::new(),
                retries: 0,
                short: false,
            })
            .collect();
        for round in 0..run.rounds {
            for k in 0..setups.len() {
                let i = (round + k) % setups.len();
                let cell = &mut cells[i];
                let shown = measure(env, plan, cell, &mut last).await;
                eprintln!("  round {round}: {} {}: {shown}", cell.setup, label(work));
            }
        }
        run.cells.extend(cells);
    }
}

fn label(work: TopologyWork) -> String {
    match work {
        TopologyWork::Claim(spec) => format!("claim {}", spec.label()),
        TopologyWork::Drain(spec, n) => format!("drain {n} {}", spec.label()),
    }
}

/// One round of `cell`: its rate, or why it failed, added to the cell; returns it as text.
async fn measure(
    env: &Env,
    plan: &Plan,
    cell: &mut TopologyCell,
    last: &mut HashMap<(Setup, usize), f64>,
) -> String {
    let result = match cell.work {
        TopologyWork::Claim(spec) => claim(env, plan, cell.setup, spec, last).await,
        TopologyWork::Drain(spec, _) => drain(env, plan, cell.setup, spec).await,
    };
    match result {
        Ok((jobs, retries, short)) => {
            cell.rates.push(jobs);
            cell.retries += retries;
            cell.short |= short;
            let mark =
                if short { " (short: drained early or stopped at the deadline)" } else { "" };
            format!("{} jobs/s, {retries} retries{mark}", rate(jobs))
        }
        Err(e) => {
            cell.failures.push(e.to_string());
            format!("failed: {e}")
        }
    }
}

/// Rate, retries, and whether the backlog ran out.
async fn claim(
    env: &Env,
    plan: &Plan,
    setup: Setup,
    spec: Spec,
    last: &mut HashMap<(Setup, usize), f64>,
) -> Result<(f64, u64, bool)> {
    let backend = setup.backend();
    let guess = Plan::guess(backend, spec.batch);
    // The previous round's rate of the same batch on this setup, with headroom.
    let expected = last.get(&(setup, spec.batch)).map_or(guess, |r| guess.max(r * 1.5));
    let total = plan.backlog(backend, expected, spec.claimers, spec.batch);
    let placement = setup.placement(env)?;
    let sessions = u32::try_from(spec.claimers).unwrap_or(u32::MAX);
    let bed = Bed::open_placed(&placement, sessions).await?;
    let measured = claim_on(&bed, plan, spec, total, false).await;
    let closed = bed.close().await;
    let m = measured?;
    closed?;
    last.insert((setup, spec.batch), m.rate);
    Ok((m.rate, m.retries, m.exhausted))
}

/// Rate, 0 retries (not counted for drains), and whether the drain was stopped at its
/// deadline.
async fn drain(env: &Env, plan: &Plan, setup: Setup, spec: RtSpec) -> Result<(f64, u64, bool)> {
    let placement = setup.placement(env)?;
    let per_handle = spec.workers + 4;
    let sessions = u32::try_from(per_handle * setup.handles()).unwrap_or(u32::MAX);
    let bed = Bed::open_placed(&placement, sessions).await?;
    let out = drain_on(&bed, plan, spec).await;
    let closed = bed.close().await;
    let out = out?;
    closed?;
    Ok((out.rate(), 0, !out.finished))
}
