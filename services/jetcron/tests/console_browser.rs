//! The console in a real browser (Debian's headless Chromium over WebDriver)
//! against the real stack: sign in; create a job through the form, an
//! invalid field corrected after its error shows, with the live preview;
//! watch its runs appear; read a failed run's error; pause, resume, trigger;
//! kill a long shell run; edit on a stale revision and see the conflict;
//! job text that tries to run as script stays text; the table on a phone.
//!
//! Screenshots of the main pages are taken on every run; with
//! `JETCRON_UPDATE_SCREENSHOTS=1` they replace those in `docs/console/`.

use std::path::PathBuf;
use std::time::Duration;

use fantoccini::{Client, Locator};

use crate::browser_steps::{click, fill};
use jetcron_testkit::{wait_until, Browser, Stack, StackOptions, API_TOKEN};

async fn text_of(client: &Client, css: &str) -> String {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css}: {e}"))
        .text()
        .await
        .expect("text")
}

async fn body_text(client: &Client) -> String {
    text_of(client, "body").await
}

/// Wait (without reloading) until the page's text contains `wanted`: a
/// click that submits a form returns before the next page has loaded.
async fn wait_for_page(client: &Client, wanted: &str) -> String {
    wait_until(
        &format!("the page shows {wanted:?}"),
        Duration::from_secs(10),
        || async {
            let body = client.find(Locator::Css("body")).await.ok()?;
            let text = body.text().await.ok()?;
            text.contains(wanted).then_some(text)
        },
    )
    .await
}

/// Click `css` (a submit button) and wait for the page that says `wanted`.
async fn submit(client: &Client, css: &str, wanted: &str) -> String {
    click(client, css).await;
    wait_for_page(client, wanted).await
}

/// Click `css` and wait for the page that has an element `expected`.
async fn submit_to(client: &Client, css: &str, expected: &str) {
    click(client, css).await;
    wait_until(
        &format!("the page has {expected}"),
        Duration::from_secs(10),
        || async { client.find(Locator::Css(expected)).await.ok().map(|_| ()) },
    )
    .await
}

/// Reload `url` until its text contains `wanted`.
async fn wait_for_text(client: &Client, url: &str, wanted: &str, timeout: Duration) -> String {
    wait_until(&format!("{url} shows {wanted:?}"), timeout, || async {
        client.goto(url).await.ok()?;
        let text = body_text(client).await;
        text.contains(wanted).then_some(text)
    })
    .await
}

struct Screenshots {
    dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

impl Screenshots {
    fn new() -> Self {
        if std::env::var_os("JETCRON_UPDATE_SCREENSHOTS").is_some() {
            let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/console");
            std::fs::create_dir_all(&dir).expect("docs/console");
            Self { dir, _temp: None }
        } else {
            let temp = tempfile::tempdir().expect("screenshot dir");
            Self {
                dir: temp.path().to_path_buf(),
                _temp: Some(temp),
            }
        }
    }

    async fn take(&self, client: &Client, name: &str) {
        let png = client.screenshot().await.expect("screenshot");
        assert!(
            png.starts_with(b"\x89PNG") && png.len() > 2_000,
            "{name}: not a PNG"
        );
        std::fs::write(self.dir.join(format!("{name}.png")), png).expect("write screenshot");
    }
}

#[tokio::test]
async fn an_operator_works_through_the_console_in_a_browser() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    let base = stack.http_base.clone();
    let browser = Browser::start(1280, 900).await;
    let client = &browser.client;
    let shots = Screenshots::new();

    // A job that fails, and its failed run, for the overview and the run page.
    let failing = r#"{"id":"billing-export","schedule":"@every 1h","description":"Export invoices","labels":{"team":"billing"},"target":{"type":"shell","command":"echo 'connecting to sftp'; echo 'sftp: permission denied' >&2; exit 4"}}"#;
    let (status, reply) = stack.post("/v1/jobs", failing).await;
    assert_eq!(status, 201, "{reply}");
    let failed_run = stack.trigger("billing-export").await;

