//! `report`: runs a short fixed version of the benchmark matrix on every available backend —
//! and, in the same run, the raw-SQL ceiling for the same work — then writes
//! `performance.md`, `performance.svg` and `soak.svg` under `target/performance/` and copies
//! them to `docs/`. `cargo run -p benches --release --bin report -- --help` lists the options.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use benches::backend::{Backend, Env};
use benches::report::{markdown, svg, Report};
use benches::Result;

mod plan;
mod run;
mod topology;

use plan::Plan;

const HELP: &str = "\
report: the taskgate performance report (extensions §E14)

USAGE: cargo run -p benches --release --bin report -- [OPTIONS]

OPTIONS:
  --cell-secs <S>      seconds each claim cell is measured (default 1.5)
  --backends <LIST>    comma-separated: memory,sqlite,postgres,mysql (default: all available)
  --retained <N>       finished rows for the degradation runs (default 1000000)
  --out <DIR>          output directory (default <target>/performance)
  --no-docs            do not copy the results to docs/ nor rewrite README.md's section
  --quick              a tiny matrix, to check that everything runs (implies --no-docs)
  --wait-quiet         wait up to 2 minutes for the 1-minute load average to drop below 1
  --runtime-only       only the worker runtime's rows and the broker cells they are compared
                       with (16 claimers, batch 1 and 100, with raw ceilings); writes
                       runtime.md in the output directory and leaves docs/ and README.md alone
  --pickups-only       only the worker runtime's pickup latency (idle worker; producer on the
                       worker's handle, then on a second handle), printed
  --cell <B,Q,C,N[,raw]>  only run one claim cell (backend, queues, claimers, batch) and print
                       it: for profiling (strace -c, perf) one workload at a time
  --pairs [LIST]       only the broker-vs-raw comparison of the cells in LIST (`B,Q,C,N`
                       separated by `;`; default: issue 13's rows, PostgreSQL 16×1, 16×10 and
                       4×100, SQLite 1×100, MySQL 4×100): broker and raw ceiling back to back,
                       alternating, --rounds times (PostgreSQL one-queue cells also with
                       pgbench's raw ceiling when pgbench is installed); prints each run and
                       the median ratios
  --rounds <N>         rounds of --pairs (default 3) and of the topology rows (default 3;
                       --quick: 1)
  --topology-only      only the topology rows (issue 39): claim cells and runtime drains on
                       PostgreSQL direct and through PgBouncer (TASKGATE_PGBOUNCER_URL,
                       `?pooler=transaction`), and on the MariaDB single server, Galera node 1
                       and Galera nodes 1-3 (TASKGATE_GALERA_URLS), each row's setups in the
                       same run; writes topology.md in the output directory and replaces the
                       topology section of docs/performance.md (not with --no-docs or --quick).
                       A family whose servers are not there is skipped with a loud message; the
                       run fails if a row that ran failed in every round
  --long               the long mode: each backend's soak runs 30 minutes instead of 5
  --soak-secs <S>      seconds each backend's soak runs (default 300; --quick: 5)
  --soak-rate <R>      jobs per second the soak's producer enqueues (default 500)
  --pipelines-only     only the end-to-end pipelines (2 producers, 16 and 2 claimers, batch
                       100) on the selected backends, printed; docs/ and README.md left alone
  --soak-only          only the soak (sustained load with pruning: PostgreSQL, SQLite, MySQL
                       and memory) on the selected backends; writes soak.md and soak.svg in the
                       output directory and leaves docs/ and README.md alone
  --raw-ids-only       raw ceilings claim IDs alone instead of every task column (the ceiling
                       of reports before issue 13's fair comparison; for comparing with them)
  -h, --help           this text

PostgreSQL runs when TASKGATE_PG_URL is set, MySQL/MariaDB when TASKGATE_MYSQL_URL is set; the
full report adds the topology rows whose servers are there (`. ci/services.sh` starts them) and
otherwise keeps the topology section of the docs/performance.md it replaces.
Before each backend (not for --cell and --pairs) the report lets earlier writes land: a
PostgreSQL CHECKPOINT, then sync.";

/// The command line.
struct Args {
    plan: Plan,
    cell: Option<(Backend, benches::drive::Spec, bool)>,
    pairs: Option<Vec<(Backend, benches::drive::Spec)>>,
    rounds: Option<usize>,
    backends: Option<Vec<Backend>>,
    out: PathBuf,
    docs: bool,
    wait_quiet: bool,
    runtime_only: bool,
    pickups_only: bool,
    pipelines_only: bool,
    soak_only: bool,
    topology_only: bool,
}

fn workspace_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn default_out() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    target.join("performance")
}

fn parse_args() -> Result<Option<Args>> {
    let mut args = Args {
        plan: Plan::full(),
        cell: None,
        pairs: None,
        rounds: None,
        backends: None,
        out: default_out(),
        docs: true,
        wait_quiet: false,
        runtime_only: false,
        pickups_only: false,
        pipelines_only: false,
        soak_only: false,
        topology_only: false,
    };
    let mut soak = None;
    let mut it = std::env::args().skip(1).peekable();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--cell-secs" => {
                args.plan.cell = Duration::from_secs_f64(value("--cell-secs")?.parse()?)
            }
            "--retained" => args.plan.retained = value("--retained")?.parse()?,
            "--out" => args.out = PathBuf::from(value("--out")?),
            "--backends" => {
                let list = value("--backends")?;
                let parsed: std::result::Result<Vec<Backend>, String> =
                    list.split(',').map(str::parse).collect();
                args.backends = Some(parsed?);
            }
            "--no-docs" => args.docs = false,
            "--quick" => {
                args.plan = Plan::quick();
                args.docs = false;
            }
            "--wait-quiet" => args.wait_quiet = true,
            "--runtime-only" => {
                args.runtime_only = true;
                args.docs = false;
            }
            "--pickups-only" => {
                args.pickups_only = true;
                args.docs = false;
            }
            "--long" => soak = soak.or(Some(Plan::SOAK_LONG)),
            "--soak-secs" => {
                soak = Some(Duration::from_secs_f64(value("--soak-secs")?.parse()?));
            }
            "--soak-rate" => args.plan.soak_rate = value("--soak-rate")?.parse()?,
            "--pipelines-only" => {
                args.pipelines_only = true;
                args.docs = false;
            }
            "--soak-only" => {
                args.soak_only = true;
                args.docs = false;
            }
            "--cell" => args.cell = Some(parse_cell(&value("--cell")?)?),
            "--rounds" => args.rounds = Some(value("--rounds")?.parse()?),
            "--topology-only" => args.topology_only = true,
            "--raw-ids-only" => benches::raw::set_ids_only(true),
            "--pairs" => {
                let list = match it.next_if(|next| !next.starts_with("--")) {
                    Some(list) => list,
                    None => run::ISSUE_PAIRS.to_owned(),
                };
                let mut cells = Vec::new();
                for text in list.split(';').filter(|c| !c.trim().is_empty()) {
                    let (backend, spec, _) = parse_cell(text.trim())?;
                    cells.push((backend, spec));
                }
                args.pairs = Some(cells);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)").into()),
        }
    }
    if let Some(soak) = soak {
        args.plan.soak = soak;
    }
    if args.plan.soak.is_zero() || args.plan.soak_rate == 0 {
        return Err("--soak-secs and --soak-rate must be above zero".into());
    }
    Ok(Some(args))
}

