//! A hung ClickHouse holds nothing but history: with clickhouse-server
//! stopped (SIGSTOP) for 20 s, a job firing every second keeps calling its
//! NATS target; job definitions, the console's job pages and the NATS API
//! answer as usual, with their history part marked unavailable; every
//! history read answers `503 history_unavailable` naming ClickHouse within
//! `--clickhouse-timeout` (3 s, the default) and a second; once ClickHouse
//! goes on, every fire of the hang is in it exactly once.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use jetcron_core::subjects;
use jetcron_testkit::{instant, reqwest, wait_until, Stack, StackOptions};
use serde_json::{json, Value};

/// How long ClickHouse is stopped.
const HANG: Duration = Duration::from_secs(20);
/// The gateway's `--clickhouse-timeout` (the default).
const CLICKHOUSE_TIMEOUT: Duration = jetcron_gateway::sql::reads::DEFAULT_TIMEOUT;
/// How fast an answer that needs no history must come.
const PROMPT: Duration = Duration::from_secs(2);
/// History reads sent at once during the hang.
const BURST: usize = 20;
/// How fast a history read must give up.
const HISTORY_BOUND: Duration = Duration::from_secs(CLICKHOUSE_TIMEOUT.as_secs() + 1);

/// One call of the target: the run it was for and its scheduled time.
#[derive(Debug, Clone)]
struct Call {
    run_id: String,
    scheduled_at: DateTime<Utc>,
}

/// The slowest answer of each kind during the hang, for the report.
#[derive(Debug, Default)]
struct Slowest(BTreeMap<&'static str, (Duration, usize)>);

impl Slowest {
    fn record(&mut self, what: &'static str, took: Duration) {
        let entry = self.0.entry(what).or_default();
        entry.0 = entry.0.max(took);
        entry.1 += 1;
    }
}

/// `future`'s output and how long it took.
async fn timed<T>(future: impl Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let output = future.await;
    (output, started.elapsed())
}

/// A GET that gives up after 10 s: status and body text.
async fn get(http: &reqwest::Client, url: &str) -> (u16, String) {
    let response = http
        .get(url)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// A NATS API request that gives up after 10 s: the reply and its error code.
async fn api(stack: &Stack, subject: &str, body: Value) -> (Value, Option<String>) {
    let reply = tokio::time::timeout(
        Duration::from_secs(10),
        stack
            .client
            .request(subject.to_string(), body.to_string().into()),
    )
    .await
    .unwrap_or_else(|_| panic!("{subject}: no reply within 10 s"))
    .unwrap_or_else(|e| panic!("{subject}: {e}"));
    let code = reply
        .headers
        .as_ref()
        .and_then(|h| h.get(async_nats::service::NATS_SERVICE_ERROR_CODE))
        .map(|v| v.as_str().to_string());
    let json = serde_json::from_slice(&reply.payload).expect("API reply is JSON");
    (json, code)
}

/// A history read's answer while ClickHouse hangs: 503 with the usual
/// error shape, naming ClickHouse and the timeout.
fn assert_history_unavailable(what: &str, status: u16, body: &str) {
    assert_eq!(status, 503, "{what}: {body}");
    let body: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("{what}: {body}"));
    assert_eq!(body["ok"], false, "{what}: {body}");
    assert_eq!(
        body["error"]["code"], "history_unavailable",
        "{what}: {body}"
    );
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("ClickHouse") && message.contains("--clickhouse-timeout"),
        "{what}: {body}"
    );
}

/// Connections to ClickHouse's HTTP port, from `/proc/net/tcp`.
#[derive(Debug, Clone, Copy, Default)]
struct Sockets {
    /// Waiting for the server to accept them (its listen socket's queue).
    accept_queue: usize,
    /// Open from this host (the gateway's and the projector's).
    established: usize,
    /// Closed from this host, not yet by the stopped server (FIN_WAIT).
    closed_by_us: usize,
}