    // Sign in.
    client
        .goto(&format!("{base}/ui/jobs/new"))
        .await
        .expect("goto");
    let url = client.current_url().await.expect("url");
    assert_eq!(
        url.path(),
        "/ui/login",
        "writing pages ask to sign in first"
    );
    fill(client, "#token", API_TOKEN).await;
    submit(
        client,
        "form[action='/ui/login'] button[type=submit]",
        "New job",
    )
    .await;
    let url = client.current_url().await.expect("url");
    assert_eq!(
        url.path(),
        "/ui/jobs/new",
        "back where the operator was going"
    );

    // The form: the live preview follows the schedule as it is typed.
    fill(client, "#f-id", "hello-every-second").await;
    fill(client, "#f-description", "Says hello").await;
    fill(client, "#f-schedule", "*/1 * * * * *").await;
    fill(client, "#f-timezone", "Europe/Berlin").await;
    wait_until("the live preview", Duration::from_secs(10), || async {
        let preview = text_of(client, "#preview").await;
        preview.contains("Europe/Berlin").then_some(())
    })
    .await;
    client
        .find(Locator::Css("#f-type"))
        .await
        .expect("type select")
        .select_by_value("shell")
        .await
        .expect("select shell");
    assert!(
        !client
            .find(Locator::Css("#f-url"))
            .await
            .expect("url input")
            .is_displayed()
            .await
            .expect("displayed"),
        "the script shows only the chosen target's fields"
    );
    fill(client, "#f-command", "echo hello from the console").await;
    fill(client, "#f-attempts", "three").await;
    fill(client, "#f-labels", "team=ops").await;
    shots.take(client, "edit").await;
    submit_to(client, "#save-form", "#f-attempts-error").await;
    let error = text_of(client, "#f-attempts-error").await;
    assert!(!error.is_empty(), "the error shows next to its field");
    assert_eq!(
        client
            .find(Locator::Css("#f-attempts"))
            .await
            .expect("attempts")
            .attr("aria-invalid")
            .await
            .expect("attr")
            .as_deref(),
        Some("true")
    );
    fill(client, "#f-attempts", "2").await;
    submit(client, "#save-form", "Created.").await;
    let url = client.current_url().await.expect("url");
    assert_eq!(url.path(), "/ui/jobs/hello-every-second");

    // Its runs appear.
    let job_page = format!("{base}/ui/jobs/hello-every-second");
    wait_for_text(client, &job_page, "succeeded", Duration::from_secs(30)).await;
    shots.take(client, "job").await;

    // Pause, resume, trigger.
    submit(client, "form[action$='/pause'] button", "Paused.").await;
    let (_, job) = stack.get("/v1/jobs/hello-every-second").await;
    assert_eq!(job["job"]["job"]["paused"], true);
    submit(client, "form[action$='/resume'] button", "Resumed.").await;
    submit(client, "form[action$='/trigger'] button", "Triggered").await;
    wait_for_text(client, &job_page, "manual", Duration::from_secs(20)).await;

    // A failed run: its error and output.
    let run_page = format!("{base}/ui/runs/{failed_run}");
    let text = wait_for_text(client, &run_page, "failed", Duration::from_secs(30)).await;
    assert!(text.contains("exit 4"), "{text}");
    assert!(text_of(client, "#run-output")
        .await
        .contains("permission denied"));
    shots.take(client, "run").await;

    // Kill a long-running shell run.
    let long = r#"{"id":"long-sleep","schedule":"@every 1h","target":{"type":"shell","command":"sleep 120"},"timeout":"5m"}"#;
    let (status, reply) = stack.post("/v1/jobs", long).await;
    assert_eq!(status, 201, "{reply}");
    let long_run = stack.trigger("long-sleep").await;
    let long_page = format!("{base}/ui/runs/{long_run}");
    wait_for_text(client, &long_page, "running", Duration::from_secs(20)).await;
    fill(
        client,
        "#kill-reason",
        "stuck, killed from the browser test",
    )
    .await;
    click(client, "form[action$='/kill'] button").await;
    client.accept_alert().await.expect("confirm the kill");
    wait_for_text(client, &long_page, "killed", Duration::from_secs(30)).await;