/// `postgres,1,16,100[,raw]`.
fn parse_cell(text: &str) -> Result<(Backend, benches::drive::Spec, bool)> {
    let parts: Vec<&str> = text.split(',').collect();
    let [backend, queues, claimers, batch, rest @ ..] = parts.as_slice() else {
        return Err(format!("--cell {text:?}: expected backend,queues,claimers,batch[,raw]").into());
    };
    let spec = benches::drive::Spec {
        queues: queues.parse()?,
        claimers: claimers.parse()?,
        batch: batch.parse()?,
    };
    Ok((backend.parse()?, spec, rest.first() == Some(&"raw")))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("report: {e}");
            return ExitCode::from(2);
        }
    };
    let outcome = benches::runtime().and_then(|rt| rt.block_on(report(args)));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("report: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn report(args: Args) -> Result<()> {
    let env = Env::from_env();
    env.announce_skips();
    let backends: Vec<Backend> = match &args.backends {
        Some(list) => list.iter().copied().filter(|b| env.available().contains(b)).collect(),
        None => env.available(),
    };
    let load_start = if args.wait_quiet {
        benches::facts::wait_for_quiet(1.0, Duration::from_secs(120)).await
    } else {
        benches::facts::load_average()
    };
    if let Some((backend, spec, raw)) = args.cell {
        return run::single(&env, backend, &args.plan, spec, raw).await;
    }
    if let Some(cells) = &args.pairs {
        return run::pairs(&env, &args.plan, cells, args.rounds.unwrap_or(3)).await;
    }
    let topology_rounds = args.rounds.unwrap_or(args.plan.topology_rounds);
    if args.topology_only {
        let command = "cargo run -p benches --release --bin report -- --topology-only";
        let run = topology::topology(&env, &args.plan, topology_rounds, command).await;
        return write_topology(&run, &args);
    }
    let started = Instant::now();
    let fsync_start = fsync_probe().await;
    let mut report = Report {
        started: run::utc_now(),
        cell_secs: args.plan.cell.as_secs_f64(),
        machine: benches::facts::Machine::read(),
        skipped: Backend::ALL.into_iter().filter_map(|b| env.skip_reason(b)).collect(),
        notes: std::fs::read_to_string(workspace_root().join("benches/report-notes.md"))
            .unwrap_or_default(),
        ..Report::default()
    };
    for backend in backends {
        let settled = benches::facts::settle_writes(env.pg_url.as_deref()).await;
        eprintln!("report: earlier writes settled in {:.1} s before {backend}", settled.secs);
        for why in settled.skipped {
            eprintln!("report: could not settle earlier writes: {why}");
        }
        if args.soak_only {
            run::soak(&env, backend, &args.plan, &mut report).await;
        } else if args.pickups_only {
            run::runtime_pickups(&env, backend, &args.plan, &mut report).await;
        } else if args.runtime_only {
            run::runtime_only(&env, backend, &args.plan, &mut report).await;
        } else if args.pipelines_only {
            run::pipelines(&env, backend, &args.plan, &mut report).await;
        } else {
            run::backend(&env, backend, &args.plan, &mut report).await;
        }
    }
    let some_only = args.soak_only || args.pickups_only || args.runtime_only || args.pipelines_only;
    let families = benches::topology::Family::ALL;
    if !some_only && families.iter().any(|f| f.skip_reason(&env).is_none()) {
        let command = "cargo run -p benches --release --bin report";
        report.topology =
            Some(topology::topology(&env, &args.plan, topology_rounds, command).await);
    } else if !some_only {
        for why in families.iter().filter_map(|f| f.skip_reason(&env)) {
            eprintln!("report: ==== SKIPPED: {why}");
        }
        let page = std::fs::read_to_string(workspace_root().join("docs/performance.md"));
        report.topology_carried = page.ok().and_then(|p| markdown::topology_of(&p));
        if report.topology_carried.is_some() {
            eprintln!("report: keeping the topology section of docs/performance.md");
        }
    }
    report.load = (load_start, benches::facts::load_average());
    report.fsync = (fsync_start, fsync_probe().await);
    report.wall_secs = started.elapsed().as_secs_f64();
    write(&report, &args)
}

