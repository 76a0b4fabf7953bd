//! The replicated ticker, as separate `jetcron ticker` processes on a real
//! nats-server: exactly one stored due event per (job, scheduled time) through
//! kill -9, restarts beyond the duplicate window, and full outages under each
//! misfire policy. Every test reads back the whole `JETCRON_DUE` stream (no
//! executor consumes it) and asserts the exact set.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use async_nats::jetstream;
use chrono::{DateTime, Utc};
use jetcron_core::events::DueEvent;
use jetcron_core::subjects;
use jetcron_io::topology::{self, TopologyOptions};
use jetcron_testkit::NatsServer;

/// One `jetcron ticker` process; killed on drop.
struct TickerProcess {
    child: Option<Child>,
    log: PathBuf,
}

impl TickerProcess {
    fn start(nats: &NatsServer, name: &str, late_threshold: &str) -> Self {
        Self::start_with(nats, name, late_threshold, "1500ms", "250ms")
    }

    fn start_with(
        nats: &NatsServer,
        name: &str,
        late_threshold: &str,
        ttl: &str,
        renew: &str,
    ) -> Self {
        Self::start_snapshotting(nats, name, late_threshold, ttl, renew, "30s")
    }

    /// With `--snapshot-every snapshot_every` ("0s": no snapshots).
    fn start_snapshotting(
        nats: &NatsServer,
        name: &str,
        late_threshold: &str,
        ttl: &str,
        renew: &str,
        snapshot_every: &str,
    ) -> Self {
        let log =
            std::env::temp_dir().join(format!("jetcron-ticker-{}-{name}.log", std::process::id()));
        let file = std::fs::File::create(&log).expect("ticker log");
        let child = Command::new(env!("CARGO_BIN_EXE_jetcron"))
            .args(["ticker", "--lease-ttl", ttl, "--lease-renew", renew])
            .args(["--late-threshold", late_threshold, "--replica-id", name])
            .args(["--snapshot-every", snapshot_every])
            .env("JETCRON_NATS_URL", nats.url())
            .env("RUST_LOG", "info,async_nats=warn")
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start jetcron ticker");
        Self {
            child: Some(child),
            log,
        }
    }