fn clickhouse_sockets(port: u16) -> Sockets {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let port_hex = format!(":{port:04X}");
    let mut sockets = Sockets::default();
    for line in table.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [_, local, remote, state, queues, ..] = fields[..] else {
            continue;
        };
        if local.ends_with(&port_hex) && state == "0A" {
            let rx = queues.split(':').nth(1).unwrap_or("0");
            sockets.accept_queue = usize::from_str_radix(rx, 16).unwrap_or(0);
        }
        if remote.ends_with(&port_hex) {
            match state {
                "01" => sockets.established += 1,
                "04" | "05" => sockets.closed_by_us += 1,
                _ => {}
            }
        }
    }
    sockets
}

/// The target the job calls: replies at once and remembers each call.
async fn serve_target(stack: &Stack) -> Arc<Mutex<Vec<Call>>> {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let mut requests = stack
        .client
        .subscribe("hang.target")
        .await
        .expect("subscribe");
    let client = stack.client.clone();
    let seen = calls.clone();
    tokio::spawn(async move {
        while let Some(message) = requests.next().await {
            let header = |name: &str| {
                message
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(name))
                    .map(|v| v.as_str().to_string())
                    .unwrap_or_default()
            };
            let call = Call {
                run_id: header("Jetcron-Run-Id"),
                scheduled_at: instant(&Value::String(header("Jetcron-Scheduled-At"))),
            };
            seen.lock().expect("calls").push(call);
            if let Some(reply) = message.reply {
                let _ = client.publish(reply, "done".into()).await;
            }
        }
    });
    calls
}

