//! A `jetcron` server process runs without transparent huge pages unless
//! `MIMALLOC_ALLOW_THP` is set (`services/jetcron/src/huge_pages.rs`):
//! read from the kernel's own account of the process, `/proc/PID/status`.

use std::path::Path;
use std::time::Duration;

use jetcron_testkit::{wait_until, without_colour_codes, JetcronProcess, NatsServer};

/// `THP_enabled` of the process once its ticker has started (the switch is
/// thrown before the runtime starts).
async fn huge_pages_of_a_started_ticker(nats: &NatsServer, env: &[(&str, &str)]) -> String {
    let url = nats.url();
    let mut vars = vec![("JETCRON_NATS_URL", url.as_str())];
    vars.extend_from_slice(env);
    let ticker =
        JetcronProcess::start(Path::new(env!("CARGO_BIN_EXE_jetcron")), &["ticker"], &vars);
    wait_until("the ticker started", Duration::from_secs(30), || async {
        without_colour_codes(&ticker.log())
            .contains("ticker started")
            .then_some(())
    })
    .await;
    let pid = ticker.pid().expect("the ticker's pid");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("THP_enabled:"))
        .expect("THP_enabled in /proc/PID/status")
        .trim()
        .to_string()
}

#[tokio::test]
async fn a_server_process_turns_huge_pages_off_unless_mimalloc_is_told() {
    let nats = NatsServer::start();
    assert_eq!(huge_pages_of_a_started_ticker(&nats, &[]).await, "0");
    assert_eq!(
        huge_pages_of_a_started_ticker(&nats, &[("MIMALLOC_ALLOW_THP", "1")]).await,
        "1",
        "MIMALLOC_ALLOW_THP set: the choice is mimalloc's"
    );
}
