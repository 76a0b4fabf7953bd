//! The route table: every route of the HTTP API, one a line
//! (`rustfmt::skip`), so that it reads down like the API's index. The
//! router is built from it, and so is `/openapi.json`.

use jetcron_core::job::patterns::JOB_RULES;

use super::auth::Access;
use super::openapi::bodies;
use super::params::{
    BindingPath, ChannelPath, ControlledRunPath, DeletePrecondition, JobPath, NamespacePath,
    PreviewQuery, PutPreconditions, RunPath, ScopePath, TokenPath,
};
use super::route::ApiRoute;
use super::{
    bindings, channels, control, health, jobs, openapi, policies, runs, schedules, tokens, writes,
};

/// `POST /v1/jobs`: the rules of a definition ([`JOB_RULES`]).
const JOB_POST_RULES: [&str; JOB_RULES.len()] = {
    let mut names = [""; JOB_RULES.len()];
    let mut i = 0;
    while i < JOB_RULES.len() {
        names[i] = JOB_RULES[i].0;
        i += 1;
    }
    names
};
/// `PUT /v1/jobs/{id}`: also the path's job, its revision given once.
const JOB_PUT_RULES: [&str; JOB_RULES.len() + 2] = {
    let mut names = [""; JOB_RULES.len() + 2];
    let mut i = 0;
    while i < JOB_RULES.len() {
        names[i] = JOB_POST_RULES[i];
        i += 1;
    }
    names[i] = "id-matches-path";
    names[i + 1] = "revision-once";
    names
};

/// Every route of the gateway.
pub fn routes() -> Vec<ApiRoute> {
    let mut routes = service_routes();
    routes.extend(job_routes());
    routes.extend(job_action_routes());
    routes.extend(run_routes());
    routes.extend(channel_routes());
    routes.extend(token_routes());
    routes.extend(policy_routes());
    routes.extend(binding_routes());
    routes
}

/// Scoped API tokens, made and revoked by a namespace's admins.
#[rustfmt::skip]
fn token_routes() -> Vec<ApiRoute> {
    use crate::tokens::requests::{CreateToken, CreatedToken, RevokedReply, TokensReply};
    use Access::Write;
    vec![
        ApiRoute::post("/v1/tokens", Write, "Make a token with a role in a namespace (by an admin of it); the answer shows it once", tokens::create).body::<CreateToken>("namespace, role, expires_in, description").status(201).answers::<CreatedToken>(),
        ApiRoute::get("/v1/tokens", Write, "The tokens of the namespaces the caller administers, without secrets", tokens::list).answers::<TokensReply>(),
        ApiRoute::delete("/v1/tokens/{id}", Write, "Revoke token {id}: every later request with it is refused", tokens::revoke).path::<TokenPath>().finds().answers::<RevokedReply>(),
    ]
}

/// The namespaces' target policies: read by a namespace's viewers, set
/// by its admins (by an admin of `*` when locked).
#[rustfmt::skip]
fn policy_routes() -> Vec<ApiRoute> {
    use crate::policies::{PolicyRemovedReply, PolicyReply, PolicySetReply};
    use Access::{Read, Write};
    vec![
        ApiRoute::get("/v1/namespaces/{namespace}/policy", Read, "The target policy of a namespace: which subjects, URL prefixes, pools, shell and chains its jobs may use (null: no limit)", policies::get_one).path::<NamespacePath>().answers::<PolicyReply>(),
        ApiRoute::put("/v1/namespaces/{namespace}/policy", Write, "Set a namespace's target policy (an admin of it; of * when locked); the answer lists the jobs it refuses", policies::put).path::<NamespacePath>().body_schema(bodies::policy, "the policy; an absent list does not limit its kind", true).answers::<PolicySetReply>(),
        ApiRoute::delete("/v1/namespaces/{namespace}/policy", Write, "Remove a namespace's target policy: its jobs may use any target", policies::delete).path::<NamespacePath>().answers::<PolicyRemovedReply>(),
    ]
}

/// Role bindings: who (a person or group) holds which role in a
/// namespace; managed by its admins (`*`: by an admin of `*`).
#[rustfmt::skip]
fn binding_routes() -> Vec<ApiRoute> {
    use crate::bindings::{BindingRemovedReply, BindingSetReply, BindingsReply, SetBinding};
    use Access::Write;
    vec![
        ApiRoute::get("/v1/namespaces/{namespace}/bindings", Write, "Who holds which role in a namespace (* : in every one), each with who gave it (an admin of it)", bindings::list).path::<ScopePath>().answers::<BindingsReply>(),
        ApiRoute::put("/v1/namespaces/{namespace}/bindings/{subject}", Write, "Give user:<name> or group:<name> a role in a namespace (an admin of it)", bindings::set).path::<BindingPath>().body::<SetBinding>("the role").answers::<BindingSetReply>(),
        ApiRoute::delete("/v1/namespaces/{namespace}/bindings/{subject}", Write, "Take a subject's role in a namespace away", bindings::remove).path::<BindingPath>().conflicts().answers::<BindingRemovedReply>(),
    ]
}

