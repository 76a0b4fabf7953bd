-- Every run event, append-only, one row per (run, attempt, step).
-- Instants are Int64 milliseconds since the Unix epoch: ClickHouse 18.16 has no
-- DateTime64, and the same columns work unchanged on current ClickHouse.
-- ReplacingMergeTree on the sort key (which ends in event_id) lets replays of
-- JETCRON_RUNS collapse in merges; queries also dedup by event_id, so answers
-- are exact before merges happen.
CREATE TABLE IF NOT EXISTS jetcron.run_events
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
ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(toDateTime(intDiv(scheduled_ms, 1000)))
ORDER BY (job_id, scheduled_ms, run_id, event_id);
