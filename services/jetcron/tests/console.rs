//! The operator console over plain HTTP, the way a browser without
//! JavaScript uses it: sign in, forms with CSRF tokens, field errors, a
//! stale-revision conflict, actions, the job table's pages and filters, and
//! job text that must render as text. (The same flows in a real browser are
//! in `console_browser.rs`.)

use std::time::Duration;

use jetcron_testkit::reqwest::{self, header, StatusCode};
use jetcron_testkit::{wait_until, Stack, StackOptions, API_TOKEN};

use crate::form_browser::{form, input_value, Browser};

/// A team's member signs in with a scoped token: the console shows its
/// namespace's jobs and runs only, offers only what its role allows, acts
/// with that role (the audit names the token, through the console), and
/// refuses anything else with nothing changed; a revoked token's session
/// ends at once.
#[tokio::test]
async fn a_teams_session_sees_and_does_only_what_its_token_allows() {
    let stack = Stack::start(StackOptions {
        executor: false,
        ..StackOptions::default()
    })
    .await;
    let secret_header = r#""headers":{"Authorization":"Bearer billing-secret"}"#;
    stack
        .put_job(&format!(
            r#"{{"id":"billing.report","schedule":"0 0 0 1 1 * 2090","target":{{"type":"http","url":"https://billing.example/run",{secret_header}}}}}"#
        ))
        .await;
    stack
        .put_job(r#"{"id":"ops.cleanup","schedule":"0 0 0 1 1 * 2090","target":{"type":"nats","subject":"ops.cleanup"}}"#)
        .await;
    let (viewer_token, _) = stack.scoped_token("billing", "viewer").await;
    let (operator_token, operator_id) = stack.scoped_token("billing", "operator").await;

    // A viewer: its jobs only, no buttons, no secrets, no other team's job.
    let mut viewer = Browser::new(&stack);
    viewer.sign_in_with(&viewer_token).await;
    // An admin picks among the namespaces of the jobs held.
    let mut admin = Browser::new(&stack);
    admin.sign_in().await;
    let all = admin.get("/ui/jobs").await;
    for namespace in ["billing", "ops"] {
        assert!(
            all.body
                .contains(&format!("<option value=\"{namespace}\">")),
            "{namespace} is offered"
        );
    }
    let only_ops = admin.get("/ui/jobs?namespace=ops").await;
    assert!(
        only_ops.body.contains(">ops.cleanup</a>"),
        "{}",
        only_ops.body
    );
    assert!(
        !only_ops.body.contains(">billing.report</a>"),
        "{}",
        only_ops.body
    );

    let jobs = viewer.get("/ui/jobs").await;
    assert_eq!(jobs.status, StatusCode::OK);
    assert!(jobs.body.contains(">billing.report</a>"), "{}", jobs.body);
    assert!(
        !jobs.body.contains("ops.cleanup"),
        "another team's job is listed"
    );
    assert!(jobs.body.contains("viewer of billing"), "the role is shown");
    assert!(
        !jobs.body.contains("/ui/jobs/new"),
        "a viewer is offered New job"
    );
    let asked_for_ops = viewer.get("/ui/jobs?namespace=ops").await;
    assert!(
        !asked_for_ops.body.contains("ops.cleanup"),
        "the namespace is the token's"
    );
    assert!(
        !jobs.body.contains("<option value=\"ops\">"),
        "another namespace is named"
    );
    let overview = viewer.get("/ui/").await;
    assert_eq!(
        overview.location(),
        "/ui/jobs",
        "the overview covers every namespace"
    );
    let page = viewer.get("/ui/jobs/billing.report").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        !page.body.contains("billing-secret"),
        "a viewer sees the secret"
    );
    assert!(!page.body.contains("/pause\""), "a viewer is offered pause");
    assert!(!page.body.contains(">Edit</a>"), "a viewer is offered edit");
    for refused in [
        "/ui/jobs/ops.cleanup",
        "/ui/jobs/billing.report/edit",
        "/ui/jobs/new",
    ] {
        let page = viewer.get(refused).await;
        assert_eq!(
            page.status,
            StatusCode::FORBIDDEN,
            "{refused}: {}",
            page.body
        );
    }
    let csrf = viewer.csrf.clone();
    let paused = viewer
        .post("/ui/jobs/billing.report/pause", &[("csrf", csrf.as_str())])
        .await;
    assert_eq!(paused.status, StatusCode::FORBIDDEN, "{}", paused.body);
    let (_, job) = stack.get("/v1/jobs/billing.report").await;
    assert!(
        job["job"]["job"].get("paused").is_none(),
        "a refusal changed the job"
    );

    // An operator: pauses its job (the history names the token, through
    // the console), is offered no edit, and cannot touch another team's.
    let mut operator = Browser::new(&stack);
    operator.sign_in_with(&operator_token).await;
    let page = operator.get("/ui/jobs/billing.report").await;
    assert!(
        page.body.contains("/pause\""),
        "an operator is offered pause"
    );
    assert!(
        !page.body.contains(">Edit</a>"),
        "an operator is offered edit"
    );
    let csrf = operator.csrf.clone();
    let paused = operator
        .post("/ui/jobs/billing.report/pause", &[("csrf", csrf.as_str())])
        .await;
    assert_eq!(paused.location(), "/ui/jobs/billing.report?done=paused");
    let (_, history) = stack.get("/v1/jobs/billing.report/history").await;
    let last = history["revisions"]
        .as_array()
        .and_then(|r| r.last())
        .cloned();
    let last = last.expect("revisions");
    assert_eq!(
        last["author"]["actor"],
        format!("token:{operator_id}"),
        "{last}"
    );
    assert_eq!(last["author"]["door"], "console", "{last}");
    let other = operator
        .post("/ui/jobs/ops.cleanup/pause", &[("csrf", csrf.as_str())])
        .await;
    assert_eq!(other.status, StatusCode::FORBIDDEN, "{}", other.body);
    let (_, job) = stack.get("/v1/jobs/ops.cleanup").await;
    assert!(
        job["job"]["job"].get("paused").is_none(),
        "another team's job was paused"
    );

    // Revoked: the next page sends the operator to sign in again.
    let (status, _) = stack
        .send(
            reqwest::Method::DELETE,
            &format!("/v1/tokens/{operator_id}"),
            "",
            Some(API_TOKEN),
        )
        .await;
    assert_eq!(status, 200);
    let after = operator
        .post("/ui/jobs/billing.report/resume", &[("csrf", csrf.as_str())])
        .await;
    assert!(
        after.location().starts_with("/ui/login"),
        "{:?}",
        after.location()
    );
    let (_, job) = stack.get("/v1/jobs/billing.report").await;
    assert_eq!(job["job"]["job"]["paused"], true, "a revoked session acted");
    stack.stop().await;
}

