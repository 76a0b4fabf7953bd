//! The integration tests, one binary: each module is a user story against real
//! nats-server and clickhouse-server processes that the testkit starts.
//!
//! One binary instead of one per file: every test binary links the whole
//! dependency tree, and twenty of them filled the CI disk (docs/testing.md).
//!
//! A scenario reads from its set-up to its last assertion in one function,
//! so the workspace's 120-line limit on functions (clippy.toml) is lifted
//! here; it holds for every service's code.

#![allow(clippy::too_many_lines)]

mod ack_answers;
mod alerts;
mod api;
mod bad_input;
mod bindings;
mod browser_steps;
mod chains;
mod channels;
mod cli_client;
mod clickhouse_hang;
mod clickhouse_replicated;
mod cluster_chaos;
mod cluster_faults;
mod cluster_migration;
mod cluster_startup;
mod console;
mod console_access;
mod console_browser;
mod crontab_import;
mod executor_failover;
mod fair_share;
mod form_browser;
mod gateway_queries;
mod grafana_dashboards;
mod held_fires;
mod http_api;
mod http_target;
mod huge_pages;
mod job_authors;
mod job_feed;
mod job_management;
mod job_rejections;
mod jobs_as_code;
mod kill_markers;
mod local_users;
mod lost_acks;
mod manual_runs;
mod namespace_doors;
mod namespaces;
mod nats_creds;
mod nats_failover;
mod nats_permissions;
mod nats_target;
mod openapi_answers;
mod openapi_schemathesis;
mod ordered_shutdown;
mod policies;
mod projection;
mod provider_sign_in;
mod retention;
mod run_control;
mod run_lifecycle;
mod run_queries;
mod schedule_preview;
mod scheduling;
mod shell_target;
mod ticker_acks;
mod ticker_definitions;
mod ticker_dst;
mod ticker_replicas;
mod tokens;
