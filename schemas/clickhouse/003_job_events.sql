-- Definitions that were not applied (`job.rejected`): a `nats pub` to
-- jetcron.api.jobs.put with nobody to answer, or an invalid value written
-- straight into the jetcron_jobs bucket. One row per rejection; a bucket value
-- rejected again (another ticker replica, a reopened watch) has the same
-- event_id and collapses here, and queries dedup on event_id as well.
-- `problems` is the JSON array the API would have answered with; `fields` and
-- `codes` repeat its fields and codes for filtering.
CREATE TABLE IF NOT EXISTS jetcron.job_events
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
ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(toDateTime(intDiv(at_ms, 1000)))
ORDER BY (at_ms, event_id);
