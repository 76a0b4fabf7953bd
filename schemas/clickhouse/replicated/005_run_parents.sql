-- Chained runs (a job's `after`) name the run whose end started them: the
-- replicated variant of ../005_run_parents.sql. Tables made before chains
-- existed get the two columns on every replica; 002 has them already.
ALTER TABLE jetcron.run_events ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS parent_run_id String DEFAULT '';
ALTER TABLE jetcron.run_events ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS parent_job_id String DEFAULT '';
