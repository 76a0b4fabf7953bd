-- The latest state of every run, kept by ClickHouse itself: the replicated
-- variant of ../004_run_state.sql, with the same columns, keys, partitioning
-- and view queries. Only aggregates that a repeated event cannot change are
-- used (min, max, argMax, uniqExact, any), so an event folded in twice, or an
-- aggregate block stored twice, leaves every answer as it was.
--
-- The materialized view fires on the replica that takes an INSERT into
-- run_events and writes its block into that replica's run_state, which
-- replicates it like any insert; parts of run_events that other replicas
-- fetch do not fire their views, so each block is folded in once. A retried
-- INSERT whose run_events block is a duplicate still reaches the view when
-- deduplicate_blocks_in_dependent_materialized_views = 1 (the default since
-- 26.2; set it for jetcron's ClickHouse user on older servers), and run_state
-- stores the view's block only if the earlier attempt did not: so a retry
-- after a failure between the two writes does not lose the run's state.
--
-- The latest state of a run is that of its latest attempt: the events of a
-- later attempt win over those of an earlier one, and within one attempt
-- at_ms, then the step (started < retrying < skipped < an outcome), so a
-- terminal event wins a tie. Notifications do not change a run's state and
-- are left out. The views `runs` and `job_state` hold no data and are
-- created on every host.
CREATE TABLE IF NOT EXISTS jetcron.run_state ON CLUSTER '{cluster}'
(
    job_id               String,
    scheduled_ms         Int64,
    run_id               String,
    s_trigger            AggregateFunction(any, String),
    s_pool               AggregateFunction(any, String),
    s_target_type        AggregateFunction(any, String),
    s_shards             AggregateFunction(max, UInt32),
    s_attempt            AggregateFunction(max, UInt32),
    s_max_attempts       AggregateFunction(max, UInt32),
    s_first_started      AggregateFunction(minIf, Int64, UInt8),
    s_started            AggregateFunction(maxIf, Int64, UInt8),
    s_finished           AggregateFunction(maxIf, Int64, UInt8),
    s_kind               AggregateFunction(argMax, String, Int64),
    s_executor           AggregateFunction(argMaxIf, String, Int64, UInt8),
    s_error              AggregateFunction(argMaxIf, String, Int64, UInt8),
    s_duration           AggregateFunction(argMaxIf, Int64, Int64, UInt8),
    s_retried            AggregateFunction(uniqExactIf, UInt32, UInt8),
    s_failed_shard_kind  AggregateFunction(argMinIf, String, Int64, UInt8),
    s_succeeded_shards   AggregateFunction(uniqExactIf, UInt32, UInt8)
)
ENGINE = ReplicatedAggregatingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}')
PARTITION BY toYYYYMM(toDateTime(intDiv(scheduled_ms, 1000)))
ORDER BY (job_id, scheduled_ms, run_id);

