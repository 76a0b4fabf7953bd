-- Job events (`job.rejected`, `fire.missed`): the replicated variant of
-- ../003_job_events.sql, with the same columns, sorting key and partitioning.
-- A block the projector retries is dropped by replicated insert deduplication
-- on whichever replica; an event stored again in another block has the same
-- event_id and sorting key and collapses in merges, and queries dedup on
-- event_id meanwhile. Keeper path: as in 002_run_events.sql.
CREATE TABLE IF NOT EXISTS jetcron.job_events ON CLUSTER '{cluster}'
(
    event_id  String,
    kind      String,
    source    String,
    job_id    String,
    revision  UInt64,
    at_ms     Int64,
    size      UInt64,
    fields    Array(String),
    codes     Array(String),
    message   String,
    problems  String,
    actor     String DEFAULT '',
    door      String DEFAULT ''
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}')
PARTITION BY toYYYYMM(toDateTime(intDiv(at_ms, 1000)))
ORDER BY (at_ms, event_id);
