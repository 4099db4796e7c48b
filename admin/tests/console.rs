//! The web console in a real browser: headless Chromium (Debian's `chromium` and
//! `chromium-driver` packages; `ci/browser.sh` installs them) driven over WebDriver by
//! fantoccini, against the router on a real socket over SQLite and PostgreSQL. An operator
//! enters a token, pauses and resumes a queue, filters and pages the task list, opens a task,
//! cancels and resumes it and sees each status change, watches a step's progress refresh by
//! itself, and follows parents, children and a replay chain. Screenshots land in
//! `<target>/artifacts/` (`console.png` is the task page after the cancel); CI keeps them.
//!
//! Without Chromium and chromedriver the test skips loudly, and fails with
//! `TASKGATE_REQUIRE_BROWSER=1` or `TASKGATE_REQUIRE_DB=1` (as CI sets).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{run, Server};
use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use taskgate::{AuditQuery, Broker, ReplayRequest, Status, Step, Task};

const OPS: &str = "ops-console-secret-0123456789";
/// How long the page may take to show what the test waits for (the auto-refresh runs every
/// 5 s).
const SHOW_LIMIT: Duration = Duration::from_secs(20);

fn config() -> taskgate_admin::AdminConfig {
    taskgate_admin::AdminConfig::from_specs([&*format!("ops:write={OPS}")]).expect("token spec")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    let Some(tools) = Tools::find("sqlite") else { return };
    run(Arc::new(taskgate_sqlite::testing::SqliteFactory::new()), |broker| {
        operate(broker, tools, "sqlite")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let Some(tools) = Tools::find("postgres") else { return };
    run(Arc::new(taskgate_postgres::testing::PgFactory::from_env()), |broker| {
        operate(broker, tools, "postgres")
    })
    .await;
}

/// The browser and its driver on this machine.
#[derive(Clone, Debug)]
struct Tools {
    chrome: PathBuf,
    driver: PathBuf,
}

impl Tools {
    /// Chromium and chromedriver (`TASKGATE_CHROME`, `TASKGATE_CHROMEDRIVER`, else the
    /// Debian paths and `PATH`); `None` after a loud skip, a panic when they are required.
    fn find(test: &str) -> Option<Tools> {
        let chrome = from_env_or_path(
            "TASKGATE_CHROME",
            &["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"],
        );
        let driver = from_env_or_path("TASKGATE_CHROMEDRIVER", &["chromedriver"])
            .or_else(|| existing("/usr/lib/chromium/chromedriver"));
        match (chrome, driver) {
            (Some(chrome), Some(driver)) => Some(Tools { chrome, driver }),
            (chrome, driver) => {
                let missing = format!(
                    "headless Chromium is needed (browser {chrome:?}, chromedriver {driver:?}): \
                     apt-get install -y chromium chromium-driver, or run ci/browser.sh"
                );
                let required = std::env::var("TASKGATE_REQUIRE_BROWSER").is_ok_and(|v| v == "1")
                    || brokertest::require_db();
                if required {
                    panic!("console {test}: {missing}");
                }
                eprintln!("\n*** SKIPPED console {test}: {missing} ***");
                None
            }
        }
    }
}

fn existing(path: impl AsRef<Path>) -> Option<PathBuf> {
    let path = path.as_ref();
    path.is_file().then(|| path.to_owned())
}

fn from_env_or_path(var: &str, names: &[&str]) -> Option<PathBuf> {
    if let Some(value) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        return existing(PathBuf::from(value));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    names.iter().find_map(|name| dirs.iter().find_map(|dir| existing(dir.join(name))))
}

/// Where screenshots go: `TASKGATE_ARTIFACTS`, else `<target dir>/artifacts`.
fn artifacts() -> PathBuf {
    let dir = std::env::var_os("TASKGATE_ARTIFACTS").map(PathBuf::from).unwrap_or_else(|| {
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        tmp.parent().unwrap_or(tmp).join("artifacts")
    });
    std::fs::create_dir_all(&dir).expect("the artifacts directory");
    dir
}

/// chromedriver on a free local port, and one headless session on it; the driver is killed
/// when this drops.
struct Browser {
    client: Client,
    driver: Child,
}

impl Browser {
    async fn start(tools: &Tools, backend: &str) -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let log = std::fs::File::create(artifacts().join(format!("chromedriver-{backend}.log")))
            .expect("the driver's log file");
        let mut driver = Command::new(&tools.driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::from(log.try_clone().expect("log handle")))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", tools.driver.display()));
        let caps = json!({
            "goog:chromeOptions": {
                "binary": tools.chrome,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1400,1000", "--disable-extensions", "--no-first-run",
                ],
            },
        });
        let caps = caps.as_object().expect("an object").clone();
        let url = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector).capabilities(caps.clone()).connect(&url).await {
                Ok(client) => break client,
                Err(e) if started.elapsed() < Duration::from_secs(30) => {
                    if let Ok(Some(status)) = driver.try_wait() {
                        panic!("chromedriver exited ({status}) before a session: {e}");
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => {
                    let _ = driver.kill();
                    panic!("no WebDriver session within 30 s: {e}");
                }
            }
        };
        Browser { client, driver }
    }

    async fn close(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(10), self.client.clone().close()).await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }

    async fn find(&self, css: &str) -> Element {
        self.client
            .wait()
            .at_most(SHOW_LIMIT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css} on the page within {SHOW_LIMIT:?}: {e}"))
    }

    /// The text of `css`; an element the auto-refresh replaced between finding and reading
    /// is found again (as in [`Browser::click`]).
    async fn text(&self, css: &str) -> String {
        let started = Instant::now();
        loop {
            match self.find(css).await.text().await {
                Ok(text) => return text,
                Err(e) if e.to_string().contains("stale element") => {
                    assert!(started.elapsed() < SHOW_LIMIT, "text of {css}: {e}");
                }
                Err(e) => panic!("text of {css}: {e}"),
            }
        }
    }

    /// Clicks `css`; an element the auto-refresh replaced between finding and clicking is
    /// found again.
    async fn click(&self, css: &str) {
        let started = Instant::now();
        loop {
            match self.find(css).await.click().await {
                Ok(()) => return,
                Err(e) if e.to_string().contains("stale element") => {
                    assert!(started.elapsed() < SHOW_LIMIT, "click {css}: {e}");
                }
                Err(e) => panic!("click {css}: {e}"),
            }
        }
    }

    async fn type_into(&self, css: &str, text: &str) {
        let input = self.find(css).await;
        input.clear().await.unwrap_or_else(|e| panic!("clear {css}: {e}"));
        input.send_keys(text).await.unwrap_or_else(|e| panic!("type into {css}: {e}"));
    }

    /// Runs `script` in the page and returns its value.
    async fn js(&self, script: &str) -> Value {
        self.client.execute(script, Vec::new()).await.unwrap_or_else(|e| panic!("{script}: {e}"))
    }

    /// Waits until `script` returns `want` (the page re-renders on its own: answers arrive,
    /// the auto-refresh runs).
    async fn until(&self, what: &str, script: &str, want: Value) {
        let started = Instant::now();
        loop {
            let got = self.js(script).await;
            if got == want {
                return;
            }
            if started.elapsed() > SHOW_LIMIT {
                let status = self.js("return document.getElementById('status').textContent").await;
                panic!("{what}: got {got}, want {want} (status line: {status})");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Clicks `css`, which navigates, and waits until the page has built the new view.
    async fn navigate_by(&self, css: &str) {
        const GENERATION: &str = "return document.getElementById('view').dataset.generation";
        let before = self.js(GENERATION).await;
        self.click(css).await;
        let started = Instant::now();
        while self.js(GENERATION).await == before {
            assert!(started.elapsed() < SHOW_LIMIT, "clicking {css} built no new view");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Opens `hash` of the console (a new view) and waits until the page has built it.
    async fn open(&self, hash: &str) {
        const GENERATION: &str = "return document.getElementById('view').dataset.generation";
        let before = self.js(GENERATION).await;
        let url = format!("{}{hash}", self.base().await);
        self.client.goto(&url).await.unwrap_or_else(|e| panic!("open {url}: {e}"));
        let started = Instant::now();
        while self.js(GENERATION).await == before {
            assert!(started.elapsed() < SHOW_LIMIT, "opening {hash} built no new view");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The `data-id`s of the task list's rows, once they equal `want`.
    async fn rows_become(&self, what: &str, want: &[&str]) {
        let script = "return [...document.querySelectorAll('table.tasks tbody tr')]\
                      .map((r) => r.getAttribute('data-id'))";
        self.until(what, script, json!(want)).await;
    }

    /// Accepts the confirm dialog a button opened.
    async fn confirm(&self) {
        let started = Instant::now();
        while let Err(e) = self.client.accept_alert().await {
            if started.elapsed() > SHOW_LIMIT {
                panic!("no confirm dialog: {e}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("a screenshot");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let path = artifacts().join(name);
        std::fs::write(&path, png).expect("write the screenshot");
        eprintln!("console screenshot: {}", path.display());
        path
    }
}

/// `console<suffix>.png` for SQLite (the screenshot CI keeps), `console-<backend><suffix>.png`
/// for the others.
fn shot_name(backend: &str, suffix: &str) -> String {
    match backend {
        "sqlite" => format!("console{suffix}.png"),
        other => format!("console-{other}{suffix}.png"),
    }
}

/// One browser at a time: the two backends' tests would otherwise start two Chromiums at once.
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A payload that would run script if the page parsed it as HTML.
const HOSTILE: &str =
    r#"{"note":"<img src=x onerror=\"window.pwned=1\"><script>window.pwned=2</script>"}"#;

/// Seeds: mail m1 (email, owner alice, the hostile payload), m2 (email, owner bob), m3
/// (email, owner alice, due tomorrow so it stays pending); etl: ingest ← transform ← report;
/// steps: crunch with a saved step (40 %); billing: the keyed chain inv-7 (completed, then
/// replayed); bulk: 25 noop tasks b00…b24.
async fn seed(broker: &dyn Broker) -> taskgate::Result<String> {
    let mail = |id: &str, owner: &str| Task::new("email", "mail").with_id(id).with_owner(owner);
    broker.enqueue(&mail("m1", "alice").with_payload(HOSTILE.as_bytes().to_vec())).await?;
    broker.enqueue(&mail("m2", "bob")).await?;
    let tomorrow = broker.now().await?.saturating_add(Duration::from_secs(86_400));
    broker.enqueue(&mail("m3", "alice").with_run_at(tomorrow)).await?;
    broker.enqueue(&Task::new("etl", "etl").with_id("ingest")).await?;
    broker
        .enqueue(&Task::new("etl", "etl").with_id("transform").with_depends_on(["ingest"]))
        .await?;
    broker
        .enqueue(&Task::new("etl", "etl").with_id("report").with_depends_on(["transform"]))
        .await?;
    broker.enqueue(&Task::new("crunch", "steps").with_id("crunch")).await?;
    step(broker, 40).await?;
    broker
        .enqueue(&Task::new("invoice", "billing").with_id("inv-7a").with_business_key("inv-7"))
        .await?;
    let claimed = broker.dequeue(&["billing"]).await?;
    broker.ack(&claimed.id, &claimed.lease_token, Some(br#"{"sent":true}"#.to_vec())).await?;
    let replay = broker.replay(ReplayRequest::by_id("inv-7a").allow_completed()).await?;
    let bulk: Vec<Task> =
        (0..25).map(|i| Task::new("noop", "bulk").with_id(format!("b{i:02}"))).collect();
    broker.enqueue_many(&bulk).await?;
    // A dead worker's task: claimed under a 1 s lease (common::run) and never heart-beaten.
    broker.enqueue(&Task::new("crawl", "lost").with_id("lost1")).await?;
    broker.dequeue(&["lost"]).await?;
    // One that sent a heartbeat after its claim: its page shows the heartbeat's time.
    broker.enqueue(&Task::new("crawl", "lost").with_id("beat1")).await?;
    let beating = broker.dequeue(&["lost"]).await?;
    broker.heartbeat(&beating.id, &beating.lease_token).await?;
    Ok(replay.id)
}

/// Claims crunch and saves a step at `progress` percent (it goes back to pending).
async fn step(broker: &dyn Broker, progress: u8) -> taskgate::Result<()> {
    let claimed = broker.dequeue(&["steps"]).await?;
    let step = Step {
        cursor: Some(format!(r#"{{"row":{progress}}}"#).into_bytes()),
        progress: Some(progress),
        message: format!("{progress} of 100 rows"),
        delay: Duration::ZERO,
    };
    broker.save_step(&claimed.id, &claimed.lease_token, step).await
}

async fn operate(
    broker: Arc<dyn Broker>,
    tools: Tools,
    backend: &'static str,
) -> Result<(), taskgate::BoxError> {
    let replay_id = seed(&*broker).await?;
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start(broker.clone(), config()).await;
    let browser = Browser::start(&tools, backend).await;
    let outcome = tokio::time::timeout(
        Duration::from_secs(240),
        walk(&browser, &server, &*broker, &replay_id, backend),
    )
    .await;
    if outcome.is_err() {
        let _ = browser.screenshot(&shot_name(backend, "-timeout")).await;
    }
    browser.close().await;
    server.stop().await;
    outcome.map_err(|_| format!("{backend}: the browser walk did not finish within 240 s"))?;
    Ok(())
}

async fn walk(b: &Browser, server: &Server, broker: &dyn Broker, replay_id: &str, backend: &str) {
    // The root redirects to the console, which asks for a token before calling the API.
    b.client.goto(&server.url("/")).await.expect("open the console");
    let url = b.client.current_url().await.expect("url");
    assert_eq!(url.path(), "/console/", "/ redirects to the console");
    assert_eq!(b.client.title().await.expect("title"), "taskgate console");
    b.until(
        "asks for a token",
        "return document.getElementById('status').textContent",
        json!("Enter a bearer token above (it is kept in this tab only)."),
    )
    .await;
    b.type_into("#token", "wrong-token-0123456789").await;
    b.click("#token-use").await;
    b.until(
        "a wrong token is refused",
        "return document.getElementById('status').textContent",
        json!("unknown token (auth.invalid, HTTP 401)"),
    )
    .await;
    b.type_into("#token", OPS).await;
    b.click("#token-use").await;
    let kept = b
        .js("return [sessionStorage.getItem('taskgate.console.token'), localStorage.length, \
             document.getElementById('token').value]")
        .await;
    assert_eq!(kept, json!([OPS, 0, ""]), "the token lives in sessionStorage only");

    queues(b, broker, backend).await;
    task_list(b, backend).await;
    cancel_and_resume(b, broker, backend).await;
    progress_refreshes(b, broker).await;
    family(b, replay_id, backend).await;
    lease(b, broker, backend).await;
}

/// The dead worker's task: its list row and its page mark the expired lease, and its page says
/// no heartbeat came since the claim; a task that sent one shows the heartbeat's time.
async fn lease(b: &Browser, broker: &dyn Broker, backend: &str) {
    b.js("location.hash = '#/tasks?queue=lost'; return true").await;
    let badge =
        "const r = document.querySelector(\"table.tasks tr[data-id='lost1'] .lease-expired\"); \
                 return r ? r.textContent : null";
    b.until("the list marks the expired lease", badge, json!("lease expired")).await;
    b.js("location.hash = '#/task/lost1'; return true").await;
    let shown = "const l = document.getElementById('lease'); return l ? [l.className, \
                 l.textContent.includes('expired'), l.textContent.includes('the reaper will requeue it')] : null";
    b.until("the task page marks the expired lease", shown, json!(["lease-expired", true, true]))
        .await;
    let beat = "const h = document.getElementById('heartbeat'); return h ? h.textContent : null";
    b.until("no heartbeat since the claim", beat, json!("none since the claim")).await;
    let sent = broker.get("beat1").await.expect("get beat1").last_heartbeat_at;
    let sent = sent.expect("beat1's heartbeat is stored").to_string();
    // The console's time format: `2026-12-07 21:22:37Z` for `2026-12-07T21:22:37.123Z`.
    let (day_time, _millis) = sent.split_once('.').expect("RFC 3339 with milliseconds");
    let want = format!("{}Z", day_time.replace('T', " "));
    b.js("location.hash = '#/task/beat1'; return true").await;
    let shown = "const h = document.getElementById('heartbeat'); \
                 return h ? [h.closest('dd').previousElementSibling.textContent, h.textContent] \
                 : null";
    b.until("beat1's last heartbeat", shown, json!(["Last heartbeat", want])).await;
    b.screenshot(&shot_name(backend, "-lease")).await;
}

async fn queues(b: &Browser, broker: &dyn Broker, backend: &str) {
    b.find("table.queues tr[data-queue='mail']").await;
    let counts = "const r = document.querySelector(\"table.queues tr[data-queue='mail']\"); \
                  return [r.querySelector('.length').textContent, \
                  r.querySelector('.count-pending').textContent, r.querySelector('.state').textContent]";
    b.until("mail's counts", counts, json!(["3", "3", "active"])).await;
    let names = "return [...document.querySelectorAll('table.queues tbody tr')]\
                 .map((r) => r.getAttribute('data-queue'))";
    b.until("every queue", names, json!(["billing", "bulk", "etl", "lost", "mail", "steps"])).await;
    let heads =
        "return [...document.querySelectorAll('table.queues thead th')].map((h) => h.textContent)";
    let heads = b.js(heads).await;
    let want = ["Queue", "Length", "pending", "blocked", "running", "retrying", "completed"];
    let want: Vec<&str> =
        want.into_iter().chain(["failed", "canceled", "Oldest ready", "State", ""]).collect();
    assert_eq!(heads, json!(want), "one column per status, running once (issue 40 item 8)");
    b.screenshot(&shot_name(backend, "-queues")).await;

    b.click("table.queues tr[data-queue='mail'] button.pause-queue").await;
    b.until("mail paused", counts, json!(["3", "3", "paused"])).await;
    assert_eq!(broker.paused_queues().await.expect("paused"), ["mail"]);
    b.click("table.queues tr[data-queue='mail'] button.resume-queue").await;
    b.until("mail resumed", counts, json!(["3", "3", "active"])).await;
    assert!(broker.paused_queues().await.expect("paused").is_empty());
}

async fn task_list(b: &Browser, backend: &str) {
    b.navigate_by("#nav-tasks").await;
    b.type_into("#filters input[name='type']", "email").await;
    b.navigate_by("#apply").await;
    b.rows_become("type email", &["m1", "m2", "m3"]).await;
    b.type_into("#filters input[name='owner']", "alice").await;
    b.navigate_by("#apply").await;
    b.rows_become("type email, owner alice", &["m1", "m3"]).await;

    // Paging: 25 bulk tasks, 10 a page.
    b.navigate_by("#filters a.clear").await;
    b.type_into("#filters input[name='queue']", "bulk").await;
    b.find("#filters select[name='per_page']")
        .await
        .select_by_value("10")
        .await
        .expect("choose 10 a page");
    b.navigate_by("#apply").await;
    let page = |r: std::ops::Range<usize>| r.map(|i| format!("b{i:02}")).collect::<Vec<_>>();
    fn refs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    b.rows_become("bulk page 1", &refs(&page(0..10))).await;
    b.navigate_by("#next").await;
    b.rows_become("bulk page 2", &refs(&page(10..20))).await;
    b.navigate_by("#next").await;
    b.rows_become("bulk page 3", &refs(&page(20..25))).await;
    assert_eq!(b.text("#page").await, "Page 3");
    let next_disabled = b.js("return document.getElementById('next').disabled").await;
    assert_eq!(next_disabled, json!(true), "the last page has no next");

    // Status filter and opening a task from the list.
    b.navigate_by("#filters a.clear").await;
    b.type_into("#filters input[name='queue']", "mail").await;
    b.find("#filters select[name='status']")
        .await
        .select_by_value("pending")
        .await
        .expect("choose pending");
    b.navigate_by("#apply").await;
    b.rows_become("mail, pending", &["m1", "m2", "m3"]).await;
    b.screenshot(&shot_name(backend, "-tasks")).await;
}

async fn cancel_and_resume(b: &Browser, broker: &dyn Broker, backend: &str) {
    b.navigate_by("table.tasks tr[data-id='m1'] a.task-id").await;
    b.until(
        "m1 opens",
        "return document.getElementById('task-status').textContent",
        json!("pending"),
    )
    .await;
    assert_eq!(b.text("#task-id").await, "m1");
    // The hostile payload shows as text and ran nothing.
    let payload = b.text("#data pre").await;
    assert!(payload.contains(r#"<img src=x onerror=\"window.pwned=1\">"#), "{payload}");
    let injected = b
        .js("return [window.pwned === undefined, document.querySelectorAll('#view img, #view script').length]")
        .await;
    assert_eq!(injected, json!([true, 0]), "task data never becomes markup");

    let audited = broker.audit_log(&AuditQuery::default()).await.expect("audit").len();
    b.click("#cancel").await;
    b.confirm().await;
    b.until(
        "m1 canceled",
        "return document.getElementById('task-status').textContent",
        json!("canceled"),
    )
    .await;
    assert_eq!(broker.get("m1").await.expect("m1").status, Status::Canceled);
    let log = broker.audit_log(&AuditQuery { limit: 1, ..Default::default() }).await.expect("log");
    assert_eq!(
        (log[0].actor.as_str(), log[0].action.as_str(), log[0].target.as_str()),
        ("ops", "cancel", "task:m1"),
        "the console's cancel is audited under the token's name"
    );
    let buttons =
        "return ['cancel', 'resume', 'replay'].map((id) => document.getElementById(id).disabled)";
    b.until("a canceled task can be resumed or replayed", buttons, json!([true, false, false]))
        .await;
    b.screenshot(&shot_name(backend, "")).await;

    b.click("#resume").await;
    b.confirm().await;
    b.until(
        "m1 resumed",
        "return document.getElementById('task-status').textContent",
        json!("pending"),
    )
    .await;
    let m1 = broker.get("m1").await.expect("m1");
    assert_eq!((m1.status, m1.resumes), (Status::Pending, 1));
    let after = broker.audit_log(&AuditQuery::default()).await.expect("audit").len();
    assert_eq!(after, audited + 2, "one audit row per click");
}

async fn progress_refreshes(b: &Browser, broker: &dyn Broker) {
    b.open("#/task/crunch").await;
    b.until(
        "crunch's step",
        "const p = document.getElementById('progress-text'); \
             return p && [p.textContent, document.getElementById('step-message').textContent]",
        json!(["40%", "40 of 100 rows"]),
    )
    .await;
    assert!(b.text("#steps pre").await.contains("\"row\": 40"));
    // The next step lands behind the page's back; the auto-refresh shows it.
    step(broker, 80).await.expect("the next step");
    b.until(
        "the auto-refresh shows 80 %",
        "const p = document.getElementById('progress-text'); \
             return p && p.textContent",
        json!("80%"),
    )
    .await;
    assert_eq!(b.text("#step-count").await, "2");
}

async fn family(b: &Browser, replay_id: &str, backend: &str) {
    b.open("#/task/transform").await;
    let ids = |section: &str| {
        format!(
            "return [...document.querySelectorAll('#{section} tbody tr td:first-child')]\
             .map((c) => c.textContent)"
        )
    };
    b.until("transform's parents", &ids("parents"), json!(["ingest"])).await;
    b.until("transform's children", &ids("children"), json!(["report"])).await;
    b.screenshot(&shot_name(backend, "-family")).await;
    b.navigate_by("#children a.task-id").await;
    b.until(
        "report opens",
        "return document.getElementById('task-id').textContent",
        json!("report"),
    )
    .await;
    b.until("report's parents", &ids("parents"), json!(["transform"])).await;
    b.until(
        "report has no children",
        "return document.querySelector('#children').textContent",
        json!("No children."),
    )
    .await;

    b.open(&format!("#/task/{replay_id}")).await;
    let this = format!("{replay_id} (this)");
    b.until("the replay chain", &ids("chain"), json!(["inv-7a", this])).await;
    b.navigate_by("#chain a.task-id").await;
    b.until(
        "the first execution",
        "return document.getElementById('task-status').textContent",
        json!("completed"),
    )
    .await;
    assert!(b.text("#data").await.contains("\"sent\": true"), "the result shows");
}

impl Browser {
    /// The console's URL without its hash.
    async fn base(&self) -> String {
        let mut url = self.client.current_url().await.expect("url");
        url.set_fragment(None);
        url.to_string()
    }
}
