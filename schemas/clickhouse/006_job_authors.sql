-- Who changed what: `job.changed` and `job.deleted` rows name the author
-- of each revision of a job (`token:<id>`, `admin-token`, `console`,
-- `nats`, `nats:<namespace>`, `kv`) and its door (`http`, `nats`,
-- `console`, `kv`). Tables made before authors existed get the two columns
-- here; 003 has them already for new ones (appended last either way).
ALTER TABLE jetcron.job_events ADD COLUMN IF NOT EXISTS actor String DEFAULT '';
ALTER TABLE jetcron.job_events ADD COLUMN IF NOT EXISTS door String DEFAULT '';