/// 100 `fdatasync` samples off the async threads; `None` if the probe fails.
async fn fsync_probe() -> Option<benches::stats::Percentiles> {
    let samples = tokio::task::spawn_blocking(|| benches::facts::fsync_latency(100)).await;
    match samples {
        Ok(Ok(s)) => Some(benches::stats::percentiles(&s)),
        _ => None,
    }
}

/// `--topology-only`: `topology.md` in the output directory, the section spliced into
/// docs/performance.md (unless `--no-docs` / `--quick`), the section printed; an error when a
/// row that ran failed in every round.
fn write_topology(run: &benches::report::TopologyRun, args: &Args) -> Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let section = markdown::topology_section(run, "##");
    std::fs::write(args.out.join("topology.md"), &section)?;
    eprintln!("report: wrote {}", args.out.join("topology.md").display());
    if args.docs {
        let path = workspace_root().join("docs/performance.md");
        let page = std::fs::read_to_string(&path)?;
        std::fs::write(&path, markdown::splice_topology(&page, &section))?;
        eprintln!("report: replaced the topology section of {}", path.display());
    }
    print!("{section}");
    let failed: Vec<String> = run
        .cells
        .iter()
        .filter(|c| c.rates.is_empty())
        .map(|c| format!("{} {:?}: {}", c.setup, c.work, c.failures.first().map_or("", |e| e)))
        .collect();
    if !failed.is_empty() {
        return Err(format!(
            "{} topology row(s) failed in every round:\n  {}",
            failed.len(),
            failed.join("\n  ")
        )
        .into());
    }
    Ok(())
}

