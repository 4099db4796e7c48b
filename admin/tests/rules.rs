//! The admin API's access rules ([`taskgate_admin::testkit`]) as named tests on every
//! backend: memory, SQLite, PostgreSQL (`TASKGATE_PG_URL`) and MariaDB/MySQL
//! (`TASKGATE_MYSQL_URL`), each rule over a real socket against every endpoint of the router
//! it concerns (`cargo test -p taskgate-admin --test rules near_miss` filters). The same rules
//! run against `taskgate serve` in `cli/tests/cli/serve.rs`.

mod memory {
    taskgate_admin::admin_rule_tests!(taskgate_memory::testing::MemoryFactory);
}

mod sqlite {
    taskgate_admin::admin_rule_tests!(taskgate_sqlite::testing::SqliteFactory::new());
}

mod postgres {
    taskgate_admin::admin_rule_tests!(taskgate_postgres::testing::PgFactory::from_env());
}

mod mysql {
    taskgate_admin::admin_rule_tests!(taskgate_mysql::testing::MySqlFactory::from_env());
}

/// The router's table is the API the OpenAPI document describes: every endpoint that needs a
/// token is there with its method, and nothing else is.
#[test]
fn the_routing_table_is_the_documented_api() {
    use taskgate_admin::{endpoints, Access};
    let doc = serde_json::to_value(taskgate_admin::openapi::document()).expect("document");
    let mut documented: Vec<(String, String)> = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("path item").keys() {
            documented.push((method.to_uppercase(), path.clone()));
        }
    }
    documented.sort();
    let mut routed: Vec<(String, String)> = endpoints()
        .iter()
        .filter(|e| e.access != Access::Public)
        .map(|e| (e.method.as_str().to_owned(), e.path.to_owned()))
        .collect();
    routed.sort();
    assert_eq!(documented, routed);
}