    // Two editors: the form opened before someone else's change gets a conflict.
    client
        .goto(&format!("{job_page}/edit"))
        .await
        .expect("edit page");
    let (status, reply) = stack
        .send(
            jetcron_testkit::reqwest::Method::PUT,
            "/v1/jobs/hello-every-second",
            r#"{"schedule":"@every 1h","target":{"type":"shell","command":"echo changed elsewhere"}}"#,
            Some(API_TOKEN),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    fill(client, "#f-description", "my edit").await;
    // (The edit page has loaded: it shows the revision it edits.)
    submit(client, "#save-form", "Someone changed this job").await;
    assert!(
        text_of(client, "#conflict")
            .await
            .contains("your edit is below")
            || text_of(client, "#conflict")
                .await
                .contains("Your edit is below")
    );
    let (_, job) = stack.get("/v1/jobs/hello-every-second").await;
    assert_eq!(
        job["job"]["job"]["target"]["command"],
        "echo changed elsewhere"
    );

    // Text that tries to run stays text.
    let hostile = serde_json::json!({
        "id": "hostile",
        "schedule": "@every 1h",
        "description": "<script>document.title='pwned'</script>\"><img src=x onerror=\"document.title='pwned'\">",
        "labels": {"note": "\"><img src=x onerror=\"document.title='pwned'\">"},
        "target": {"type": "shell", "command": "echo '<script>document.title=1</script>'"},
    });
    let (status, reply) = stack.post("/v1/jobs", &hostile.to_string()).await;
    assert_eq!(status, 201, "{reply}");
    for path in ["/ui/jobs", "/ui/jobs/hostile", "/ui/jobs/hostile/edit"] {
        client.goto(&format!("{base}{path}")).await.expect("goto");
        let title = client.title().await.expect("title");
        assert!(!title.contains("pwned"), "{path}: script ran");
        assert_eq!(
            client
                .find_all(Locator::Css("main img"))
                .await
                .expect("images")
                .len(),
            0,
            "{path}: markup from a job became an element"
        );
    }
    client
        .goto(&format!("{base}/ui/jobs/hostile"))
        .await
        .expect("goto");
    assert!(text_of(client, ".description").await.contains("<script>"));

    // Every control has an accessible name: a label, or its own text.
    for path in [
        "/ui/".to_string(),
        "/ui/jobs?labels=team%3Dbilling".to_string(),
        "/ui/jobs/hello-every-second".to_string(),
        "/ui/jobs/hello-every-second/edit".to_string(),
        "/ui/jobs/new".to_string(),
        format!("/ui/runs/{failed_run}"),
        "/ui/runs".to_string(),
    ] {
        client.goto(&format!("{base}{path}")).await.expect("goto");
        let unlabelled = client
            .execute(
                "return Array.from(document.querySelectorAll('input:not([type=hidden]), select, textarea, button'))\
                   .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label') && !e.textContent.trim())\
                   .map(e => e.outerHTML)",
                vec![],
            )
            .await
            .expect("label check");
        assert_eq!(
            unlabelled,
            serde_json::json!([]),
            "{path}: controls without a label"
        );
    }

    // The overview and the table, then the table on a phone.
    wait_for_text(
        client,
        &format!("{base}/ui/"),
        "failures",
        Duration::from_secs(10),
    )
    .await;
    shots.take(client, "overview").await;
    client.goto(&format!("{base}/ui/jobs")).await.expect("jobs");
    shots.take(client, "jobs").await;
    client.set_window_size(390, 844).await.expect("phone size");
    client.goto(&format!("{base}/ui/jobs")).await.expect("jobs");
    let width: u64 = client
        .execute("return document.documentElement.scrollWidth", vec![])
        .await
        .expect("width")
        .as_u64()
        .expect("a number");
    assert!(width <= 400, "the table fits a phone: {width}px wide");
    shots.take(client, "jobs-phone").await;

    browser.close().await;
    stack.stop().await;
}