fn write(report: &Report, args: &Args) -> Result<()> {
    std::fs::create_dir_all(&args.out)?;
    if args.pipelines_only {
        for cell in &report.pipelines {
            let rate = match &cell.rate {
                Ok(r) => format!("{r:.0} jobs/s"),
                Err(e) => format!("failed: {e}"),
            };
            println!("{} pipeline c{}: {rate}", cell.backend, cell.claimers);
        }
        return Ok(());
    }
    if args.pickups_only {
        for cell in &report.runtime_pickups {
            let latency = match &cell.latency {
                Ok(p) => format!(
                    "p50 {:.2} ms, p99 {:.2} ms ({} samples)",
                    p.p50.as_secs_f64() * 1e3,
                    p.p99.as_secs_f64() * 1e3,
                    p.n
                ),
                Err(e) => format!("failed: {e}"),
            };
            let handle = match (cell.raw, cell.cross_handle) {
                (true, _) => "raw-SQL ceiling",
                (false, true) => "second handle",
                (false, false) => "worker's handle",
            };
            println!("{} runtime pickup, {handle}: {latency}", cell.backend);
        }
        return Ok(());
    }
    if args.runtime_only {
        let md = markdown::render_runtime_only(report);
        std::fs::write(args.out.join("runtime.md"), &md)?;
        eprintln!("report: wrote {}", args.out.join("runtime.md").display());
        print!("{md}");
        return Ok(());
    }
    let soak_chart = svg::render_soak(report);
    std::fs::write(args.out.join(svg::SOAK_CHART), &soak_chart)?;
    if args.soak_only {
        let md = markdown::render_soak_only(report, svg::SOAK_CHART);
        std::fs::write(args.out.join("soak.md"), &md)?;
        eprintln!("report: wrote {}", args.out.join("soak.md").display());
        print!("{md}");
        return Ok(());
    }
    let md = markdown::render(report, "performance.svg");
    let chart = svg::render(report);
    std::fs::write(args.out.join("performance.md"), &md)?;
    std::fs::write(args.out.join("performance.svg"), &chart)?;
    eprintln!("report: wrote {}", args.out.join("performance.md").display());
    if args.docs {
        let docs = workspace_root().join("docs");
        std::fs::write(docs.join("performance.md"), &md)?;
        std::fs::write(docs.join("performance.svg"), &chart)?;
        std::fs::write(docs.join(svg::SOAK_CHART), &soak_chart)?;
        eprintln!("report: copied to {}", docs.display());
        let readme_path = workspace_root().join("README.md");
        let readme = std::fs::read_to_string(&readme_path)?;
        let section =
            markdown::readme_section(report, "docs/performance.md", "docs/performance.svg");
        std::fs::write(&readme_path, markdown::splice_readme(&readme, &section)?)?;
        eprintln!("report: rewrote the performance section of {}", readme_path.display());
    }
    print!("{md}");
    Ok(())
}
