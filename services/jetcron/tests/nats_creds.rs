//! `--nats-creds`: a nats-server in operator mode (decentralized JWT
//! authentication, accounts in a `MEMORY` resolver) and `.creds` files as
//! `nsc` writes them, issued by the testkit:
//!
//! - a gateway started with a creds file creates its streams and bucket in
//!   the user's account, and `jetcron req` with the same file puts a job
//!   that is then read back from the bucket;
//! - a creds file whose user was signed by an account the server does not
//!   know is refused at connect: `jetcron req` and a service exit non-zero
//!   and say so.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use jetcron_core::subjects;
use jetcron_io::nats_connect::NatsAuthOptions;
use jetcron_testkit::{free_port, init_test_logging, NatsOperator, NatsServer};

/// `jetcron <args>` against `nats`, with no NATS credentials from the
/// environment: whether it succeeded, and what it printed. Killed after 10 s.
async fn jetcron(nats: &NatsServer, args: &[&str]) -> (bool, String) {
    let output = tokio::time::timeout(
        Duration::from_secs(10),
        command(nats, args).stdout(Stdio::piped()).output(),
    )
    .await
    .unwrap_or_else(|_| panic!("jetcron {args:?} did not finish within 10 s"))
    .expect("run jetcron");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

fn command(nats: &NatsServer, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_jetcron"));
    for var in [
        "JETCRON_NATS_USER",
        "JETCRON_NATS_PASSWORD",
        "JETCRON_NATS_TOKEN",
        "JETCRON_NATS_CREDS",
        "JETCRON_NATS_NKEY",
    ] {
        command.env_remove(var);
    }
    command
        .args(args)
        .env("JETCRON_NATS_URL", nats.url())
        // Nothing listens there: the gateway needs ClickHouse only for run queries.
        .env("JETCRON_CLICKHOUSE_URL", "http://127.0.0.1:9")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write creds file");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creds_file_signs_in_and_one_of_an_unknown_account_is_refused() {
    init_test_logging();
    let mut operator = NatsOperator::new("jetcron-test");
    let account = operator.account("JETCRON");
    let stranger = operator.unregistered_account("STRANGER");
    let nats = NatsServer::start_with_config(&operator.server_config());
    let creds = write(nats.dir(), "jetcron.creds", &account.user_creds("jetcron"));
    let forged = write(nats.dir(), "forged.creds", &stranger.user_creds("jetcron"));
    let creds = creds.to_str().expect("UTF-8 path");
    let forged = forged.to_str().expect("UTF-8 path");

    // A gateway signed in with the creds file makes its streams and bucket.
    let http_addr = format!("127.0.0.1:{}", free_port());
    let gateway_log = nats.dir().join("gateway.log");
    let mut gateway = command(
        &nats,
        &[
            "--nats-creds",
            creds,
            "gateway",
            "--http-addr",
            &http_addr,
            "--missed-scan-interval",
            "0s",
        ],
    )
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&gateway_log).expect("create gateway log"))
    .spawn()
    .expect("start jetcron gateway");
    let gateway_said = || std::fs::read_to_string(&gateway_log).unwrap_or_default();

    // `jetcron req` with the same file puts a job through the gateway's API.
    let job =
        r#"{"id":"creds","schedule":"@daily","target":{"type":"nats","subject":"targets.x"}}"#;
    let put = ["--nats-creds", creds, "req", subjects::API_JOBS_PUT, job];
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        if let Some(status) = gateway.try_wait().expect("gateway status") {
            panic!("the gateway exited ({status}):\n{}", gateway_said());
        }
        let (ok, text) = jetcron(&nats, &put).await;
        if ok {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "jetcron req with the creds file: {text}\ngateway:\n{}",
            gateway_said()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(text.contains(r#""ok":true"#), "{text}");

    // The job is in the bucket of the account the creds file belongs to.
    let auth = NatsAuthOptions {
        creds_file: Some(creds.into()),
        ..Default::default()
    };
    let client = auth
        .connect_options()
        .expect("creds options")
        .connect(nats.url())
        .await
        .expect("connect with the creds file");
    let js = async_nats::jetstream::new(client);
    let bucket = js
        .get_key_value(subjects::JOBS_BUCKET)
        .await
        .expect("the gateway made the jobs bucket");
    for stream in [subjects::DUE_STREAM, subjects::RUNS_STREAM] {
        js.get_stream(stream)
            .await
            .unwrap_or_else(|e| panic!("the gateway made {stream}: {e}"));
    }
    let stored = bucket.get("creds").await.expect("kv get");
    assert!(stored.is_some(), "the job is not in the bucket");

    // A user of an account the server does not know: refused at connect.
    let (ok, text) = jetcron(
        &nats,
        &["--nats-creds", forged, "req", "jetcron.api.jobs.list", "{}"],
    )
    .await;
    assert!(!ok, "a forged creds file was accepted: {text}");
    assert!(text.contains("authorization violation"), "{text}");

    // A service stops at once and names the file it was refused with.
    let started = Instant::now();
    let (ok, text) = jetcron(&nats, &["--nats-creds", forged, "ticker"]).await;
    assert!(!ok, "a ticker ran with a forged creds file: {text}");
    assert!(
        text.contains(&format!("refused creds file {forged} as ticker")),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_secs(5), "{text}");
    // The server looked the user's account up and found none.
    assert!(
        nats.log().contains("Account fetch failed: account missing"),
        "{}",
        nats.log()
    );

    assert!(
        matches!(gateway.try_wait(), Ok(None)),
        "the gateway stopped:\n{}",
        gateway_said()
    );
    gateway.kill().await.expect("stop the gateway");
}
