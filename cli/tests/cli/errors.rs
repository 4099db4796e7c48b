//! Bad input and an unreachable database: a typed message naming the problem, exit code 1
//! (the request) or 2 (the database), never a panic, and nothing written.

use rstest::rstest;

use crate::common::{run, taskgate};

/// Runs `args` with `TASKGATE_URL` = `url` (when given) and returns (exit code, stderr).
fn attempt(url: Option<&str>, args: &[&str]) -> (i32, String) {
    let mut cmd = taskgate();
    cmd.args(args);
    if let Some(url) = url {
        cmd.env("TASKGATE_URL", url);
    }
    let out = run(&mut cmd);
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    (out.code, out.stderr)
}

#[rstest]
#[case::no_url("no_url", None, &["list"])]
#[case::unknown_scheme("unknown_scheme", Some("redis://localhost/0"), &["list"])]
#[case::bad_postgres_url("bad_postgres_url", Some("postgres://host:notaport/db"), &["get", "x"])]
#[case::bad_sqlite_url("bad_sqlite_url", Some("sqlite://tasks.db?mode=ro"), &["stats"])]
#[case::missing_sqlite_file("missing_sqlite_file", Some("sqlite:///nonexistent/dir/tasks.db"), &["list"])]
#[case::bad_status("bad_status", Some("memory://"), &["list", "--status", "done"])]
#[case::empty_id("empty_id", Some("memory://"), &["get", ""])]
#[case::control_in_id("control_in_id", Some("memory://"), &["cancel", "a\u{7}b"])]
#[case::unknown_task("unknown_task", Some("memory://"), &["get", "01ARZ3NDEKTSV4RRFFQ69G5FAV"])]
#[case::unknown_key("unknown_key", Some("memory://"), &["replay", "--key", "nope"])]
#[case::bad_prefix("bad_prefix", Some("memory://"), &["list", "--prefix", "Bad-Prefix"])]
#[case::bad_age("bad_age", Some("memory://"), &["prune", "--older-than", "7 days"])]
#[case::bad_time("bad_time", Some("memory://"), &["prune", "--before", "yesterday"])]
#[case::prune_needs_cutoff("prune_needs_cutoff", Some("memory://"), &["prune"])]
#[case::unknown_verb("unknown_verb", Some("memory://"), &["frobnicate"])]
fn bad_input_is_named_with_exit_code_1(
    #[case] name: &str,
    #[case] url: Option<&str>,
    #[case] args: &[&str],
) {
    let (code, stderr) = attempt(url, args);
    assert_eq!(code, 1, "{stderr}");
    insta::with_settings!({ prepend_module_to_snapshot => false, snapshot_suffix => name }, {
        insta::assert_snapshot!("error", stderr);
    });
}

#[test]
fn bad_input_as_json_is_one_error_document() {
    let out = run(taskgate().args(["--json", "get", "nope"]).env("TASKGATE_URL", "memory://"));
    assert_eq!(out.code, 1);
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(doc["error"]["code"], "unknown_task");
}

#[test]
fn a_missing_sqlite_file_is_not_created_by_a_read() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tasks.db");
    let url = format!("sqlite://{}", path.display());
    let (code, stderr) = attempt(Some(&url), &["list"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("run `taskgate migrate"), "{stderr}");
    assert!(!path.exists(), "list created {}", path.display());
}

#[rstest]
#[case::postgres("postgres://postgres@127.0.0.1:9/test")]
#[case::mysql("mysql://root@127.0.0.1:9/test")]
fn an_unreachable_database_is_one_message_with_exit_code_2(#[case] url: &str) {
    for args in [&["list"][..], &["migrate", "--status"], &["check", "--filter", "c0"]] {
        let mut all = args.to_vec();
        all.extend(["--url", url]);
        let (code, stderr) = attempt(None, &all);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: one message, got: {stderr}");
        assert!(lines[0].starts_with("taskgate: cannot reach the database at "), "{stderr}");
    }
}

/// A server that accepts every connection on 127.0.0.1 and never sends a byte; returns its
/// port. The accepting thread holds the sockets until the test process ends.
fn silent_server() -> u16 {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("bind a silent server");
    let port = listener.local_addr().expect("its address").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept() {
            held.push(socket);
        }
    });
    port
}

#[rstest]
#[case::postgres("postgres://postgres@127.0.0.1:{port}/test?connect_timeout=1")]
#[case::mysql("mysql://root@127.0.0.1:{port}/test?connect_timeout=1")]
fn a_silent_database_is_given_up_after_the_connect_timeout_the_message_names(#[case] url: &str) {
    let url = url.replace("{port}", &silent_server().to_string());
    for args in [&["list"][..], &["migrate", "--status"]] {
        let mut all = args.to_vec();
        all.extend(["--url", &url]);
        let started = std::time::Instant::now();
        let (code, stderr) = attempt(None, &all);
        let took = started.elapsed();
        assert_eq!(code, 2, "{args:?}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: one message, got: {stderr}");
        assert!(lines[0].starts_with("taskgate: cannot reach the database at "), "{stderr}");
        let bound = "did not answer a connection attempt within 1 s (the connect timeout)";
        assert!(lines[0].contains(bound), "{args:?}: {stderr}");
        // One attempt of 1 s, not one per step of opening the database.
        assert!(took < std::time::Duration::from_secs(5), "{args:?} took {took:?}");
    }
}
