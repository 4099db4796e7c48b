//! How long connecting may take (issue 38): a refused connection is reported at once with its
//! cause by `connect` and by `init` after `connect_lazy`, and `close` does not wait; a
//! server that accepts TCP and never answers is given up after the configured connect timeout
//! by both, with an error that names that timeout (`sqltest::cutproxy::check_connect_bounds`,
//! on real sockets).

use std::sync::Arc;
use std::time::Duration;

use sqltest::cutproxy::{self, Connectors};
use taskgate::{BoxError, BoxFuture, Broker};
use taskgate_mysql::MySqlOptions;

fn options(url: &str, timeout: Option<Duration>) -> taskgate::Result<MySqlOptions> {
    let options = MySqlOptions::from_url(url)?;
    Ok(match timeout {
        Some(timeout) => options.connect_timeout(timeout),
        None => options,
    })
}

const CONNECTORS: Connectors = Connectors {
    url: |port| format!("mysql://root@127.0.0.1:{port}/test"),
    connect: |url, timeout| -> BoxFuture<'static, taskgate::Result<()>> {
        Box::pin(async move { options(&url, timeout)?.connect().await.map(drop) })
    },
    lazy: |url, timeout| Ok(Arc::new(options(&url, timeout)?.connect_lazy()?) as Arc<dyn Broker>),
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_or_silent_server_is_reported_within_its_bound() -> Result<(), BoxError> {
    let took = cutproxy::check_connect_bounds(&CONNECTORS).await?;
    eprintln!(
        "refused: connect {:?}, init {:?}; silent (1 s): connect {:?}, init {:?}",
        took[0], took[1], took[2], took[3]
    );
    Ok(())
}

#[test]
fn the_default_connect_timeout_is_ten_seconds() -> Result<(), BoxError> {
    assert_eq!(taskgate_mysql::DEFAULT_CONNECT_TIMEOUT, Duration::from_secs(10));
    let options = MySqlOptions::from_url("mysql://u@h/db")?;
    assert_eq!(options.get_connect_timeout(), Duration::from_secs(10));
    Ok(())
}
