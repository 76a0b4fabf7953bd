-- Chained runs (a job's `after`) name the run whose end started them. Tables
-- made before chains existed get the two columns here; 002 has them already
-- for new ones (appended last either way, so both have one column order).
ALTER TABLE jetcron.run_events ADD COLUMN IF NOT EXISTS parent_run_id String DEFAULT '';
ALTER TABLE jetcron.run_events ADD COLUMN IF NOT EXISTS parent_job_id String DEFAULT '';
