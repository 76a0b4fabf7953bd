-- Every run event, append-only, one row per (run, attempt, step): the
-- replicated variant of ../002_run_events.sql, with the same columns, sorting
-- key and partitioning (services/jetcron/tests/clickhouse_replicated.rs checks
-- that they stay equal). Instants are Int64 milliseconds since the Unix epoch.
--
-- Retries are idempotent twice over: ReplicatedMergeTree drops a block it has
-- already stored (same rows in the same order, the projector's retry of a
-- batch), whichever replica takes the retry, within the table's
-- replicated_deduplication_window; an event stored again in another batch (a
-- redelivery, a replay) collapses in the ReplacingMergeTree on the sorting key,
-- which ends in event_id, and every query dedups on event_id meanwhile.
-- Keeper path: one per shard and table; {shard} and {replica} are macros of
-- each server's <macros>.
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
    shards           Nullable(UInt32)
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/jetcron/run_events', '{replica}')
PARTITION BY toYYYYMM(toDateTime(intDiv(scheduled_ms, 1000)))
ORDER BY (job_id, scheduled_ms, run_id, event_id);