#[tokio::test]
async fn a_hung_clickhouse_holds_nothing_but_history() {
    let stack = Stack::start(StackOptions::default()).await;
    let calls = serve_target(&stack).await;
    stack
        .put_job(r#"{"id":"hang","schedule":"* * * * * *","target":{"type":"nats","subject":"hang.target"}}"#)
        .await;
    let stored = stack
        .wait_for_runs("hang", "succeeded", 3, Duration::from_secs(30))
        .await;
    let known_run = stored[0]["run_id"].as_str().expect("run id").to_string();
    let base = stack.http_base.clone();
    let http = reqwest::Client::new();
    let clickhouse_port: u16 = stack
        .clickhouse
        .url()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("ClickHouse port");

    stack.clickhouse.pause();
    let paused_at = Utc::now();
    let hang_started = Instant::now();
    let mut slowest = Slowest::default();
    let mut history_reads = 0;
    // First, before the gateway knows: a backfill needs ClickHouse (it skips
    // times that ran), so it waits up to the bound, and the NATS API answers
    // meanwhile.
    let an_hour_ago = paused_at - chrono::Duration::hours(1);
    let backfill = {
        let request = json!({
            "id": "hang",
            "from": an_hour_ago.to_rfc3339(),
            "to": (an_hour_ago + chrono::Duration::seconds(5)).to_rfc3339(),
        });
        timed(api(&stack, subjects::API_JOBS_BACKFILL, request))
    };
    let get_beside = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        timed(api(&stack, "jetcron.api.jobs.get", json!({ "id": "hang" }))).await
    };
    let (((backfilled, code), backfill_took), ((reply, _), get_took)) =
        tokio::join!(backfill, get_beside);
    assert_eq!(code.as_deref(), Some("503"), "{backfilled}");
    assert_eq!(
        backfilled["error"]["code"], "history_unavailable",
        "{backfilled}"
    );
    assert_eq!(reply["job"]["id"], "hang", "{reply}");
    assert!(
        backfill_took > Duration::from_secs(1),
        "the backfill waited for ClickHouse ({backfill_took:?}) while jobs.get answered"
    );
    slowest.record("jetcron.api.jobs.backfill", backfill_took);
    slowest.record("jetcron.api.jobs.get beside a backfill", get_took);
    history_reads += 1;
    while hang_started.elapsed() < HANG {
        // Definitions, with their history marked unavailable.
        let ((status, body), took) = timed(get(&http, &format!("{base}/v1/jobs"))).await;
        assert!(
            status == 200 && body.contains("\"hang\""),
            "{status} {body}"
        );
        slowest.record("GET /v1/jobs", took);
        let ((status, body), took) = timed(get(&http, &format!("{base}/v1/jobs/hang"))).await;
        assert_eq!(status, 200, "{body}");
        let job: Value = serde_json::from_str(&body).expect("job JSON");
        assert_eq!(job["job"]["id"], "hang", "{job}");
        assert_eq!(job["next_fires"].as_array().map(Vec::len), Some(5), "{job}");
        assert!(job["last_run"].is_null(), "{job}");
        assert!(
            job["history_unavailable"]
                .as_str()
                .is_some_and(|why| why.starts_with("ClickHouse")),
            "{job}"
        );
        slowest.record("GET /v1/jobs/{id}", took);
        // The console's job pages.
        let ((status, page), took) = timed(get(&http, &format!("{base}/ui/jobs/hang"))).await;
        assert_eq!(status, 200, "{page}");
        assert!(
            page.contains("Runs are unavailable: ClickHouse") && page.contains("* * * * * *"),
            "{page}"
        );
        slowest.record("console job page", took);
        let ((status, page), took) = timed(get(&http, &format!("{base}/ui/jobs"))).await;
        assert!(status == 200 && page.contains("/ui/jobs/hang"), "{page}");
        assert!(
            page.contains("Run figures are unavailable: ClickHouse"),
            "{page}"
        );
        slowest.record("console job list", took);
        // The NATS API.
        let ((reply, code), took) =
            timed(api(&stack, "jetcron.api.jobs.get", json!({ "id": "hang" }))).await;
        assert!(code.is_none() && reply["job"]["id"] == "hang", "{reply}");
        slowest.record("jetcron.api.jobs.get", took);
        let ((reply, code), took) = timed(api(&stack, "jetcron.api.jobs.list", json!({}))).await;
        assert!(code.is_none() && reply["ok"] == true, "{reply}");
        slowest.record("jetcron.api.jobs.list", took);
        // /readyz says so at once.
        let ((status, body), took) = timed(get(&http, &format!("{base}/readyz"))).await;
        assert!(
            status == 503 && body.contains("ClickHouse"),
            "{status} {body}"
        );
        slowest.record("GET /readyz", took);
        // History reads give up within the bound.
        for (what, path) in [
            ("GET /v1/runs?job=", "/v1/runs?job=hang".to_string()),
            ("GET /v1/runs/{id}", format!("/v1/runs/{known_run}")),
            ("GET /v1/stats", "/v1/stats".to_string()),
        ] {
            let ((status, body), took) = timed(get(&http, &format!("{base}{path}"))).await;
            assert_history_unavailable(what, status, &body);
            slowest.record(what, took);
            history_reads += 1;
        }
        let ((status, page), took) = timed(get(&http, &format!("{base}/ui/runs?job=hang"))).await;
        assert!(status == 200 && page.contains("ClickHouse"), "{page}");
        slowest.record("console runs page", took);
        history_reads += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // A burst of history reads while ClickHouse is silent: answered at
    // once, and they do not queue a connection each at the stopped server.
    let before_burst = clickhouse_sockets(clickhouse_port);
    let burst = futures::future::join_all((0..BURST).map(|_| {
        let url = format!("{base}/v1/runs/{known_run}");
        let http = http.clone();
        async move { timed(get(&http, &url)).await }
    }))
    .await;
    for ((status, body), took) in burst {
        assert_history_unavailable("a read of the burst", status, &body);
        slowest.record("GET /v1/runs/{id} (burst)", took);
        history_reads += 1;
    }
    let after_burst = clickhouse_sockets(clickhouse_port);
    let at_the_end = clickhouse_sockets(clickhouse_port);

    stack.clickhouse.resume();
    let resumed_at = Utc::now();
    let hang = hang_started.elapsed();
    eprintln!(
        "ClickHouse stopped for {hang:.1?}; slowest answers (max, count): {:#?}; \
         {history_reads} history reads; connections to ClickHouse before a burst of \
         {BURST} reads: {before_burst:?}, after it: {after_burst:?}, at the end of the \
         hang: {at_the_end:?}",
        slowest.0
    );
    for (what, (took, _)) in &slowest.0 {
        let bound = match *what {
            "GET /v1/runs?job="
            | "GET /v1/runs/{id}"
            | "GET /v1/runs/{id} (burst)"
            | "GET /v1/stats"
            | "console runs page"
            | "jetcron.api.jobs.backfill" => HISTORY_BOUND,
            _ => PROMPT,
        };
        assert!(*took < bound, "{what} took {took:?}, more than {bound:?}");
    }
    // One request at a time while ClickHouse is silent: the burst adds at
    // most one connection to the stopped server's queue, and the whole hang
    // about one per timeout.
    assert!(
        after_burst.accept_queue <= before_burst.accept_queue + 1,
        "the burst queued connections: {before_burst:?} → {after_burst:?}"
    );
    let per_timeout = (hang.as_secs() / CLICKHOUSE_TIMEOUT.as_secs()) as usize;
    assert!(
        at_the_end.accept_queue <= per_timeout + 8,
        "{at_the_end:?} after {hang:?}"
    );

    // The target was called every second of the hang, once per fire.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let in_window = |t: &DateTime<Utc>| *t >= paused_at && *t <= resumed_at;
    let fired: Vec<Call> = calls
        .lock()
        .expect("calls")
        .iter()
        .filter(|c| in_window(&c.scheduled_at))
        .cloned()
        .collect();
    eprintln!("{} fires while ClickHouse was stopped", fired.len());
    let seconds: BTreeSet<i64> = fired.iter().map(|c| c.scheduled_at.timestamp()).collect();
    let run_ids: BTreeSet<String> = fired.iter().map(|c| c.run_id.clone()).collect();
    assert_eq!(seconds.len(), fired.len(), "one call per fire: {fired:?}");
    assert_eq!(run_ids.len(), fired.len(), "one call per run: {fired:?}");
    let (first, last) = (seconds.first().copied(), seconds.last().copied());
    assert!(
        first
            .zip(last)
            .is_some_and(|(f, l)| (l - f + 1) as usize == seconds.len()),
        "a call every second: {seconds:?}"
    );
    assert!(
        fired.len() as u64 + 2 >= hang.as_secs(),
        "{} calls in {hang:?}",
        fired.len()
    );

    // Every fire of the hang reaches ClickHouse, exactly once.
    let listing = format!(
        "/v1/runs?job=hang&limit=500&from={}&to={}",
        paused_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        resumed_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    );
    let listed = wait_until(
        "every fire of the hang stored",
        Duration::from_secs(60),
        || async {
            let (status, page) = stack.get(&listing).await;
            let runs = page["runs"].as_array().filter(|_| status == 200)?.clone();
            let succeeded: BTreeSet<String> = runs
                .iter()
                .filter(|r| r["status"] == "succeeded")
                .map(|r| r["run_id"].as_str().unwrap_or_default().to_string())
                .collect();
            (succeeded == run_ids && runs.len() == run_ids.len()).then_some(runs)
        },
    )
    .await;
    let listed_seconds: BTreeSet<i64> = listed
        .iter()
        .map(|r| instant(&r["scheduled_at"]).timestamp())
        .collect();
    assert_eq!(listed_seconds, seconds, "one run per fire");
    for call in &fired {
        let run = stack.run(&call.run_id).await.expect("the run");
        let kinds: Vec<&str> = run["events"]
            .as_array()
            .expect("events")
            .iter()
            .filter_map(|e| e["kind"].as_str())
            .collect();
        assert_eq!(kinds, ["started", "succeeded"], "{run}");
    }
    stack.stop().await;
}