/// The keys of the sessions bucket.
async fn session_keys(stack: &Stack) -> Vec<String> {
    use futures::TryStreamExt as _;
    let bucket = stack
        .js
        .get_key_value(jetcron_core::subjects::SESSIONS_BUCKET)
        .await
        .expect("sessions bucket");
    let keys = bucket.keys().await.expect("keys");
    keys.try_collect().await.expect("keys")
}

/// Sessions live on the server: the bucket keeps the SHA-256 of the id the
/// cookie holds, and neither holds the token; another gateway honours the
/// session; a sign-out on one gateway ends it on both at once, and the old
/// cookie opens nothing; a session ends after its idle time, and at its
/// lifetime however busy it is.
#[tokio::test]
async fn sessions_end_at_sign_out_everywhere_when_idle_and_at_their_lifetime() {
    let limits = jetcron_gateway::limits::Limits {
        console_sessions: jetcron_gateway::console::session::Timeouts::new(
            Duration::from_secs(4),
            Duration::from_secs(10),
        )
        .expect("timeouts"),
        ..Default::default()
    };
    let stack = Stack::start(StackOptions {
        ticker: false,
        executor: false,
        limits: limits.clone(),
        ..StackOptions::default()
    })
    .await;
    let stop = tokio_util::sync::CancellationToken::new();
    let (other_base, _) = stack
        .another_gateway(vec![API_TOKEN.into()], limits, stop.clone())
        .await;
    let mut browser = Browser::new(&stack);
    browser.sign_in().await;
    let cookie = browser.cookie.clone().expect("session cookie");
    let id = cookie.split_once('=').expect("pair").1.to_string();
    let keys = session_keys(&stack).await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(!keys[0].contains(&id) && !keys[0].contains(API_TOKEN));
    assert!(!id.contains(API_TOKEN));

    // The other gateway honours it, with the same CSRF token.
    let mut other = Browser::new(&stack);
    other.base = other_base.clone();
    other.cookie = Some(cookie.clone());
    assert_eq!(other.get("/ui/jobs/new").await.status, StatusCode::OK);
    assert_eq!(browser.get("/ui/jobs/new").await.status, StatusCode::OK);
    assert_eq!(other.csrf, browser.csrf);

    // Signing out on the other gateway ends it here at once.
    let csrf = other.csrf.clone();
    let out = other.post("/ui/logout", &[("csrf", csrf.as_str())]).await;
    assert_eq!(out.location(), "/ui/login");
    assert!(session_keys(&stack).await.is_empty());
    let ended = browser.get("/ui/jobs/new").await;
    assert_eq!(ended.status, StatusCode::SEE_OTHER);
    assert!(
        ended.location().starts_with("/ui/login"),
        "{}",
        ended.location()
    );
    let replayed = browser
        .post("/ui/jobs/j/pause", &[("csrf", csrf.as_str())])
        .await;
    assert_eq!(replayed.status, StatusCode::SEE_OTHER, "{}", replayed.body);
    assert!(replayed.location().starts_with("/ui/login"));

    // Idle past 4 s: over.
    browser.sign_in().await;
    assert_eq!(browser.get("/ui/jobs/new").await.status, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    assert_eq!(
        browser.get("/ui/jobs/new").await.status,
        StatusCode::SEE_OTHER
    );

    // Busy: alive past the idle time, over at the 10 s lifetime.
    browser.sign_in().await;
    let began = std::time::Instant::now();
    while began.elapsed() < Duration::from_millis(8_500) {
        let page = browser.get("/ui/jobs/new").await;
        assert_eq!(page.status, StatusCode::OK, "at {:?}", began.elapsed());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(10).saturating_sub(began.elapsed())).await;
    assert_eq!(
        browser.get("/ui/jobs/new").await.status,
        StatusCode::SEE_OTHER
    );
    stop.cancel();
    stack.stop().await;
}

#[tokio::test]
async fn sign_in_forms_csrf_errors_conflicts_and_actions() {
    let stack = Stack::start(StackOptions::api_only()).await;
    let mut browser = Browser::new(&stack);

    // Reads are open (the gateway's read policy); the CSP allows only our script.
    let overview = browser.get("/").await;
    assert_eq!(overview.status, StatusCode::SEE_OTHER);
    let overview = browser.get("/ui/").await;
    assert_eq!(overview.status, StatusCode::OK, "{}", overview.body);
    let csp = overview.headers[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .expect("csp");
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert!(overview.body.contains("Sign in"));

    // Writing needs a session.
    let new = browser.get("/ui/jobs/new").await;
    assert_eq!(new.status, StatusCode::SEE_OTHER);
    assert!(
        new.location().starts_with("/ui/login?next="),
        "{}",
        new.location()
    );
    let refused = browser
        .post("/ui/login", &[("token", "not-the-token-at-all")])
        .await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert!(refused.body.contains("not accepted"));
    let signed = browser
        .post(
            "/ui/login",
            &[("token", API_TOKEN), ("next", "https://evil.example/")],
        )
        .await;
    assert_eq!(signed.location(), "/ui/", "no redirect off the console");
    let cookie = signed.headers[header::SET_COOKIE].to_str().expect("cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"),
        "{cookie}"
    );
    assert!(
        !cookie.contains(API_TOKEN),
        "the token itself is not stored: {cookie}"
    );

    // A form without the CSRF token, or from another origin, changes nothing.
    let page = browser.get("/ui/jobs/new").await;
    assert_eq!(page.status, StatusCode::OK);
    let csrf = browser.csrf.clone();
    assert_eq!(csrf.len(), 64, "{}", page.body);
    let fields = |url: &'static str| {
        vec![
            ("expected_revision", "0"),
            ("id", "nightly-report"),
            ("schedule", "0 3 * * *"),
            ("timezone", "Europe/Berlin"),
            ("target.type", "http"),
            ("target.url", url),
            ("retry.max_attempts", "3"),
            ("labels", "team=billing"),
        ]
    };
    let forged = browser
        .post("/ui/jobs/new", &fields("https://example.com/run"))
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    let from_elsewhere = browser
        .request(
            browser
                .http
                .post(format!("{}/ui/jobs/new", browser.base))
                .header(header::ORIGIN, "http://evil.example")
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(form(
                    &[
                        &[("csrf", csrf.as_str())][..],
                        &fields("https://example.com/run"),
                    ]
                    .concat(),
                )),
        )
        .await;
    assert_eq!(from_elsewhere.status, StatusCode::FORBIDDEN);
    let (status, _) = stack.get("/v1/jobs/nightly-report").await;
    assert_eq!(status, 404, "a refused form stored nothing");

    // An invalid field comes back next to its input, the rest kept.
    let with_csrf = |mut pairs: Vec<(&'static str, &'static str)>, csrf: &str| {
        let mut all: Vec<(String, String)> = vec![("csrf".into(), csrf.to_string())];
        all.extend(pairs.drain(..).map(|(k, v)| (k.to_string(), v.to_string())));
        all
    };
    let pairs = with_csrf(fields("ftp://example.com/run"), &csrf);
    let borrowed: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let invalid = browser.post("/ui/jobs/new", &borrowed).await;
    assert_eq!(
        invalid.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        invalid.body
    );
    assert!(
        invalid.body.contains(r#"id="f-url-error""#),
        "{}",
        invalid.body
    );
    assert!(
        invalid.body.contains(r#"value="Europe/Berlin""#),
        "the other fields stay filled"
    );
    assert!(
        invalid.body.contains("<ol class=\"preview\">"),
        "the schedule preview shows"
    );
    let pairs = with_csrf(fields("https://example.com/run"), &csrf);
    let borrowed: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let created = browser.post("/ui/jobs/new", &borrowed).await;
    assert_eq!(created.status, StatusCode::SEE_OTHER, "{}", created.body);
    assert_eq!(created.location(), "/ui/jobs/nightly-report?done=created");
    let (status, job) = stack.get("/v1/jobs/nightly-report").await;
    assert_eq!(status, 200);
    assert_eq!(job["job"]["job"]["retry"]["max_attempts"], 3);
    assert_eq!(job["job"]["job"]["labels"]["team"], "billing");
    let revision = job["job"]["revision"].as_u64().expect("revision");

    // Its page: next fires in words and local time, the history.
    let page = browser.get("/ui/jobs/nightly-report?done=created").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("Created."), "{}", page.body);
    assert!(page.body.contains("Europe/Berlin"));
    assert!(page.body.contains("<td>put</td>"));

    // Two editors: the second, on a stale revision, gets a conflict and keeps its edit.
    let edit = browser.get("/ui/jobs/nightly-report/edit").await;
    assert_eq!(
        input_value(&edit.body, "expected_revision"),
        Some(revision.to_string())
    );
    let (status, reply) = stack
        .send(
            reqwest::Method::PUT,
            "/v1/jobs/nightly-report",
            r#"{"schedule":"0 4 * * *","target":{"type":"http","url":"https://example.com/run"}}"#,
            Some(API_TOKEN),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    let stale = revision.to_string();
    let csrf = browser.csrf.clone();
    let conflict = browser
        .post(
            "/ui/jobs/nightly-report/edit",
            &[
                ("csrf", csrf.as_str()),
                ("expected_revision", stale.as_str()),
                ("schedule", "0 5 * * *"),
                ("target.type", "http"),
                ("target.url", "https://example.com/run"),
            ],
        )
        .await;
    assert_eq!(conflict.status, StatusCode::CONFLICT, "{}", conflict.body);
    assert!(
        conflict.body.contains("Someone changed this job"),
        "{}",
        conflict.body
    );
    assert!(
        conflict.body.contains(r#"value="0 5 * * *""#),
        "the edit is kept"
    );
    let (_, job) = stack.get("/v1/jobs/nightly-report").await;
    assert_eq!(job["job"]["job"]["schedule"], "0 4 * * *", "no lost update");

    // Pause and resume from the job page.
    let paused = browser
        .post("/ui/jobs/nightly-report/pause", &[("csrf", csrf.as_str())])
        .await;
    assert_eq!(paused.location(), "/ui/jobs/nightly-report?done=paused");
    let (_, job) = stack.get("/v1/jobs/nightly-report").await;
    assert_eq!(job["job"]["job"]["paused"], true);
    let page = browser.get("/ui/jobs?state=paused").await;
    assert!(
        page.body.contains(">nightly-report</a>"),
        "the table shows the pause at once"
    );
    browser
        .post("/ui/jobs/nightly-report/resume", &[("csrf", csrf.as_str())])
        .await;
    let (_, job) = stack.get("/v1/jobs/nightly-report").await;
    assert!(job["job"]["job"].get("paused").is_none(), "{job}");
    // The history names the console as the author of both, and shows it.
    let (_, history) = stack.get("/v1/jobs/nightly-report/history").await;
    let revisions = history["revisions"].as_array().expect("revisions");
    for revision in &revisions[revisions.len() - 2..] {
        assert_eq!(
            (&revision["author"]["actor"], &revision["author"]["door"]),
            (&serde_json::json!("console"), &serde_json::json!("console")),
            "{revision}"
        );
    }
    let page = browser.get("/ui/jobs/nightly-report").await;
    assert!(
        page.body.contains("<td>console</td>"),
        "the history shows the author"
    );

    // Backfill a past range: the scheduled times in it are queued as runs.
    let backfilled = browser
        .post(
            "/ui/jobs/nightly-report/backfill",
            &[
                ("csrf", csrf.as_str()),
                ("from", "2026-11-01T00:00:00Z"),
                ("to", "2026-11-03T00:00:00Z"),
            ],
        )
        .await;
    assert_eq!(
        backfilled.location(),
        "/ui/jobs/nightly-report?done=backfilled",
        "{}",
        backfilled.body
    );
    let backwards = browser
        .post(
            "/ui/jobs/nightly-report/backfill",
            &[
                ("csrf", csrf.as_str()),
                ("from", "2026-11-03T00:00:00Z"),
                ("to", "2026-11-01T00:00:00Z"),
            ],
        )
        .await;
    assert_eq!(backwards.status, StatusCode::BAD_REQUEST);
    assert!(
        backwards.body.contains("must not be earlier than from"),
        "{}",
        backwards.body
    );

    // Pause and resume by label, from the table.
    let (status, reply) = stack
        .post(
            "/v1/jobs",
            r#"{"id":"other-billing","schedule":"@every 1h","labels":{"team":"billing"},"target":{"type":"nats","subject":"svc.other"}}"#,
        )
        .await;
    assert_eq!(status, 201, "{reply}");
    let table = browser.get("/ui/jobs?labels=team%3Dbilling").await;
    assert!(
        table.body.contains("Pause all with these labels"),
        "{}",
        table.body
    );
    let paused_all = browser
        .post(
            "/ui/jobs:pause",
            &[("csrf", csrf.as_str()), ("labels", "team=billing")],
        )
        .await;
    assert_eq!(
        paused_all.location(),
        "/ui/jobs?labels=team%3Dbilling&done=paused"
    );
    let (_, job) = stack.get("/v1/jobs/other-billing").await;
    assert_eq!(job["job"]["job"]["paused"], true);
    // nightly-report lost its labels in the edit above: not selected.
    let (_, job) = stack.get("/v1/jobs/nightly-report").await;
    assert!(job["job"]["job"].get("paused").is_none(), "{job}");
    browser
        .post(
            "/ui/jobs:resume",
            &[("csrf", csrf.as_str()), ("labels", "team=billing")],
        )
        .await;
    let (_, job) = stack.get("/v1/jobs/other-billing").await;
    assert!(job["job"]["job"].get("paused").is_none(), "{job}");

    // Delete asks first, and deletes the revision confirmed.
    let confirm = browser.get("/ui/jobs/nightly-report/delete").await;
    assert_eq!(confirm.status, StatusCode::OK);
    let confirmed = input_value(&confirm.body, "expected_revision").expect("revision");
    let deleted = browser
        .post(
            "/ui/jobs/nightly-report/delete",
            &[
                ("csrf", csrf.as_str()),
                ("expected_revision", confirmed.as_str()),
            ],
        )
        .await;
    assert_eq!(deleted.location(), "/ui/jobs?done=deleted");
    let (status, _) = stack.get("/v1/jobs/nightly-report").await;
    assert_eq!(status, 404);

    // Signing out ends the session.
    browser.post("/ui/logout", &[("csrf", csrf.as_str())]).await;
    let after = browser.get("/ui/jobs/new").await;
    assert_eq!(after.status, StatusCode::SEE_OTHER);
    stack.stop().await;
}

#[tokio::test]
async fn protected_reads_send_every_page_to_sign_in_and_then_show_secrets() {
    let stack = Stack::start(StackOptions {
        protect_reads: true,
        ..StackOptions::api_only()
    })
    .await;
    let job = r#"{"id":"secretive","schedule":"@every 1h","target":{"type":"http","url":"https://example.com/","headers":{"Authorization":"Bearer s3cr3t-value"}}}"#;
    let (status, reply) = stack.post("/v1/jobs", job).await;
    assert_eq!(status, 201, "{reply}");
    let mut browser = Browser::new(&stack);
    for path in [
        "/ui/",
        "/ui/jobs",
        "/ui/jobs/secretive",
        "/ui/runs",
        "/ui/preview?schedule=*+*+*+*+*",
    ] {
        let page = browser.get(path).await;
        assert_eq!(page.status, StatusCode::SEE_OTHER, "{path}");
        assert!(
            page.location().starts_with("/ui/login?next="),
            "{path}: {}",
            page.location()
        );
    }
    browser.sign_in().await;
    let page = browser.get("/ui/jobs/secretive").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains("s3cr3t-value"),
        "a signed-in operator sees the header"
    );

    // With open reads, an anonymous viewer sees it redacted.
    let open = Stack::start(StackOptions::api_only()).await;
    let (status, reply) = open.post("/v1/jobs", job).await;
    assert_eq!(status, 201, "{reply}");
    let page = Browser::new(&open).get("/ui/jobs/secretive").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(!page.body.contains("s3cr3t-value"), "{}", page.body);
    assert!(page.body.contains("sign in to see them"), "{}", page.body);
    open.stop().await;
    stack.stop().await;
}

#[tokio::test]
async fn the_job_table_pages_filters_and_sorts_many_jobs() {
    let stack = Stack::start(StackOptions::api_only()).await;
    // Written straight into the bucket, as `nats kv put` does.
    for i in 0..120 {
        let team = if i % 4 == 0 { "search" } else { "billing" };
        let job = format!(
            r#"{{"id":"job-{i:03}","schedule":"@every 1h","description":"report number {i}","labels":{{"team":"{team}"}},"target":{{"type":"nats","subject":"svc.r{i}"}}}}"#
        );
        stack.kv_put(&format!("job-{i:03}"), job.as_bytes()).await;
    }
    stack
        .kv_put("broken", br#"{"id":"broken","schedule":"not a schedule"}"#)
        .await;
    let mut browser = Browser::new(&stack);
    let first = wait_until(
        "the table has every job",
        Duration::from_secs(10),
        || async {
            let page = Browser::new(&stack).get("/ui/jobs").await;
            page.body.contains("Jobs 1–50 of 121.").then_some(page)
        },
    )
    .await;
    assert!(first.body.contains(">broken</a>") && first.body.contains("invalid"));
    assert!(first.body.contains(">job-048</a>") && !first.body.contains(">job-049</a>"));
    assert!(first.body.contains(r#"rel="next""#));

    let last = browser.get("/ui/jobs?page=3").await;
    assert!(last.body.contains("Jobs 101–121 of 121."), "{}", last.body);
    assert!(last.body.contains(">job-119</a>") && !last.body.contains(r#"rel="next""#));

    let search = browser.get("/ui/jobs?labels=team%3Dsearch").await;
    assert!(
        search
            .body
            .contains("Jobs 1–30 of 30 matching (121 in all)."),
        "{}",
        search.body
    );
    assert!(!search.body.contains(">job-001</a>"));

    let text = browser.get("/ui/jobs?q=NUMBER+11").await;
    assert!(text.body.contains("of 11 matching"), "{}", text.body);

    let descending = browser.get("/ui/jobs?sort=id&dir=desc").await;
    let first_row = descending.body.find(">job-119</a>").expect("job-119");
    let later_row = descending.body.find(">job-118</a>").expect("job-118");
    assert!(first_row < later_row);
    assert!(descending.body.contains(r#"aria-sort="descending""#));

    let bad = browser.get("/ui/jobs?labels=team").await;
    assert!(bad.body.contains("is not key=value"), "{}", bad.body);
    stack.stop().await;
}

#[tokio::test]
async fn job_text_renders_as_text_on_every_page() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    let script = "<script>alert(1)</script>";
    let image = "\"><img src=x onerror=alert(1)>";
    let hostile = format!("{script}{image}");
    let job = serde_json::json!({
        "id": "xss-check",
        "schedule": "@every 1h",
        "description": hostile,
        "labels": {"note": format!("{image}{script}")},
        "target": {"type": "shell", "command": format!("echo '{script}{image}'; exit 3"), "env": {"NOTE": hostile}},
        "notify": {"webhook": "http://127.0.0.1:9/hook", "headers": {"X-Note": hostile}},
    });
    let (status, reply) = stack.post("/v1/jobs", &job.to_string()).await;
    assert_eq!(status, 201, "{reply}");
    let http_job = serde_json::json!({
        "id": "xss-http",
        "schedule": "@every 1h",
        "description": hostile,
        "target": {"type": "http", "url": "http://127.0.0.1:9/x", "method": "POST", "body": hostile, "headers": {"X-Note": hostile}},
    });
    let (status, reply) = stack.post("/v1/jobs", &http_job.to_string()).await;
    assert_eq!(status, 201, "{reply}");
    let nats_job = serde_json::json!({
        "id": "xss-nats",
        "schedule": "@every 1h",
        "description": hostile,
        "target": {"type": "nats", "subject": "svc.xss", "payload": hostile},
    });
    let (status, reply) = stack.post("/v1/jobs", &nats_job.to_string()).await;
    assert_eq!(status, 201, "{reply}");
    let run_id = stack.trigger("xss-check").await;
    stack
        .wait_for_run_status(&run_id, "failed", Duration::from_secs(20))
        .await;
    // A kill reason is free text too.
    let sleeper = r#"{"id":"xss-sleep","schedule":"@every 1h","target":{"type":"shell","command":"sleep 60"}}"#;
    let (status, reply) = stack.post("/v1/jobs", sleeper).await;
    assert_eq!(status, 201, "{reply}");
    let sleeping = stack.trigger("xss-sleep").await;
    stack
        .wait_for_run_status(&sleeping, "running", Duration::from_secs(20))
        .await;

    let mut browser = Browser::new(&stack);
    browser.sign_in().await;
    let csrf = {
        browser.get(&format!("/ui/runs/{sleeping}")).await;
        browser.csrf.clone()
    };
    let killed = browser
        .post(
            &format!("/ui/runs/{sleeping}/kill"),
            &[("csrf", csrf.as_str()), ("reason", hostile.as_str())],
        )
        .await;
    assert_eq!(killed.status, StatusCode::SEE_OTHER, "{}", killed.body);
    stack
        .wait_for_run_status(&sleeping, "killed", Duration::from_secs(20))
        .await;
    for path in [
        format!("/ui/runs/{sleeping}"),
        "/ui/jobs/xss-http".to_string(),
        "/ui/jobs/xss-http/edit".to_string(),
        "/ui/jobs/xss-nats".to_string(),
        "/ui/jobs/xss-nats/edit".to_string(),
        "/ui/jobs".to_string(),
        "/ui/jobs?q=%3Cscript%3E".to_string(),
        "/ui/jobs/xss-check".to_string(),
        "/ui/jobs/xss-check/edit".to_string(),
        format!("/ui/runs/{run_id}"),
    ] {
        let page = browser.get(&path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}: {}", page.body);
        for raw in ["<script>alert", "<img src=x", "onerror=alert(1)>"] {
            assert!(
                !page.body.contains(raw),
                "{path} has {raw:?} unescaped:\n{}",
                page.body
            );
        }
        assert!(
            page.body.contains("&#60;script&#62;alert(1)")
                || page.body.contains("&lt;script&gt;alert(1)"),
            "{path} shows the text, escaped:\n{}",
            page.body
        );
    }
    // Text typed into a filter comes back escaped too.
    let listing = browser
        .get("/ui/runs?job=xss-check&q=%3Cscript%3Ealert")
        .await;
    assert!(!listing.body.contains("<script>alert"), "{}", listing.body);
    assert!(
        listing.body.contains("&#60;script&#62;alert")
            || listing.body.contains("&lt;script&gt;alert"),
        "{}",
        listing.body
    );
    let run = browser.get(&format!("/ui/runs/{run_id}")).await;
    assert!(run.body.contains("exit 3"), "{}", run.body);
    stack.stop().await;
}

/// A namespace's access managed in the console: an admin of `*` makes a
/// team's token (shown once, and it signs in), gives a group a role and
/// sets the policy; a bad policy names its field and changes nothing; a
/// team's admin manages its own namespace only, an operator none; a token
/// revoked there is refused at once.
#[tokio::test]
async fn access_is_managed_on_the_access_page() {
    let stack = Stack::start(StackOptions {
        executor: false,
        ..StackOptions::default()
    })
    .await;
    let mut admin = Browser::new(&stack);
    admin.sign_in().await;
    let page = admin.get("/ui/access?namespace=billing").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("Access to billing"), "{}", page.body);
    let csrf = admin.csrf.clone();

    // A token, shown once; it signs a team member in.
    let made = admin
        .post(
            "/ui/access/tokens",
            &[
                ("csrf", csrf.as_str()),
                ("namespace", "billing"),
                ("role", "operator"),
                ("description", "billing on-call"),
                ("expires_in", "30d"),
            ],
        )
        .await;
    assert_eq!(made.status, StatusCode::OK, "{}", made.body);
    let token = {
        let start = made
            .body
            .find("value=\"jct_")
            .expect("the token on the page")
            + 7;
        let end = made.body[start..].find('"').expect("its end") + start;
        made.body[start..end].to_string()
    };
    assert!(token.starts_with("jct_"), "{token}");
    let mut member = Browser::new(&stack);
    member.sign_in_with(&token).await;
    let own = member.get("/ui/jobs").await;
    assert!(own.body.contains("operator of billing"), "{}", own.body);
    let refused = member.get("/ui/access").await;
    assert_eq!(
        refused.status,
        StatusCode::FORBIDDEN,
        "an operator manages access"
    );

    // A group's role and the policy, written through the console.
    let bound = admin
        .post(
            "/ui/access/bindings",
            &[
                ("csrf", csrf.as_str()),
                ("namespace", "billing"),
                ("subject", "group:Billing Devs"),
                ("role", "editor"),
            ],
        )
        .await;
    assert_eq!(bound.location(), "/ui/access?namespace=billing&done=saved");
    let (_, bindings) = stack
        .send(
            reqwest::Method::GET,
            "/v1/namespaces/billing/bindings",
            "",
            Some(API_TOKEN),
        )
        .await;
    assert_eq!(bindings["bindings"][0]["subject"], "group:Billing Devs");
    assert_eq!(bindings["bindings"][0]["author"]["door"], "console");
    let policy = r#"{"nats_subjects":["billing.>"],"shell":false}"#;
    let set = admin
        .post(
            "/ui/access/policy",
            &[
                ("csrf", csrf.as_str()),
                ("namespace", "billing"),
                ("policy", policy),
            ],
        )
        .await;
    assert_eq!(set.location(), "/ui/access?namespace=billing&done=saved");
    let bad = admin
        .post(
            "/ui/access/policy",
            &[
                ("csrf", csrf.as_str()),
                ("namespace", "billing"),
                ("policy", r#"{"nats_subjects":["billing.>.x"]}"#),
            ],
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{}", bad.body);
    assert!(bad.body.contains("nats_subjects[0]"), "{}", bad.body);
    let (_, read) = stack.get("/v1/namespaces/billing/policy").await;
    assert_eq!(
        read["policy"],
        serde_json::json!({"nats_subjects": ["billing.>"], "shell": false})
    );
    let page = admin.get("/ui/access?namespace=billing").await;
    assert!(page.body.contains("billing on-call"), "the token is listed");
    assert!(
        page.body.contains("group:Billing Devs"),
        "the binding is listed"
    );

    // A team's admin: its own namespace, whatever it asks for.
    let (team_admin, _) = stack.scoped_token("billing", "admin").await;
    let mut team = Browser::new(&stack);
    team.sign_in_with(&team_admin).await;
    let page = team.get("/ui/access?namespace=ops").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("Access to billing"), "{}", page.body);

    // Revoked from the page: refused at once.
    let (_, listed) = stack
        .send(reqwest::Method::GET, "/v1/tokens", "", Some(API_TOKEN))
        .await;
    let id = listed["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .find(|t| t["description"] == "billing on-call")
        .and_then(|t| t["id"].as_str())
        .expect("the token's id")
        .to_string();
    let revoked = admin
        .post(
            &format!("/ui/access/tokens/{id}/revoke"),
            &[("csrf", csrf.as_str()), ("namespace", "billing")],
        )
        .await;
    assert_eq!(
        revoked.location(),
        "/ui/access?namespace=billing&done=revoked"
    );
    // A write: refused as unauthorized (no such token), not as forbidden.
    let (status, _) = stack
        .send(
            reqwest::Method::POST,
            "/v1/jobs/billing.x/pause",
            "",
            Some(&token),
        )
        .await;
    assert_eq!(status, 401, "a revoked token is still accepted");
    stack.stop().await;
}
