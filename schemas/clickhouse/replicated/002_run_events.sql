-- Every run event, append-only, one row per (run, attempt, step): the
-- replicated variant of ../002_run_events.sql, with the same columns, sorting
-- key and partitioning (services/jetcron/tests/clickhouse_replicated.rs checks
-- that they stay equal). Instants are Int64 milliseconds since the Unix epoch.
--
-- Stored once whatever is retried:
-- * the projector retries a failed INSERT with the same rows in the same
--   order; ReplicatedMergeTree keeps the hash of every block it stored in
--   Keeper, shared by all replicas, and drops an identical block, whichever
--   replica the retry reaches (replicated_deduplication_window[_seconds]: the
--   last 10,000 blocks within 1 hour by default on 26.x);
-- * an event stored again in another block (a redelivery after the ack wait,
--   a replay, a batch split around a refused row) has the same sorting key,
--   which ends in event_id, and collapses in merges; every query of the
--   gateway dedups on event_id meanwhile.
--
-- Keeper path: one per shard and table. {shard} and {replica} are macros of
-- each server's <macros>; {database} and {table} are filled in at CREATE. The
-- path is explicit rather than the default (/clickhouse/tables/{uuid}/{shard})
-- so that a table created on one host by hand, without ON CLUSTER, still joins
-- the others.
CREATE TABLE IF NOT EXISTS jetcron.run_events ON CLUSTER '{cluster}'
(
    event_id         String,
    run_id           String,
    job_id           String,
    kind             String,
    trigger          String,
    target_type      String,
    pool             String,
    attempt          UInt32,
    max_attempts     UInt32,
    executor_id      String,
    scheduled_ms     Int64,
    at_ms            Int64,
    started_ms       Nullable(Int64),
    finished_ms      Nullable(Int64),
    duration_ms      Nullable(Int64),
    retry_at_ms      Nullable(Int64),
    status_code      Nullable(Int32),
    exit_code        Nullable(Int32),
    output           Nullable(String),
    output_truncated UInt8,
    error            Nullable(String),
    outcome          Nullable(String),
    shard            Nullable(UInt32),
    shards           Nullable(UInt32),
    parent_run_id    String DEFAULT '',
    parent_job_id    String DEFAULT ''
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}')
PARTITION BY toYYYYMM(toDateTime(intDiv(scheduled_ms, 1000)))
ORDER BY (job_id, scheduled_ms, run_id, event_id);