-- An attempt starts at its `started` event, or, when that event was never
-- stored (the executor goes on when storing it fails, say while the stream
-- elects a leader), at the start its outcome event carries: the same rule as
-- the gateway's run view.
--
-- The argMax key is attempt-major: attempt * 2^45 (35184372088832) +
-- at_ms * 8 + the step. An event of a later attempt wins over every event
-- of an earlier one, whatever their times, as in the gateway's run view
-- (services/core/src/run_summary.rs): an executor that stalled and woke
-- could record a `started` or `retrying` of its attempt after another
-- executor recorded the next attempt's outcome, and by time alone that
-- stale event won. at_ms * 8 + 7 stays below 2^45 until the year 2109
-- (at_ms < 2^42), and attempt (UInt32: JetStream's delivery count of the
-- due event, from 1) below 2^18 keeps the key inside Int64.
--
-- `run_state_mv` (before 2026-11-28) took starts from `started` events
-- only; `run_state_mv_v2` (before 2026-12-05) ordered by at_ms alone. This
-- view replaces both. An install that has them drops them by hand once
-- every projector and gateway runs a version that knows this one
-- (docs/clickhouse-replication.md: an older one waits at its start for the
-- view it knows). The column types are the same, so rows the old views
-- folded stay valid. Their keys are below 2^45 and this view's are at least
-- 2^45: a run whose events span the upgrade takes its kind, executor, error
-- and duration from the events folded since, ordered as above among
-- themselves; while the old views stay, they fold the same inserts, which
-- changes no answer (this view's keys win, and every other aggregate is one
-- a repeated event cannot change).
CREATE MATERIALIZED VIEW IF NOT EXISTS jetcron.run_state_mv_v3 ON CLUSTER '{cluster}' TO jetcron.run_state AS
SELECT
    job_id,
    scheduled_ms,
    run_id,
    anyState(trigger) AS s_trigger,
    anyState(pool) AS s_pool,
    anyState(target_type) AS s_target_type,
    maxState(ifNull(shards, toUInt32(1))) AS s_shards,
    maxState(attempt) AS s_attempt,
    maxState(max_attempts) AS s_max_attempts,
    minIfState(ifNull(started_ms, at_ms), kind = 'started' OR (isNotNull(started_ms) AND kind IN ('retrying', 'succeeded', 'failed', 'timed_out', 'killed'))) AS s_first_started,
    maxIfState(ifNull(started_ms, at_ms), kind = 'started' OR (isNotNull(started_ms) AND kind IN ('retrying', 'succeeded', 'failed', 'timed_out', 'killed'))) AS s_started,
    maxIfState(ifNull(finished_ms, at_ms), kind IN ('succeeded', 'failed', 'timed_out', 'killed', 'skipped')) AS s_finished,
    argMaxState(kind, toInt64(attempt) * 35184372088832 + at_ms * 8 + multiIf(kind = 'started', 1, kind = 'retrying', 2, kind = 'skipped', 3, 4)) AS s_kind,
    argMaxIfState(executor_id, toInt64(attempt) * 35184372088832 + at_ms * 8 + multiIf(kind = 'started', 1, kind = 'retrying', 2, kind = 'skipped', 3, 4), executor_id != '') AS s_executor,
    argMaxIfState(ifNull(error, ''), toInt64(attempt) * 35184372088832 + at_ms * 8 + multiIf(kind = 'started', 1, kind = 'retrying', 2, kind = 'skipped', 3, 4), isNotNull(error)) AS s_error,
    argMaxIfState(ifNull(duration_ms, toInt64(0)), toInt64(attempt) * 35184372088832 + at_ms * 8 + 4, isNotNull(duration_ms)) AS s_duration,
    uniqExactIfState(attempt, kind = 'retrying') AS s_retried,
    argMinIfState(kind, at_ms, kind IN ('failed', 'timed_out', 'killed') AND isNotNull(shard)) AS s_failed_shard_kind,
    uniqExactIfState(ifNull(shard, toUInt32(0)), kind = 'succeeded' AND isNotNull(shard)) AS s_succeeded_shards
FROM jetcron.run_events
WHERE kind NOT IN ('notified', 'notify_failed')
GROUP BY job_id, scheduled_ms, run_id;

-- One row per run with its status, for the gateway and the dashboards. A
-- sharded run failed (timed out, was killed) as soon as one shard did,
-- succeeded when every shard did, and runs otherwise; the same rules as the
-- gateway's run view (services/core/src/run_summary.rs).
CREATE VIEW IF NOT EXISTS jetcron.runs ON CLUSTER '{cluster}' AS
SELECT
    job_id,
    scheduled_ms,
    run_id,
    anyMerge(s_trigger) AS trigger,
    anyMerge(s_pool) AS pool,
    anyMerge(s_target_type) AS target_type,
    maxMerge(s_shards) AS shards,
    maxMerge(s_attempt) AS attempt,
    maxMerge(s_max_attempts) AS max_attempts,
    minIfMerge(s_first_started) AS first_started_ms,
    maxIfMerge(s_started) AS started_ms,
    maxIfMerge(s_finished) AS finished_ms,
    argMaxMerge(s_kind) AS last_kind,
    argMaxIfMerge(s_executor) AS executor_id,
    argMaxIfMerge(s_error) AS last_error,
    argMaxIfMerge(s_duration) AS duration_ms,
    uniqExactIfMerge(s_retried) AS retries,
    argMinIfMerge(s_failed_shard_kind) AS failed_shard_kind,
    uniqExactIfMerge(s_succeeded_shards) AS succeeded_shards,
    multiIf(
        shards > 1 AND failed_shard_kind != '', failed_shard_kind,
        shards > 1 AND succeeded_shards >= shards, 'succeeded',
        shards > 1, 'running',
        last_kind = 'started', 'running',
        last_kind) AS status,
    if(status IN ('running', 'succeeded'), '', last_error) AS error
FROM jetcron.run_state
GROUP BY job_id, scheduled_ms, run_id;

-- The latest state of every job that has runs: its newest run and the last
-- success and failure (0: none yet).
CREATE VIEW IF NOT EXISTS jetcron.job_state ON CLUSTER '{cluster}' AS
SELECT
    job_id,
    max(scheduled_ms) AS last_scheduled_ms,
    argMax(run_id, scheduled_ms) AS last_run_id,
    argMax(status, scheduled_ms) AS last_status,
    maxIf(finished_ms, status = 'succeeded') AS last_success_ms,
    maxIf(finished_ms, status IN ('failed', 'timed_out', 'killed')) AS last_failure_ms,
    count() AS runs
FROM jetcron.runs
GROUP BY job_id;
