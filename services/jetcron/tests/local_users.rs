//! Local users, as an install without an identity provider has them:
//! added with `jetcron users add` (the real binary, the password piped in),
//! signed in with a name and a password, given roles by bindings of
//! `user:<name>` that hold from their next request, named in the audit of
//! what they write; a wrong name and a wrong password told the same; the
//! sign-in limited per name and per address; a changed password or a
//! removed user ending their sessions.

use std::process::Stdio;
use std::time::Duration;

use jetcron_testkit::reqwest::{header, Method, StatusCode};
use jetcron_testkit::{Stack, StackOptions, API_TOKEN};
use tokio::io::AsyncWriteExt as _;

use crate::form_browser::{alert_text, invoices_job_form, Browser};

const NO_MATCH: &str = "That name and password do not match.";

/// Run `jetcron users <args>` against `stack`'s NATS with `stdin` piped
/// in; its exit status and output.
async fn users(stack: &Stack, args: &[&str], stdin: &str) -> (bool, String) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_jetcron"))
        .arg("users")
        .args(args)
        .arg("--nats-url")
        .arg(stack.nats.url())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn jetcron users");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin.as_bytes()).await.expect("write");
    drop(input);
    let output = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("jetcron users ends")
        .expect("output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// Post the password form as `name`.
async fn sign_in(browser: &mut Browser, name: &str, password: &str) -> crate::form_browser::Page {
    browser
        .post(
            "/ui/login/password",
            &[("name", name), ("password", password), ("next", "/ui/jobs")],
        )
        .await
}

async fn bind(stack: &Stack, namespace: &str, subject: &str, role: Option<&str>) {
    let path = format!("/v1/namespaces/{namespace}/bindings/{subject}");
    let (method, body) = match role {
        Some(role) => (Method::PUT, format!(r#"{{"role":"{role}"}}"#)),
        None => (Method::DELETE, String::new()),
    };
    let (status, answer) = stack.send(method, &path, &body, Some(API_TOKEN)).await;
    assert!(status == 200 || status == 201, "{status} {answer}");
}

#[tokio::test]
async fn a_local_user_signs_in_holds_their_bindings_and_is_named_in_the_audit() {
    let stack = Stack::start(StackOptions {
        ticker: false,
        executor: false,
        ..StackOptions::default()
    })
    .await;
    // Bad names and short passwords change nothing.
    let (ok, said) = users(&stack, &["add", "Alice@corp"], "long enough password\n").await;
    assert!(!ok && said.contains("NAME:"), "{said}");
    let (ok, said) = users(&stack, &["add", "alice"], "short\n").await;
    assert!(!ok && said.contains("at least 10"), "{said}");
    let (ok, said) = users(&stack, &["add", "alice"], "alice's first password\n").await;
    assert!(ok, "{said}");
    let (ok, said) = users(&stack, &["add", "alice"], "another password!\n").await;
    assert!(!ok && said.contains("exists already"), "{said}");
    let (ok, listed) = users(&stack, &["list"], "").await;
    assert!(ok && listed.starts_with("alice\t"), "{listed}");
    assert!(!listed.contains("argon2"), "no hash listed: {listed}");

    // A wrong password and an unknown name are told the same.
    let mut browser = Browser::new(&stack);
    let wrong = sign_in(&mut browser, "alice", "alice's wrong password").await;
    let unknown = sign_in(&mut browser, "mallory", "alice's first password").await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert_eq!(unknown.status, StatusCode::UNAUTHORIZED);
    assert_eq!(alert_text(&wrong.body), NO_MATCH, "{}", wrong.body);
    assert_eq!(alert_text(&unknown.body), NO_MATCH);
    assert!(browser.cookie.is_none());

    // Signed in, bound nowhere: told so.
    let signed = sign_in(&mut browser, "alice", "alice's first password").await;
    assert_eq!(signed.status, StatusCode::SEE_OTHER, "{}", signed.body);
    assert_eq!(signed.location(), "/ui/jobs");
    let nowhere = browser.get("/ui/jobs").await;
    assert_eq!(nowhere.status, StatusCode::FORBIDDEN, "{}", nowhere.body);
    assert!(
        nowhere.body.contains("no role in any namespace"),
        "{}",
        nowhere.body
    );
    for page in ["/ui/runs", "/ui/channels", "/ui/access"] {
        let refused = browser.get(page).await;
        assert_eq!(
            refused.status,
            StatusCode::FORBIDDEN,
            "{page}: {}",
            refused.body
        );
    }
    assert_eq!(browser.get("/ui/").await.location(), "/ui/jobs");

    // A binding holds from the next request: an editor of billing, a
    // viewer of ops; her name in the header; another namespace not shown.
    stack.put_job(r#"{"id":"ops.cleanup","schedule":"0 0 3 * * *","labels":{"team":"pay"},"target":{"type":"nats","subject":"svc.cleanup"}}"#).await;
    stack.put_job(r#"{"id":"billing.charge","schedule":"0 0 3 * * *","labels":{"team":"pay"},"target":{"type":"nats","subject":"svc.charge"}}"#).await;
    stack.put_job(r#"{"id":"hr.payroll","schedule":"0 0 3 * * *","target":{"type":"nats","subject":"svc.payroll"}}"#).await;
    bind(&stack, "billing", "user:alice", Some("editor")).await;
    bind(&stack, "ops", "user:alice", Some("viewer")).await;
    let jobs = browser.get("/ui/jobs").await;
    assert_eq!(jobs.status, StatusCode::OK, "{}", jobs.body);
    assert!(jobs.body.contains("alice"), "her name is shown");
    let ops = browser.get("/ui/jobs?namespace=ops").await;
    assert!(ops.body.contains("ops.cleanup"), "{}", ops.body);
    let hr = browser.get("/ui/jobs?namespace=hr").await;
    assert!(!hr.body.contains("hr.payroll"), "{}", hr.body);
    assert_eq!(
        browser.get("/ui/jobs/hr.payroll").await.status,
        StatusCode::FORBIDDEN
    );

    // A label selection acts in the namespace the table shows: in ops she
    // only views, so none is offered, and one sent anyway is refused with
    // billing's matching job untouched.
    let selected = browser
        .get("/ui/jobs?namespace=ops&labels=team%3Dpay")
        .await;
    assert!(selected.body.contains("ops.cleanup"), "{}", selected.body);
    assert!(!selected.body.contains("Pause all with these labels"));
    let csrf = browser.csrf.clone();
    let sent = browser
        .post(
            "/ui/jobs:pause",
            &[
                ("csrf", csrf.as_str()),
                ("labels", "team=pay"),
                ("namespace", "ops"),
            ],
        )
        .await;
    assert_eq!(sent.status, StatusCode::FORBIDDEN, "{}", sent.body);
    let (_, charge) = stack.get("/v1/jobs/billing.charge").await;
    assert_ne!(charge["job"]["job"]["paused"], true, "{charge}");
    assert!(charge["job"]["revision"].as_u64().is_some(), "{charge}");

    // What she writes names her: a job made through the console.
    browser.get("/ui/jobs/new").await;
    let csrf = browser.csrf.clone();
    let made = browser
        .post("/ui/jobs/new", &invoices_job_form(&csrf))
        .await;
    assert_eq!(made.status, StatusCode::SEE_OTHER, "{}", made.body);
    let (status, history) = stack.get("/v1/jobs/billing.invoices/history").await;
    assert_eq!(status, 200, "{history}");
    let author = &history["revisions"][0]["author"];
    assert_eq!(author["actor"], "user:alice", "{history}");
    assert_eq!(author["door"], "console", "{history}");
    assert_eq!(author["note"], "local user", "{history}");
    // In ops she only views: the form is refused.
    let refused = browser
        .post("/ui/jobs/ops.cleanup/pause", &[("csrf", csrf.as_str())])
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);

    // Unbound: refused from the next request.
    bind(&stack, "billing", "user:alice", None).await;
    bind(&stack, "ops", "user:alice", None).await;
    assert_eq!(browser.get("/ui/jobs").await.status, StatusCode::FORBIDDEN);

    // A new password ends her session; the new one signs in.
    let (ok, said) = users(&stack, &["passwd", "alice"], "alice's second password\n").await;
    assert!(ok, "{said}");
    let ended = browser.get("/ui/jobs/new").await;
    assert_eq!(ended.status, StatusCode::SEE_OTHER, "{}", ended.body);
    let old = sign_in(&mut browser, "alice", "alice's first password").await;
    assert_eq!(old.status, StatusCode::UNAUTHORIZED);
    let new = sign_in(&mut browser, "alice", "alice's second password").await;
    assert_eq!(new.status, StatusCode::SEE_OTHER, "{}", new.body);

    // Removed: her session ends, and she cannot sign in.
    let (ok, said) = users(&stack, &["remove", "alice"], "").await;
    assert!(ok, "{said}");
    assert_eq!(
        browser.get("/ui/jobs/new").await.status,
        StatusCode::SEE_OTHER
    );
    let gone = sign_in(&mut browser, "alice", "alice's second password").await;
    assert_eq!(gone.status, StatusCode::UNAUTHORIZED);
    assert_eq!(alert_text(&gone.body), NO_MATCH);
    stack.stop().await;
}

#[tokio::test]
async fn password_sign_ins_are_limited_per_name_and_per_address_alike_for_unknown_names() {
    let limits = jetcron_gateway::limits::Limits {
        sign_in: jetcron_gateway::people::sign_in_limits::SignInLimits {
            name_failures: 3,
            name_window: Duration::from_secs(120),
            address_attempts: 20,
            address_window: Duration::from_secs(120),
        },
        ..Default::default()
    };
    let stack = Stack::start(StackOptions {
        ticker: false,
        executor: false,
        limits,
        ..StackOptions::default()
    })
    .await;
    let (ok, said) = users(&stack, &["add", "bob"], "bob's good password\n").await;
    assert!(ok, "{said}");
    let mut browser = Browser::new(&stack);
    // An existing name and an unknown one: three failures each, then the
    // fourth try is refused unchecked (even with the right password),
    // with the same answer for both.
    let mut limited = Vec::new();
    for (name, right) in [("bob", "bob's good password"), ("nobody", "whatever it is")] {
        for _ in 0..3 {
            let page = sign_in(&mut browser, name, "a wrong password").await;
            assert_eq!(page.status, StatusCode::UNAUTHORIZED, "{}", page.body);
        }
        let page = sign_in(&mut browser, name, right).await;
        assert_eq!(page.status, StatusCode::TOO_MANY_REQUESTS, "{}", page.body);
        let wait: u64 = page.headers[header::RETRY_AFTER]
            .to_str()
            .expect("retry-after")
            .parse()
            .expect("seconds");
        assert!((100..=120).contains(&wait), "{wait}");
        limited.push(alert_text(&page.body).to_string());
    }
    assert_eq!(limited[0], limited[1]);
    assert!(
        limited[0].contains("try again in 2 minutes"),
        "{}",
        limited[0]
    );
    assert!(browser.cookie.is_none());

    // A burst of parallel tries for one name: no more are checked than
    // the limit, however many arrive before the first is answered.
    let burst = (0..6).map(|_| {
        let mut browser = Browser::new(&stack);
        async move {
            sign_in(&mut browser, "erin", "a wrong password")
                .await
                .status
        }
    });
    let statuses = futures::future::join_all(burst).await;
    let checked = statuses
        .iter()
        .filter(|s| **s == StatusCode::UNAUTHORIZED)
        .count();
    let limited = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!((checked, limited), (3, 3), "{statuses:?}");

    // Per address: 14 tries so far; the 20th is the last one taken.
    for i in 0..6 {
        let page = sign_in(&mut browser, &format!("user{i}"), "a wrong password").await;
        assert_eq!(page.status, StatusCode::UNAUTHORIZED, "try {}", 15 + i);
    }
    let page = sign_in(&mut browser, "carol", "a wrong password").await;
    assert_eq!(page.status, StatusCode::TOO_MANY_REQUESTS, "{}", page.body);
    stack.stop().await;
}