/// The process's own routes (probes, metrics, this document) and the pools.
#[rustfmt::skip]
fn service_routes() -> Vec<ApiRoute> {
    use Access::{Public, Read};
    vec![
        ApiRoute::get("/healthz", Public, "Liveness: the process answers", health::healthz).standalone(),
        ApiRoute::get("/readyz", Public, "Readiness: NATS and ClickHouse reachable", health::readyz).answers::<health::ReadinessReport>().not_ready_answer(),
        ApiRoute::get("/metrics", Public, "Prometheus metrics (pool queues)", control::metrics).answers_text(),
        ApiRoute::get("/openapi.json", Public, "This document", openapi::serve).standalone().answers_schema(openapi::any_object),
        ApiRoute::get("/v1/pools", Read, "Pools: queued due events and consumers", control::pools),
    ]
}

/// Job definitions: list, put, read, delete, history, pause by selector;
/// and the preview of a schedule line.
#[rustfmt::skip]
fn job_routes() -> Vec<ApiRoute> {
    use crate::jobs::requests::{DeletedReply, JobsReply, PausedReply};
    use crate::jobs::store::PutReply;
    use crate::jobs::reads::{JobDetail, JobHistory};
    use crate::jobs::schedule_preview::PreviewReply;
    use Access::{Read, Write};
    vec![
        ApiRoute::get("/v1/jobs", Read, "List jobs (as jetcron.api.jobs.list)", jobs::list).query::<jobs::ListQuery>().answers::<JobsReply>(),
        ApiRoute::post("/v1/jobs", Write, "Create (201) or replace (200) a job (as jetcron.api.jobs.put)", writes::create).body_schema(bodies::job_post, "a job definition; a top-level expected_revision makes it a compare-and-swap (0: create only)", true).status(201).or_status(200).conflicts().rules(&JOB_POST_RULES).answers::<PutReply>(),
        ApiRoute::post("/v1/jobs:pause", Write, "Pause one job, or every job matching a label selector", writes::pause_selected).body_schema(bodies::selector, "a job's id, or a label selector", true).finds().conflicts().answers::<PausedReply>(),
        ApiRoute::post("/v1/jobs:resume", Write, "Resume one job, or every job matching a label selector", writes::resume_selected).body_schema(bodies::selector, "a job's id, or a label selector", true).finds().conflicts().answers::<PausedReply>(),
        ApiRoute::get("/v1/jobs/{id}", Read, "A job: definition, next fire times (for a paused job: those a resume would run), last run", jobs::get_one).path::<JobPath>().query::<jobs::GetQuery>().finds().answers::<JobDetail>(),
        ApiRoute::put("/v1/jobs/{id}", Write, "Create or replace job {id}; If-Match: <revision> or If-None-Match: * for compare-and-swap", writes::replace).path::<JobPath>().headers::<PutPreconditions>().body_schema(bodies::job_put, "a job definition; its id, if given, must be {id}", true).conflicts().rules(&JOB_PUT_RULES).answers::<PutReply>(),
        ApiRoute::delete("/v1/jobs/{id}", Write, "Delete job {id} (its history stays)", writes::delete).path::<JobPath>().query::<writes::DeleteQuery>().headers::<DeletePrecondition>().finds().conflicts().rules(&["revision-once"]).answers::<DeletedReply>(),
        ApiRoute::get("/v1/jobs/{id}/history", Read, "Every kept revision of job {id} and its recent rejections", jobs::history).path::<JobPath>().finds().answers::<JobHistory>(),
        ApiRoute::get("/v1/schedules/preview", Read, "The next fires of a schedule line, with wall times, DST notes and the line in English (as jetcron.api.schedules.preview)", schedules::preview).query::<PreviewQuery>().rules(&["fires-after-from"]).answers::<PreviewReply>(),
    ]
}

