-- The database holding jetcron's run history, on every host of the cluster.
-- Replicated variant of ../001_database.sql; apply the files of this folder in
-- order with clickhouse-client before the first projector starts (README.md).
-- '{cluster}' is the `cluster` macro of each server's <macros>; write the
-- cluster's name from <remote_servers> instead where no such macro is set.
CREATE DATABASE IF NOT EXISTS jetcron ON CLUSTER '{cluster}';
