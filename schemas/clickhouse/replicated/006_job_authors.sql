-- Who changed what: the replicated variant of ../006_job_authors.sql.
-- Tables made before authors existed get the two columns on every replica;
-- 003 has them already.
ALTER TABLE jetcron.job_events ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS actor String DEFAULT '';
ALTER TABLE jetcron.job_events ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS door String DEFAULT '';