/// One job's runs and actions, and the rejected definitions.
#[rustfmt::skip]
fn job_action_routes() -> Vec<ApiRoute> {
    use crate::jobs::requests::PausedReply;
    use crate::runs::manual::{BackfilledReply, TriggeredReply};
    use crate::jobs::rejections::{ListRejections, RejectionsReply};
    use crate::runs::reads::JobRunsReply;
    use Access::{Read, Write};
    vec![
        ApiRoute::get("/v1/jobs/{id}/runs", Read, "Runs of job {id}, newest first", runs::of_job).path::<JobPath>().query::<runs::JobRunsQuery>().reads_history().answers::<JobRunsReply>(),
        ApiRoute::post("/v1/jobs/{id}/pause", Write, "Pause job {id}", writes::pause).path::<JobPath>().body_schema(bodies::job_action, "empty, or the path's job", false).finds().conflicts().rules(&["id-matches-path"]).answers::<PausedReply>(),
        ApiRoute::post("/v1/jobs/{id}/resume", Write, "Resume job {id}", writes::resume).path::<JobPath>().body_schema(bodies::job_action, "empty, or the path's job", false).finds().conflicts().rules(&["id-matches-path"]).answers::<PausedReply>(),
        ApiRoute::post("/v1/jobs/{id}/trigger", Write, "Run job {id} now (a manual run)", writes::trigger).path::<JobPath>().body_schema(bodies::job_action, "empty, or the path's job", false).status(202).finds().rules(&["id-matches-path"]).answers::<TriggeredReply>(),
        ApiRoute::post("/v1/jobs/{id}/backfill", Write, "Run the scheduled times of job {id} in a past range", writes::backfill).path::<JobPath>().body_schema(bodies::backfill, "the range", true).status(202).finds().reads_history().rules(&["id-matches-path", "backfill-range"]).answers::<BackfilledReply>(),
        ApiRoute::get("/v1/rejections", Read, "Definitions that were not applied (job.rejected)", jobs::rejections).query::<ListRejections>().reads_history().answers::<RejectionsReply>(),
    ]
}

/// Runs across jobs, statistics, one run and its controls.
#[rustfmt::skip]
fn run_routes() -> Vec<ApiRoute> {
    use crate::runs::reads::{ListRuns, RunReply, RunsReply};
    use crate::runs::stats::{GetStats, StatsReply};
    use crate::runs::control::KilledReply;
    use jetcron_core::control::Completion;
    use Access::{Read, Write};
    vec![
        ApiRoute::get("/v1/runs", Read, "Runs across jobs, newest first, with filters and a cursor", runs::list).query::<ListRuns>().reads_history().rules(&["range-order"]).answers::<RunsReply>(),
        ApiRoute::get("/v1/stats", Read, "Per job: runs by status, success rate, fire lag and duration percentiles, missed fires", runs::stats).query::<GetStats>().reads_history().rules(&["range-order"]).answers::<StatsReply>(),
        ApiRoute::get("/v1/runs/{run_id}", Read, "A run with its event timeline and attempts", runs::get_one).path::<RunPath>().finds().reads_history().answers::<RunReply>(),
        ApiRoute::post("/v1/runs/{run_id}/kill", Write, "Stop run {run_id} wherever it runs (as jetcron.api.runs.kill); a caller limited to some namespaces has the run looked up first", control::kill).path::<ControlledRunPath>().optional_body::<control::KillBody>("optional reason").finds().reads_history().answers::<KilledReply>(),
        ApiRoute::post("/v1/runs/{run_id}/complete", Write, "Report the result of an asynchronous target", control::complete).path::<ControlledRunPath>().body::<Completion>("the result").status(202).finds().reads_history(),
    ]
}

/// Alert channels.
#[rustfmt::skip]
fn channel_routes() -> Vec<ApiRoute> {
    use crate::channels::requests::{ChannelDeletedReply, ChannelPutReply, ChannelReply, ChannelsReply};
    use Access::{Read, Write};
    vec![
        ApiRoute::get("/v1/channels", Read, "Alert channels (as jetcron.api.channels.list); credentials hidden unless reads are protected", channels::list).answers::<ChannelsReply>(),
        ApiRoute::post("/v1/channels", Write, "Create (201) or replace (200) an alert channel (as jetcron.api.channels.put)", channels::create).headers::<PutPreconditions>().body_schema(bodies::channel_post, "a channel definition", true).status(201).or_status(200).conflicts().rules(&["recipients"]).answers::<ChannelPutReply>(),
        ApiRoute::get("/v1/channels/{name}", Read, "An alert channel", channels::get_one).path::<ChannelPath>().finds().answers::<ChannelReply>(),
        ApiRoute::put("/v1/channels/{name}", Write, "Create or replace channel {name}; If-Match: <revision> or If-None-Match: * for compare-and-swap", channels::replace).path::<ChannelPath>().headers::<PutPreconditions>().body_schema(bodies::channel_put, "a channel definition; its name, if given, must be {name}", true).conflicts().rules(&["name-matches-path", "recipients"]).answers::<ChannelPutReply>(),
        ApiRoute::delete("/v1/channels/{name}", Write, "Delete channel {name} (its history stays)", channels::delete).path::<ChannelPath>().query::<writes::DeleteQuery>().headers::<DeletePrecondition>().finds().conflicts().rules(&["revision-once"]).answers::<ChannelDeletedReply>(),
    ]
}