    fn kill_9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL");
            child.wait().expect("reap");
        }
    }

    fn terminate(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
            let status = child.wait().expect("reap");
            assert!(
                status.success(),
                "ticker exited with {status}: {}",
                self.log_text()
            );
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for TickerProcess {
    fn drop(&mut self) {
        self.kill_9();
        let _ = std::fs::remove_file(&self.log);
    }
}

async fn setup(nats: &NatsServer, duplicate_window: Duration) -> jetstream::Context {
    let js = jetstream::new(nats.client().await);
    let options = TopologyOptions {
        due_duplicate_window: duplicate_window,
        ..TopologyOptions::default()
    };
    topology::ensure_jobs_bucket(&js, &options)
        .await
        .expect("bucket");
    topology::ensure_due_stream(&js, &options)
        .await
        .expect("due stream");
    topology::ensure_runs_stream(&js, &options)
        .await
        .expect("runs stream");
    js
}

/// Store job `id` (its target `svc.<id>`, `extra` fields appended); its
/// revision.
async fn put_job(js: &jetstream::Context, id: &str, schedule: &str, extra: &str) -> u64 {
    let kv = js
        .get_key_value(subjects::JOBS_BUCKET)
        .await
        .expect("bucket");
    let value = format!(
        r#"{{"schedule":"{schedule}","target":{{"type":"nats","subject":"svc.{id}"}}{extra}}}"#
    );
    kv.put(id, value.into()).await.expect("put job")
}

/// (scheduled time, store time) of every stored due event, by job.
type StoredFires = BTreeMap<String, Vec<(DateTime<Utc>, DateTime<Utc>)>>;

/// Every stored due event: (job id → scheduled times in store order), and the store time of each.
async fn stored_due_events(js: &jetstream::Context) -> StoredFires {
    let mut by_job: StoredFires = BTreeMap::new();
    for (event, stored) in due_events(js).await {
        by_job
            .entry(event.job_id)
            .or_default()
            .push((event.scheduled_at, stored));
    }
    by_job
}

/// Every stored due event with its store time, in store order.
async fn due_events(js: &jetstream::Context) -> Vec<(DueEvent, DateTime<Utc>)> {
    let mut stream = js
        .get_stream(subjects::DUE_STREAM)
        .await
        .expect("due stream");
    let state = stream.info().await.expect("info").state.clone();
    let mut events = Vec::new();
    if state.messages == 0 {
        return events;
    }
    for seq in state.first_sequence..=state.last_sequence {
        let Ok(message) = stream.get_raw_message(seq).await else {
            continue;
        };
        let event: DueEvent = serde_json::from_slice(&message.payload).expect("due event");
        events.push((event, message.time));
    }
    events
}

/// Wait until the snapshot store holds an object for every shard of
/// `shards`.
async fn wait_for_snapshots(js: &jetstream::Context, shards: Vec<u32>, what: &str) {
    jetcron_testkit::wait_until(what, Duration::from_secs(20), || {
        let (js, shards) = (js.clone(), shards.clone());
        async move { (snapshot_objects(&js, &shards).await.len() == shards.len()).then_some(()) }
    })
    .await;
}

/// The object id (nuid) of each of `shards`' snapshots that is written
/// (a new one at each write); none before the store exists.
async fn snapshot_objects(js: &jetstream::Context, shards: &[u32]) -> BTreeMap<u32, String> {
    let mut objects = BTreeMap::new();
    let Ok(store) = js.get_object_store(subjects::TICKER_SNAPSHOTS_BUCKET).await else {
        return objects;
    };
    for &shard in shards {
        let name = jetcron_ticker::snapshot_store::object_name(shard);
        if let Ok(info) = store.info(name.as_str()).await {
            objects.insert(shard, info.nuid);
        }
    }
    objects
}

/// Assert no (job, scheduled time) was stored twice and, per job, times step
/// by exactly `step` seconds with no gap: nothing lost, nothing doubled.
fn assert_exactly_once_and_contiguous(events: &StoredFires, step: i64) {
    for (job, fires) in events {
        let times: Vec<DateTime<Utc>> = fires.iter().map(|(t, _)| *t).collect();
        let distinct: BTreeSet<_> = times.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            times.len(),
            "{job}: a fire was stored twice: {times:?}"
        );
        let sorted: Vec<_> = distinct.into_iter().collect();
        for pair in sorted.windows(2) {
            assert_eq!(
                (pair[1] - pair[0]).num_seconds(),
                step,
                "{job}: fires missing between {} and {}",
                pair[0],
                pair[1]
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn killing_a_replica_loses_and_duplicates_nothing() {
    let nats = NatsServer::start();
    let js = setup(&nats, Duration::from_secs(600)).await;
    let jobs: Vec<String> = (0..48).map(|i| format!("busy-{i}")).collect();
    for id in &jobs {
        put_job(&js, id, "* * * * * *", "").await;
    }
    let mut replicas: Vec<TickerProcess> = ["r0", "r1", "r2"]
        .iter()
        .map(|name| TickerProcess::start(&nats, name, "60s"))
        .collect();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let killed_at = Utc::now();
    replicas[0].kill_9();
    tokio::time::sleep(Duration::from_secs(5)).await;
    replicas[1].terminate();
    replicas[2].terminate();
    let stopped_at = Utc::now();

    let events = stored_due_events(&js).await;
    assert_eq!(
        events.len(),
        jobs.len(),
        "every job fired: {:?}",
        events.keys()
    );
    assert_exactly_once_and_contiguous(&events, 1);
    for (job, fires) in &events {
        let last = fires.iter().map(|(t, _)| *t).max().expect("fires");
        let first = fires.iter().map(|(t, _)| *t).min().expect("fires");
        assert!(first < killed_at, "{job} fired before the kill");
        assert!(
            last > stopped_at - chrono::Duration::seconds(3),
            "{job} stopped firing after the kill (last {last}, stopped {stopped_at})"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn restart_after_longer_than_the_duplicate_window_repeats_nothing() {
    let nats = NatsServer::start();
    // A 2 s duplicate window: the restart below comes long after it.
    let js = setup(&nats, Duration::from_secs(2)).await;
    for i in 0..24 {
        put_job(&js, &format!("steady-{i}"), "* * * * * *", "").await;
    }
    // The first replica checkpoints only every 20 s: when it is killed, every
    // fire it stored is newer than its checkpoint, and the restart comes after
    // the duplicate window forgot them. Only the takeover check prevents repeats.
    let mut first = TickerProcess::start_with(&nats, "solo-a", "60s", "60s", "20s");
    tokio::time::sleep(Duration::from_millis(3_700)).await;
    first.kill_9();
    let stored_by_first: usize = stored_due_events(&js).await.values().map(Vec::len).sum();
    assert!(
        stored_by_first >= 24 * 2,
        "the first replica fired: {stored_by_first}"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut second = TickerProcess::start(&nats, "solo-b", "60s");
    tokio::time::sleep(Duration::from_secs(4)).await;
    second.terminate();

    let events = stored_due_events(&js).await;
    assert_eq!(events.len(), 24);
    // Late fires of the outage (under the 60 s threshold) are all emitted,
    // and none of the fires the killed process stored is emitted again.
    assert_exactly_once_and_contiguous(&events, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn full_outage_follows_each_misfire_policy() {
    let nats = NatsServer::start();
    let js = setup(&nats, Duration::from_secs(600)).await;
    // Three jobs in one shard, so one recovery decides all three at the same instant.
    let shard = jetcron_ticker::shards::shard_of("policy-0");
    let mut ids = (0..)
        .map(|i| format!("policy-{i}"))
        .filter(|id| jetcron_ticker::shards::shard_of(id) == shard);
    let (skip, once, all) = (
        ids.next().expect("id"),
        ids.next().expect("id"),
        ids.next().expect("id"),
    );
    put_job(&js, &skip, "*/2 * * * * *", r#","misfire":"skip""#).await;
    put_job(&js, &once, "*/2 * * * * *", r#","misfire":"fire_once""#).await;
    put_job(&js, &all, "*/2 * * * * *", r#","misfire":"fire_all""#).await;

    let mut first = TickerProcess::start(&nats, "outage-a", "2s");
    tokio::time::sleep(Duration::from_secs(4)).await;
    first.terminate();
    let before = stored_due_events(&js).await;
    tokio::time::sleep(Duration::from_secs(7)).await;
    let mut second = TickerProcess::start(&nats, "outage-b", "2s");
    tokio::time::sleep(Duration::from_secs(4)).await;
    second.terminate();
    let after = stored_due_events(&js).await;

    let times = |job: &str| -> Vec<DateTime<Utc>> {
        let mut t: Vec<_> = after[job].iter().map(|(t, _)| *t).collect();
        t.sort();
        t
    };
    let new_fires = |job: &str| after[job].len() - before.get(job).map_or(0, Vec::len);
    // fire_all: every missed time, so no gap at all.
    let mut only_all = BTreeMap::new();
    only_all.insert(all.clone(), after[&all].clone());
    assert_exactly_once_and_contiguous(&only_all, 2);
    // skip: a gap of several missed times.
    let skip_times = times(&skip);
    assert!(
        skip_times
            .windows(2)
            .any(|p| (p[1] - p[0]).num_seconds() >= 6),
        "{skip_times:?}"
    );
    // fire_once: exactly one catch-up more than skip, in the same recovery.
    assert_eq!(
        new_fires(&once),
        new_fires(&skip) + 1,
        "once {:?} skip {skip_times:?}",
        times(&once)
    );
    for job in [&skip, &once, &all] {
        let distinct: BTreeSet<_> = times(job).into_iter().collect();
        assert_eq!(
            distinct.len(),
            after[job.as_str()].len(),
            "{job} stored a fire twice"
        );
    }
}

/// Store times of every due event of `job` with the scheduled time, sorted by scheduled time.
fn fires_of(events: &StoredFires, job: &str) -> Vec<DateTime<Utc>> {
    let mut times: Vec<_> = events
        .get(job)
        .map(|f| f.iter().map(|(t, _)| *t).collect())
        .unwrap_or_default();
    times.sort();
    times
}

#[tokio::test(flavor = "multi_thread")]
async fn edits_and_deletes_take_effect_past_the_lookahead_across_replicas() {
    let nats = NatsServer::start();
    let js = setup(&nats, Duration::from_secs(600)).await;
    let _replicas: Vec<TickerProcess> = ["e0", "e1", "e2"]
        .iter()
        .map(|name| TickerProcess::start(&nats, name, "60s"))
        .collect();
    for i in 0..12 {
        put_job(&js, &format!("edited-{i}"), "* * * * * *", "").await;
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    for i in 0..12 {
        put_job(&js, &format!("edited-{i}"), "*/5 * * * * *", "").await;
    }
    let edited_at = Utc::now();
    tokio::time::sleep(Duration::from_secs(7)).await;
    let kv = js
        .get_key_value(subjects::JOBS_BUCKET)
        .await
        .expect("bucket");
    for i in 0..12 {
        kv.delete(format!("edited-{i}")).await.expect("delete");
    }
    let deleted_at = Utc::now();
    tokio::time::sleep(Duration::from_secs(4)).await;

    let events = stored_due_events(&js).await;
    // Within a second, past the fires already stored ahead (the default
    // lookahead of one node, 1.5 s: an edit applies to fires after it, a
    // delete kills those through markers the executor reads).
    let grace = chrono::Duration::milliseconds(2500);
    for i in 0..12 {
        let job = format!("edited-{i}");
        let times = fires_of(&events, &job);
        let distinct: BTreeSet<_> = times.iter().collect();
        assert_eq!(distinct.len(), times.len(), "{job}: a fire stored twice");
        let after_edit: Vec<_> = times.iter().filter(|t| **t > edited_at + grace).collect();
        assert!(
            !after_edit.is_empty(),
            "{job}: the new schedule never fired"
        );
        for t in &after_edit {
            assert_eq!(
                t.timestamp() % 5,
                0,
                "{job}: old schedule fired at {t} after the edit"
            );
        }
        assert!(
            times.iter().all(|t| *t <= deleted_at + grace),
            "{job}: fired after its delete: {times:?}"
        );
        assert!(
            times.iter().filter(|t| **t < edited_at).count() >= 3,
            "{job}: {times:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn pause_stops_fires_and_resume_catches_up_once() {
    let nats = NatsServer::start();
    let js = setup(&nats, Duration::from_secs(600)).await;
    let _replicas: Vec<TickerProcess> = ["p0", "p1", "p2"]
        .iter()
        .map(|name| TickerProcess::start(&nats, name, "60s"))
        .collect();
    put_job(&js, "napper", "*/2 * * * * *", "").await;
    put_job(&js, "skipper", "*/2 * * * * *", r#","misfire":"skip""#).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    put_job(&js, "napper", "*/2 * * * * *", r#","paused":true"#).await;
    put_job(
        &js,
        "skipper",
        "*/2 * * * * *",
        r#","misfire":"skip","paused":true"#,
    )
    .await;
    let paused_at = Utc::now();
    tokio::time::sleep(Duration::from_secs(7)).await;
    let before_resume = stored_due_events(&js).await;
    put_job(&js, "napper", "*/2 * * * * *", "").await;
    put_job(&js, "skipper", "*/2 * * * * *", r#","misfire":"skip""#).await;
    let resumed_at = Utc::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let events = stored_due_events(&js).await;

    // Fires stored ahead before the pause (the default lookahead of one
    // node, 1.5 s) stay in the stream; the executor finds them killed.
    let grace = chrono::Duration::milliseconds(2500);
    for job in ["napper", "skipper"] {
        let paused_fires: Vec<_> = fires_of(&before_resume, job)
            .into_iter()
            .filter(|t| *t > paused_at + grace)
            .collect();
        assert!(
            paused_fires.is_empty(),
            "{job} fired while paused: {paused_fires:?}"
        );
    }
    // Missed while paused: fire_once replays one (the latest), skip none. Both
    // resumed at the same moment, so after the pause fire_once has exactly
    // one fire more than skip (counted up to a time both have passed).
    let after_pause = |job: &str| {
        fires_of(&events, job)
            .into_iter()
            .filter(|t| *t > paused_at + grace && *t <= resumed_at + chrono::Duration::seconds(2))
            .count()
    };
    assert_eq!(
        after_pause("napper"),
        after_pause("skipper") + 1,
        "napper {:?} skipper {:?}",
        fires_of(&events, "napper"),
        fires_of(&events, "skipper")
    );
    for job in ["napper", "skipper"] {
        let times = fires_of(&events, job);
        assert!(
            times.iter().any(|t| *t > resumed_at),
            "{job} did not resume"
        );
        let distinct: BTreeSet<_> = times.iter().collect();
        assert_eq!(distinct.len(), times.len(), "{job}: a fire stored twice");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_resume_after_nats_restarts_without_loss_or_duplicates() {
    let mut nats = NatsServer::start();
    let js = setup(&nats, Duration::from_secs(600)).await;
    for i in 0..24 {
        put_job(&js, &format!("survivor-{i}"), "* * * * * *", "").await;
    }
    let mut replicas: Vec<TickerProcess> = ["n0", "n1", "n2"]
        .iter()
        .map(|name| TickerProcess::start(&nats, name, "60s"))
        .collect();
    tokio::time::sleep(Duration::from_secs(4)).await;
    nats.kill();
    tokio::time::sleep(Duration::from_secs(3)).await;
    nats.restart();
    tokio::time::sleep(Duration::from_secs(8)).await;
    for replica in &mut replicas {
        replica.terminate();
    }
    let stopped_at = Utc::now();
    let js = jetstream::new(nats.client().await);
    let events = stored_due_events(&js).await;
    assert_eq!(events.len(), 24);
    assert_exactly_once_and_contiguous(&events, 1);
    for (job, fires) in &events {
        let last = fires.iter().map(|(t, _)| *t).max().expect("fires");
        assert!(
            last > stopped_at - chrono::Duration::seconds(3),
            "{job} did not resume: last {last}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_rejoining_after_the_duplicate_window_repeats_nothing() {
    let nats = NatsServer::start();
    // A 2 s duplicate window: the rejoin (and the rebalance it causes) comes after it.
    let js = setup(&nats, Duration::from_secs(2)).await;
    for i in 0..32 {
        put_job(&js, &format!("rejoin-{i}"), "* * * * * *", "").await;
    }
    let mut replicas: Vec<TickerProcess> = ["j0", "j1", "j2"]
        .iter()
        .map(|name| TickerProcess::start(&nats, name, "60s"))
        .collect();
    tokio::time::sleep(Duration::from_secs(4)).await;
    replicas[0].kill_9();
    tokio::time::sleep(Duration::from_secs(5)).await;
    replicas[0] = TickerProcess::start(&nats, "j0-again", "60s");
    tokio::time::sleep(Duration::from_secs(6)).await;
    for replica in &mut replicas {
        replica.terminate();
    }
    let events = stored_due_events(&js).await;
    assert_eq!(events.len(), 32);
    assert_exactly_once_and_contiguous(&events, 1);
}

/// Owner of each of the 16 shards, as the ticker bucket says.
async fn shard_owners(js: &jetstream::Context) -> BTreeMap<u32, String> {
    let mut owners = BTreeMap::new();
    // The tickers create the bucket: none yet, no owners yet.
    let Ok(kv) = js.get_key_value(subjects::TICKER_BUCKET).await else {
        return owners;
    };
    for shard in 0..16u32 {
        if let Ok(Some(value)) = kv.get(format!("shard.{shard}")).await {
            let record: serde_json::Value = serde_json::from_slice(&value).unwrap_or_default();
            owners.insert(
                shard,
                record["owner"].as_str().unwrap_or_default().to_string(),
            );
        }
    }
    owners
}

/// With the default lease (TTL 5 s, renewed every second): a SIGKILLed
/// ticker's shards are taken over within the TTL, also when it is killed
/// again while it restarts; once back it gets a fair share (8 of 16 with two
/// replicas, give or take one) and no fire is lost or stored twice on the
/// way. Fire lag here is store time minus scheduled time (no lookahead).
#[tokio::test(flavor = "multi_thread")]
async fn a_ticker_killed_twice_is_taken_over_within_the_ttl_and_gets_its_share_back() {
    let nats = NatsServer::start();
    let js = setup(&nats, Duration::from_secs(600)).await;
    let jobs: Vec<String> = (0..48).map(|i| format!("takeover-{i}")).collect();
    for id in &jobs {
        put_job(&js, id, "* * * * * *", "").await;
    }
    let start = |name| TickerProcess::start_with(&nats, name, "60s", "5s", "1s");
    let mut r0 = start("r0");
    let mut r1 = start("r1");
    // Both own shards before the first kill.
    let split = jetcron_testkit::wait_until("two owners", Duration::from_secs(30), || {
        let js = js.clone();
        async move {
            let owners = shard_owners(&js).await;
            let r0 = owners.values().filter(|o| *o == "r0").count();
            let r1 = owners.values().filter(|o| *o == "r1").count();
            (r0 + r1 == 16 && r0.abs_diff(r1) <= 2).then_some((r0, r1))
        }
    })
    .await;
    println!(
        "takeover: shards before the kill: r0 {}, r1 {}",
        split.0, split.1
    );

    let killed_at = Utc::now();
    r0.kill_9();
    tokio::time::sleep(Duration::from_secs(2)).await;
    r0 = start("r0");
    // Killed again while it restarts, before its first lease.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed_again_at = Utc::now();
    r0.kill_9();
    let taken_over = jetcron_testkit::wait_until("r1 owns all", Duration::from_secs(15), || {
        let js = js.clone();
        async move {
            let owners = shard_owners(&js).await;
            owners
                .values()
                .all(|o| o == "r1")
                .then(|| (Utc::now() - killed_again_at).num_milliseconds() as f64 / 1000.0)
        }
    })
    .await;
    println!("takeover: every shard owned by r1 {taken_over:.3}s after the second kill");

    // Back for good: a fair share again, without a gap.
    r0 = start("r0");
    let back_at = Utc::now();
    let share = jetcron_testkit::wait_until("r0 gets its share", Duration::from_secs(60), || {
        let js = js.clone();
        async move {
            let owners = shard_owners(&js).await;
            let r0 = owners.values().filter(|o| *o == "r0").count();
            (7..=9).contains(&r0).then_some(r0)
        }
    })
    .await;
    println!(
        "takeover: r0 owns {share} shards {:.1}s after its restart",
        (Utc::now() - back_at).num_milliseconds() as f64 / 1000.0
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    r0.terminate();
    r1.terminate();

    let events = stored_due_events(&js).await;
    assert_eq!(events.len(), jobs.len(), "every job fired");
    assert_exactly_once_and_contiguous(&events, 1);
    let lag: Vec<f64> = events
        .values()
        .flatten()
        .filter(|(scheduled, _)| *scheduled > killed_at)
        .map(|(scheduled, stored)| (*stored - *scheduled).num_milliseconds() as f64 / 1000.0)
        .collect();
    let worst = lag.iter().copied().fold(0.0, f64::max);
    println!(
        "takeover: fire lag after the kill: max {worst:.3}s over {} fires",
        lag.len()
    );
    // A dead owner's shards are stale after TTL - 2 x renew = 3 s; the new
    // owner catches up at once: within the TTL.
    assert!(
        worst <= 5.0,
        "fires stored {worst:.3}s late, over the 5 s TTL"
    );
    assert!(taken_over <= 5.0, "taken over after {taken_over:.3}s");
}

/// The sum of `field` over every log line saying `message`.
fn sum_logged(log: &str, message: &str, field: &str) -> usize {
    log.lines()
        .filter(|line| line.contains(message))
        .filter_map(|line| jetcron_testkit::last_logged_number(line, message, field))
        .sum()
}

/// Once ownership settles each replica holds only the jobs of the shards
/// it owns; the survivor of a SIGKILL loads the dead one's shards by a pass
/// over the bucket, with a job added and one deleted meanwhile, and every
/// fire is stored exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn replicas_hold_only_their_shards_and_load_a_dead_ones() {
    hold_own_shards_and_take_a_dead_ones_over(TakeOver::WholeBucket).await;
}

/// The same with shard snapshots: the survivor reads the dead replica's
/// shards from the snapshots it wrote and the bucket's changes since (a job
/// added, one deleted, one edited after them), and every fire is stored
/// exactly once, the edited job's from its new revision.
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_replicas_shards_are_loaded_from_its_snapshots() {
    hold_own_shards_and_take_a_dead_ones_over(TakeOver::Snapshots).await;
}

/// How the survivor finds the jobs of a dead replica's shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TakeOver {
    WholeBucket,
    Snapshots,
}

async fn hold_own_shards_and_take_a_dead_ones_over(take_over: TakeOver) {
    let nats = NatsServer::start();
    let js = setup(&nats, Duration::from_secs(600)).await;
    let jobs: Vec<String> = (0..48).map(|i| format!("held-{i}")).collect();
    for id in &jobs {
        put_job(&js, id, "* * * * * *", "").await;
    }
    let snapshot_every = match take_over {
        TakeOver::WholeBucket => "0s",
        TakeOver::Snapshots => "1s",
    };
    // TTL 1.5 s: shards owned elsewhere are dropped after 3 s of quiet.
    let start = |name| {
        TickerProcess::start_snapshotting(&nats, name, "60s", "1500ms", "250ms", snapshot_every)
    };
    let mut r0 = start("r0");
    let mut r1 = start("r1");
    let dropped = "jobs of shards owned elsewhere dropped";
    let (owners, held) = jetcron_testkit::wait_until(
        "each replica holds its own shards",
        Duration::from_secs(30),
        || {
            let js = js.clone();
            let logs = (r0.log_text(), r1.log_text());
            let jobs = jobs.clone();
            async move {
                let held = (
                    jetcron_testkit::last_logged_number(&logs.0, dropped, "held")?,
                    jetcron_testkit::last_logged_number(&logs.1, dropped, "held")?,
                );
                let owners = shard_owners(&js).await;
                let owned_by = |name: &str| {
                    jobs.iter()
                        .filter(|id| {
                            let shard = jetcron_ticker::shards::shard_of(id);
                            owners.get(&shard).is_some_and(|o| o == name)
                        })
                        .count()
                };
                (held == (owned_by("r0"), owned_by("r1")) && held.0 + held.1 == jobs.len())
                    .then_some((owners, held))
            }
        },
    )
    .await;
    println!("holding: r0 holds {} jobs, r1 {}", held.0, held.1);
    assert!(held.0 > 0 && held.1 > 0, "both own shards: {held:?}");

    let r0_shard_ids: Vec<u32> = owners
        .iter()
        .filter(|(_, o)| *o == "r0")
        .map(|(shard, _)| *shard)
        .collect();
    let mut written_by_r0 = BTreeMap::new();
    if take_over == TakeOver::Snapshots {
        // Each of r0's shards has its snapshot before r0 dies, and r0 has
        // no write left to make (none in two seconds, writes go every 1 s).
        wait_for_snapshots(&js, r0_shard_ids.clone(), "r0 wrote its shards' snapshots").await;
        written_by_r0 = snapshot_objects(&js, &r0_shard_ids).await;
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let now = snapshot_objects(&js, &r0_shard_ids).await;
            if now == written_by_r0 {
                break;
            }
            written_by_r0 = now;
        }
    }
    let killed_at = Utc::now();
    // r1's log from here on tells what it did after the kill.
    let logged_before_kill = r1.log_text().len();
    let r0_shards = r0_shard_ids.len();
    r0.kill_9();
    // Changes before the survivor takes the dead replica's shards over (a
    // pass starts once their lease has expired, a second or more later).
    let in_r0 = |id: &String| {
        owners
            .get(&jetcron_ticker::shards::shard_of(id))
            .is_some_and(|o| o == "r0")
    };
    let added = (0..)
        .map(|i| format!("added-{i}"))
        .find(|id| in_r0(id))
        .expect("a key of r0's shards");
    put_job(&js, &added, "* * * * * *", "").await;
    let deleted = jobs
        .iter()
        .find(|id| in_r0(id))
        .expect("a job of r0")
        .clone();
    js.get_key_value(subjects::JOBS_BUCKET)
        .await
        .expect("bucket")
        .delete(&deleted)
        .await
        .expect("delete");
    let deleted_at = Utc::now();
    // An edit after the snapshots: r1's fires of it carry the new revision.
    let edited = jobs
        .iter()
        .find(|id| in_r0(id) && **id != deleted)
        .expect("another job of r0")
        .clone();
    let edited_revision = put_job(&js, &edited, "* * * * * *", r#","description":"edited""#).await;
    let edited_at = Utc::now();

    let loaded =
        jetcron_testkit::wait_until("r1 plans r0's shards", Duration::from_secs(20), || {
            let log = r1.log_text().split_off(logged_before_kill);
            async move {
                let planned = jetcron_testkit::without_colour_codes(&log)
                    .matches("shard scheduling")
                    .count();
                (planned >= r0_shards).then(|| sum_logged(&log, "shards loaded", "jobs"))
            }
        })
        .await;
    println!("holding: r1 loaded {loaded} jobs of r0's {r0_shards} shards");
    let after_kill =
        jetcron_testkit::without_colour_codes(&r1.log_text().split_off(logged_before_kill));
    let loaded_lines: Vec<&str> = after_kill
        .lines()
        .filter(|line| line.contains("shards loaded"))
        .collect();
    let from_snapshots = take_over == TakeOver::Snapshots;
    assert!(
        !loaded_lines.is_empty()
            && loaded_lines
                .iter()
                .all(|line| line.contains(&format!("from_snapshots={from_snapshots}"))),
        "r1 loaded r0's shards {}: {loaded_lines:?}",
        if from_snapshots {
            "from snapshots"
        } else {
            "from the bucket"
        }
    );
    // r0's jobs, the one added, less the one deleted.
    assert_eq!(loaded, held.0, "r1 loaded what r0 held, +1 -1");
    tokio::time::sleep(Duration::from_secs(3)).await;
    if take_over == TakeOver::Snapshots {
        // r1 writes again the shards that changed after r0's snapshots,
        // and not those it took over as r0 wrote them.
        let changed: BTreeSet<u32> = [&added, &deleted, &edited]
            .into_iter()
            .map(|id| jetcron_ticker::shards::shard_of(id))
            .collect();
        let now = snapshot_objects(&js, &r0_shard_ids).await;
        for (shard, object) in &written_by_r0 {
            assert_eq!(
                now.get(shard) != Some(object),
                changed.contains(shard),
                "shard {shard} (changed after r0's snapshot: {}) written again by r1: {}\n{}",
                changed.contains(shard),
                now.get(shard) != Some(object),
                jetcron_testkit::without_colour_codes(&r1.log_text())
            );
        }
    }
    let stopped_at = Utc::now();
    let events = stored_due_events(&js).await;
    assert_exactly_once_and_contiguous(&events, 1);
    for id in jobs.iter().filter(|id| **id != deleted).chain([&added]) {
        let fires = events.get(id).unwrap_or_else(|| panic!("{id} fired"));
        let last = fires.iter().map(|(t, _)| *t).max().expect("fires");
        assert!(
            last > stopped_at - chrono::Duration::seconds(3),
            "{id} stopped firing after the kill at {killed_at} (last {last})"
        );
    }
    let after_delete = events[&deleted]
        .iter()
        .filter(|(_, stored)| *stored > deleted_at)
        .count();
    // Every fire of the edited job r1 stored carries the edit.
    let revisions = due_revisions_after(&js, &edited, edited_at).await;
    assert!(!revisions.is_empty(), "{edited} fired after its edit");
    assert!(
        revisions.iter().all(|r| *r == edited_revision),
        "{edited}: fires after its edit from revisions {revisions:?}, the edit is {edited_revision}"
    );
    r1.terminate();
    assert_eq!(
        after_delete,
        0,
        "{deleted} stored after its delete at {deleted_at}: {:?}\n{}",
        events[&deleted],
        jetcron_testkit::without_colour_codes(&r1.log_text())
    );
}

/// The definition revisions of `job`'s due events stored after `after`.
async fn due_revisions_after(js: &jetstream::Context, job: &str, after: DateTime<Utc>) -> Vec<u64> {
    due_events(js)
        .await
        .into_iter()
        .filter(|(event, stored)| event.job_id == job && *stored > after)
        .map(|(event, _)| event.job_revision)
        .collect()
}

/// A ticker with the test lease (TTL 1.5 s) writing snapshots every second.
fn snapshotting_ticker(nats: &NatsServer, name: &str) -> TickerProcess {
    TickerProcess::start_snapshotting(nats, name, "60s", "1500ms", "250ms", "1s")
}

/// Store `jobs` (due every second), run a ticker until every shard's
/// snapshot is written, and stop it (SIGTERM).
async fn run_until_every_shard_has_a_snapshot(
    nats: &NatsServer,
    js: &jetstream::Context,
    jobs: &[String],
) {
    for id in jobs {
        put_job(js, id, "* * * * * *", "").await;
    }
    let mut first = snapshotting_ticker(nats, "first");
    wait_for_snapshots(
        js,
        (0..jetcron_ticker::shards::SHARDS).collect(),
        "every shard's snapshot is written",
    )
    .await;
    first.terminate();
}

/// Wait until `ticker` logs its start from the shards' snapshots; the
/// jobs it loaded and the keys changed since the snapshots.
async fn loaded_from_snapshots(ticker: &TickerProcess) -> (usize, usize) {
    let preloaded = "jobs loaded from the shards' snapshots";
    jetcron_testkit::wait_until(
        "the start loads from the snapshots",
        Duration::from_secs(20),
        || {
            let log = jetcron_testkit::without_colour_codes(&ticker.log_text());
            async move {
                Some((
                    jetcron_testkit::last_logged_number(&log, preloaded, "jobs")?,
                    jetcron_testkit::last_logged_number(&log, preloaded, "changed")?,
                ))
            }
        },
    )
    .await
}

/// A ticker stopped (SIGTERM) before it got round to writing its shards'
/// snapshots (one every 3.75 s with `--snapshot-every 60s`) writes every
/// changed shard it holds before releasing them: the next start loads
/// from them with no change to replay.
#[tokio::test(flavor = "multi_thread")]
async fn a_graceful_stop_writes_the_snapshots_of_the_changed_shards_first() {
    let nats = NatsServer::start();
    let js = setup(&nats, Duration::from_secs(600)).await;
    let jobs: Vec<String> = (0..24).map(|i| format!("stopped-{i}")).collect();
    for id in &jobs {
        put_job(&js, id, "* * * * * *", "").await;
    }
    let every_shard: Vec<u32> = (0..jetcron_ticker::shards::SHARDS).collect();
    let mut first =
        TickerProcess::start_snapshotting(&nats, "first", "60s", "1500ms", "250ms", "60s");
    jetcron_testkit::wait_until("every shard is planned", Duration::from_secs(20), || {
        let log = jetcron_testkit::without_colour_codes(&first.log_text());
        let shards = every_shard.len();
        async move { (log.matches("shard scheduling").count() == shards).then_some(()) }
    })
    .await;
    let written_before_stop = snapshot_objects(&js, &every_shard).await.len();
    first.terminate();
    let log = jetcron_testkit::without_colour_codes(&first.log_text());
    let at_stop = "shard snapshots written at the stop";
    let written_at_stop = jetcron_testkit::last_logged_number(&log, at_stop, "written");
    // (A shard's first snapshot may be written between the count and the
    // stop: the count is a lower bound, so the stop wrote at least one and
    // every shard has its snapshot after it.)
    assert!(
        written_before_stop < every_shard.len() && written_at_stop.is_some_and(|n| n > 0),
        "{written_before_stop} shards written before the stop, {written_at_stop:?} at it:\n{log}"
    );
    let objects = snapshot_objects(&js, &every_shard).await;
    assert_eq!(objects.len(), every_shard.len(), "{log}");

    let mut second =
        TickerProcess::start_snapshotting(&nats, "second", "60s", "1500ms", "250ms", "60s");
    let (loaded, changed) = loaded_from_snapshots(&second).await;
    assert_eq!((loaded, changed), (jobs.len(), 0));
    second.terminate();
    // The restart held the shards as their snapshots hold them: nothing
    // was written again at its stop.
    assert_eq!(snapshot_objects(&js, &every_shard).await, objects);
}

/// A ticker restarted after its shards' snapshots were written loads its
/// jobs from them and the bucket's changes since (a job added, one deleted
/// and one edited while it was down), takes its shards without waiting for
/// a read of the whole bucket, and every fire is stored exactly once, the
/// missed ones caught up.
#[tokio::test(flavor = "multi_thread")]
async fn a_restart_loads_the_jobs_from_the_snapshots_and_the_changes_since() {
    let nats = NatsServer::start();
    let js = setup(&nats, Duration::from_secs(600)).await;
    let jobs: Vec<String> = (0..24).map(|i| format!("kept-{i}")).collect();
    run_until_every_shard_has_a_snapshot(&nats, &js, &jobs).await;
    let kv = js
        .get_key_value(subjects::JOBS_BUCKET)
        .await
        .expect("bucket");
    put_job(&js, "kept-added", "* * * * * *", "").await;
    let deleted = &jobs[3];
    kv.delete(deleted).await.expect("delete");
    let deleted_at = Utc::now();
    let edited = &jobs[5];
    let edited_revision = put_job(&js, edited, "* * * * * *", r#","description":"edited""#).await;
    let edited_at = Utc::now();
    // Down for a few seconds: its fires are caught up (late threshold 60 s).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let restarted_at = Utc::now();
    let mut second = snapshotting_ticker(&nats, "second");
    let (loaded, changed) = loaded_from_snapshots(&second).await;
    assert_eq!(loaded, jobs.len(), "24 jobs, one added, one deleted");
    assert_eq!(changed, 3, "the added, deleted and edited keys");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let stopped_at = Utc::now();
    second.terminate();
    let events = stored_due_events(&js).await;
    assert_exactly_once_and_contiguous(&events, 1);
    for id in jobs
        .iter()
        .filter(|id| *id != deleted)
        .chain([&"kept-added".to_string()])
    {
        let fires = events.get(id).unwrap_or_else(|| panic!("{id} fired"));
        let last = fires.iter().map(|(t, _)| *t).max().expect("fires");
        assert!(
            last > stopped_at - chrono::Duration::seconds(3),
            "{id} did not fire after the restart at {restarted_at} (last {last})"
        );
    }
    let after_delete: Vec<_> = events[deleted]
        .iter()
        .filter(|(_, stored)| *stored > deleted_at)
        .collect();
    assert!(
        after_delete.is_empty(),
        "{deleted} stored after its delete: {after_delete:?}"
    );
    let revisions = due_revisions_after(&js, edited, edited_at).await;
    assert!(!revisions.is_empty(), "{edited} fired after its edit");
    assert!(
        revisions.iter().all(|r| *r == edited_revision),
        "{edited}: fires after its edit from revisions {revisions:?}, the edit is {edited_revision}"
    );
}

/// Snapshots of a jobs bucket that was deleted and made again (its
/// revisions start over) are refused: the restart reads the new bucket,
/// and no job of the old one fires. The new bucket holds more values than
/// the old one's snapshots had read, so only the bucket's creation time in
/// the snapshots tells them apart.
#[tokio::test(flavor = "multi_thread")]
async fn snapshots_of_a_bucket_made_again_are_not_used() {
    let nats = NatsServer::start();
    let js = setup(&nats, Duration::from_secs(600)).await;
    let old: Vec<String> = (0..8).map(|i| format!("old-{i}")).collect();
    run_until_every_shard_has_a_snapshot(&nats, &js, &old).await;
    js.delete_stream(format!("KV_{}", subjects::JOBS_BUCKET))
        .await
        .expect("delete the jobs bucket");
    setup(&nats, Duration::from_secs(600)).await;
    let new: Vec<String> = (0..24).map(|i| format!("new-{i}")).collect();
    for id in &new {
        put_job(&js, id, "* * * * * *", "").await;
    }
    let restarted_at = Utc::now();
    let mut second = snapshotting_ticker(&nats, "second");
    jetcron_testkit::wait_until(
        "the restart reads the bucket",
        Duration::from_secs(20),
        || {
            let log = jetcron_testkit::without_colour_codes(&second.log_text());
            async move { log.contains("job bucket loaded").then_some(()) }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    second.terminate();
    let log = jetcron_testkit::without_colour_codes(&second.log_text());
    assert!(
        log.contains("written for an earlier jobs bucket of the same name"),
        "the old bucket's snapshots are refused:\n{log}"
    );
    assert!(
        !log.contains("jobs loaded from the shards' snapshots"),
        "{log}"
    );
    let fired_after: BTreeSet<String> = due_events(&js)
        .await
        .into_iter()
        .filter(|(_, stored)| *stored > restarted_at)
        .map(|(event, _)| event.job_id)
        .collect();
    let expected: BTreeSet<String> = new.iter().cloned().collect();
    assert_eq!(fired_after, expected, "only the new bucket's jobs fire");
}

/// The snapshot store is checked like the streams: one with fewer replicas
/// than the process wants, or a stream of its name that is no object
/// store, is refused with what differs (the ticker then runs with its
/// snapshots off and says so), and one that fits opens again.
#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_store_that_does_not_fit_is_refused_naming_what_differs() {
    let nats = NatsServer::start();
    let js = jetstream::new(nats.client().await);
    let r1 = TopologyOptions::default();
    topology::ensure_ticker_snapshots(&js, &r1)
        .await
        .expect("made");
    topology::ensure_ticker_snapshots(&js, &r1)
        .await
        .expect("opened again as it is");
    let r3 = TopologyOptions {
        replicas: 3,
        ..TopologyOptions::default()
    };
    let text = refusal(
        topology::ensure_ticker_snapshots(&js, &r3).await,
        "R1 is not R3",
    );
    assert!(
        text.starts_with(&format!(
            "object store {} exists with settings jetcron cannot use: 1 replica(s), this process wants 3",
            subjects::TICKER_SNAPSHOTS_BUCKET
        )),
        "{text}"
    );
    assert!(text.contains("jetcron migrate --replicas 3"), "{text}");

    let stream = format!("OBJ_{}", subjects::TICKER_SNAPSHOTS_BUCKET);
    js.delete_stream(&stream).await.expect("delete");
    js.create_stream(jetstream::stream::Config {
        name: stream.clone(),
        subjects: vec!["not.snapshots.>".into()],
        ..Default::default()
    })
    .await
    .expect("a stream of the store's name");
    let text = refusal(
        topology::ensure_ticker_snapshots(&js, &r1).await,
        "not an object store",
    );
    assert!(
        text.contains("no subject") && text.contains("$O.jetcron_ticker_snapshots.C.>"),
        "{text}"
    );
}

/// The error text of a refused topology step (the store has no `Debug`).
fn refusal<T>(result: Result<T, topology::TopologyError>, why: &str) -> String {
    match result {
        Ok(_) => panic!("accepted: {why}"),
        Err(e) => e.to_string(),
    }
}

/// Whether every shard has a snapshot, as a replica looks at it before it
/// lets go of shards owned elsewhere after the lease's quiet alone: not
/// while one shard has none, not after one is deleted, not while one is of
/// another format or says nothing of what it was written for, and not for
/// objects written for the jobs bucket before it was made again.
#[tokio::test(flavor = "multi_thread")]
async fn every_shard_has_a_snapshot_only_once_each_is_written_for_this_bucket() {
    use async_nats::jetstream::object_store::ObjectMetadata;
    use jetcron_ticker::shards::SHARDS;
    use jetcron_ticker::snapshot_store::{object_name, SnapshotStore};
    let nats = NatsServer::start();
    let js = setup(&nats, Duration::from_secs(600)).await;
    let options = TopologyOptions::default();
    async fn open(js: &jetstream::Context, options: &TopologyOptions) -> SnapshotStore {
        let jobs = js
            .get_key_value(subjects::JOBS_BUCKET)
            .await
            .expect("bucket");
        let store = topology::ensure_ticker_snapshots(js, options)
            .await
            .expect("snapshot store");
        SnapshotStore::new(store, jobs.stream.cached_info()).expect("snapshots on")
    }
    let snapshots = open(&js, &options).await;
    let write = |shard: u32| snapshots.write(shard, vec![bytes::Bytes::from_static(b"held jobs")]);
    let covered = || snapshots.every_shard_written();
    assert!(!covered().await.expect("look"));
    for shard in 0..SHARDS - 1 {
        write(shard).await.expect("write");
    }
    assert!(
        !covered().await.expect("look"),
        "shard {} has none",
        SHARDS - 1
    );
    write(SHARDS - 1).await.expect("write");
    assert!(covered().await.expect("look"));

    let store = js
        .get_object_store(subjects::TICKER_SNAPSHOTS_BUCKET)
        .await
        .expect("store");
    store.delete(object_name(3)).await.expect("delete");
    assert!(!covered().await.expect("look"), "shard 3's was deleted");
    write(3).await.expect("write");
    assert!(covered().await.expect("look"));

    // An object of another format (a build before or after this one), or
    // one that says nothing of what it was written for, does not count.
    let bucket_created = snapshots.bucket_created().to_string();
    for (format, why) in [
        (Some("999"), "shard 5's object is of another format"),
        (
            None,
            "shard 5's object does not say what it was written for",
        ),
    ] {
        let mut described = ObjectMetadata {
            name: object_name(5),
            ..Default::default()
        };
        if let Some(format) = format {
            described.metadata = [
                ("format".to_owned(), format.to_owned()),
                ("bucket_created".to_owned(), bucket_created.clone()),
            ]
            .into();
        }
        store
            .put(described, &mut &b"held jobs"[..])
            .await
            .expect("put");
        assert!(!covered().await.expect("look"), "{why}");
    }
    write(5).await.expect("write");
    assert!(covered().await.expect("look"));

    // The jobs bucket made again: the objects were written for the one before.
    tokio::time::sleep(Duration::from_millis(20)).await;
    js.delete_key_value(subjects::JOBS_BUCKET)
        .await
        .expect("delete the bucket");
    topology::ensure_jobs_bucket(&js, &options)
        .await
        .expect("bucket again");
    let again = open(&js, &options).await;
    assert_ne!(again.bucket_created(), snapshots.bucket_created());
    assert!(
        !again.every_shard_written().await.expect("look"),
        "every object was written for the earlier bucket"
    );
}
