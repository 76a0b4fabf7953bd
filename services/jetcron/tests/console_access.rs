//! The console as everyone must be able to use it, in a real browser
//! (Debian's headless Chromium): a person signs in through the company's
//! identity provider (a real OpenID Connect provider process) and gets
//! their group's roles; every page, signed out and in, at desktop and
//! phone widths, has no serious or critical violation axe-core finds
//! (WCAG 2.1 A/AA and best practices); the keyboard reaches the content
//! first and shows where its focus is; a write names the person in the
//! audit; signing out ends the session.

use std::time::Duration;

use fantoccini::{Client, Locator};

use crate::browser_steps::{click, fill};
use jetcron_testkit::{wait_until, Browser, Stack, StackOptions, API_TOKEN};
use tokio_util::sync::CancellationToken;

/// Go to `url` and wait until the page says `wanted`.
async fn visit(client: &Client, url: &str, wanted: &str) {
    client.goto(url).await.expect("goto");
    page_says(client, wanted).await;
}

async fn page_says(client: &Client, wanted: &str) -> String {
    wait_until(
        &format!("the page shows {wanted:?}"),
        Duration::from_secs(15),
        || async {
            let text = client
                .find(Locator::Css("body"))
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            text.contains(wanted).then_some(text)
        },
    )
    .await
}

async fn href_of(client: &Client, css: &str) -> String {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css}: {e}"))
        .attr("href")
        .await
        .expect("href")
        .unwrap_or_else(|| panic!("{css} has no href"))
}

/// WebDriver's Tab and Enter keys.
const TAB: &str = "\u{e004}";
const ENTER: &str = "\u{e007}";

/// Press `key` where the focus is.
async fn press(client: &Client, key: &str) {
    client
        .active_element()
        .await
        .expect("focused element")
        .send_keys(key)
        .await
        .expect("key");
}

/// axe-core's serious and critical findings on the page shown, as
/// `<page>: <finding>` lines.
async fn findings(browser: &Browser, page: &str) -> Vec<String> {
    browser
        .axe()
        .await
        .into_iter()
        .map(|finding| format!("{page}: {finding}"))
        .collect()
}

/// Whether the element focused now shows a visible focus outline.
async fn focus_is_visible(client: &Client) -> serde_json::Value {
    client
        .execute(
            "const e = document.activeElement; const s = getComputedStyle(e);
             return { tag: e.tagName, text: (e.textContent || '').trim().slice(0, 40),
                      href: e.getAttribute('href'),
                      outline: s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2 };",
            Vec::new(),
        )
        .await
        .expect("active element")
}

#[tokio::test]
async fn a_person_signs_in_with_the_provider_and_every_page_passes_axe() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    let stop = CancellationToken::new();
    let (base, _provider) = stack
        .gateway_with_provider(&[("alice", &["jetcron-admins"])], stop.clone())
        .await;
    let (status, bound) = stack
        .send(
            jetcron_testkit::reqwest::Method::PUT,
            "/v1/namespaces/*/bindings/group:jetcron-admins",
            r#"{"role":"admin"}"#,
            Some(API_TOKEN),
        )
        .await;
    assert_eq!(status, 200, "{bound}");
    // A job with a failed run, and a second revision for the diff page.
    let failing = r#"{"id":"billing.export","schedule":"@every 1h","description":"Export invoices","labels":{"team":"billing"},"target":{"type":"shell","command":"echo 'sftp: permission denied' >&2; exit 4"}}"#;
    let (status, reply) = stack.post("/v1/jobs", failing).await;
    assert_eq!(status, 201, "{reply}");
    let (status, reply) = stack
        .post(
            "/v1/jobs",
            &failing.replace("Export invoices", "Export the invoices"),
        )
        .await;
    assert!(status == 200 || status == 201, "{reply}");
    let run_id = stack.trigger("billing.export").await;
    stack
        .wait_for_run_status(&run_id, "failed", Duration::from_secs(30))
        .await;

    let browser = Browser::start(1280, 900).await;
    let client = &browser.client;
    let mut found = Vec::new();

    // Signed out: the sign-in page offers the provider, a password and a token.
    visit(client, &format!("{base}/ui/login"), "Sign in with Corp SSO").await;
    found.extend(findings(&browser, "sign-in").await);
    // The keyboard's first stop is the skip link, and its focus shows.
    press(client, TAB).await;
    let first = focus_is_visible(client).await;
    assert_eq!(
        first["href"], "#main",
        "the first Tab reaches the skip link: {first}"
    );
    assert_eq!(first["outline"], true, "focus is visible: {first}");

    // The keyboard alone reaches the provider's button, showing where it
    // is at every step, and Enter follows it: through the provider
    // (another site) and back, as alice.
    let mut reached = serde_json::Value::Null;
    for _ in 0..20 {
        press(client, TAB).await;
        let focused = focus_is_visible(client).await;
        assert_eq!(focused["outline"], true, "focus is visible: {focused}");
        if focused["href"]
            .as_str()
            .is_some_and(|href| href.starts_with("/ui/login/oidc"))
        {
            reached = focused;
            break;
        }
    }
    assert!(
        !reached.is_null(),
        "Tab never reached the provider's button"
    );
    press(client, ENTER).await;
    page_says(client, "Sign-in").await;
    fill(client, "input[name=login]", "alice").await;
    fill(client, "input[name=password]", "anything").await;
    click(client, "button[type=submit]").await;
    let overview = page_says(client, "alice@corp.example").await;
    assert!(overview.contains("Sign out"), "{overview}");

    // Every page, signed in.
    let pages = [
        ("overview", "/ui/".to_string(), "Overview"),
        ("jobs", "/ui/jobs".to_string(), "billing.export"),
        (
            "job",
            "/ui/jobs/billing.export".to_string(),
            "Export the invoices",
        ),
        ("new job", "/ui/jobs/new".to_string(), "Schedule"),
        (
            "edit",
            "/ui/jobs/billing.export/edit".to_string(),
            "Schedule",
        ),
        (
            "delete",
            "/ui/jobs/billing.export/delete".to_string(),
            "Delete",
        ),
        ("runs", "/ui/runs".to_string(), "billing.export"),
        ("run", format!("/ui/runs/{run_id}"), "permission denied"),
        ("channels", "/ui/channels".to_string(), "Channels"),
        ("access", "/ui/access".to_string(), "Tokens"),
        ("error", "/ui/jobs/no.such-job".to_string(), "Not Found"),
    ];
    for (width, height) in [(1280, 900), (390, 844)] {
        client.set_window_size(width, height).await.expect("resize");
        for (name, path, wanted) in &pages {
            visit(client, &format!("{base}{path}"), wanted).await;
            found.extend(findings(&browser, &format!("{name} at {width}px")).await);
        }
        visit(client, &format!("{base}/ui/jobs/billing.export"), "changes").await;
        let diff = href_of(client, "a[href*='/diff']").await;
        visit(client, &diff, "Export").await;
        found.extend(findings(&browser, &format!("diff at {width}px")).await);
    }
    client.set_window_size(1280, 900).await.expect("resize");

    // The job form with its field errors shown.
    visit(client, &format!("{base}/ui/jobs/new"), "Schedule").await;
    fill(client, "#f-id", "billing.bad id!").await;
    fill(client, "#f-schedule", "never").await;
    click(client, "form.job-form button[type=submit]").await;
    page_says(client, "schedule").await;
    wait_until("the field errors show", Duration::from_secs(15), || async {
        client
            .find(Locator::Css(".field-error"))
            .await
            .ok()
            .map(|_| ())
    })
    .await;
    found.extend(findings(&browser, "new job with errors").await);

    // A form page after a write: a token made on the Access page.
    visit(
        client,
        &format!("{base}/ui/access?namespace=billing"),
        "Tokens",
    )
    .await;
    fill(client, "#t-description", "billing CI").await;
    click(
        client,
        "form[action='/ui/access/tokens'] button[type=submit]",
    )
    .await;
    page_says(client, "Token made").await;
    found.extend(findings(&browser, "token made").await);

    // A write names her in the audit: pause the job from its page.
    visit(client, &format!("{base}/ui/jobs/billing.export"), "Pause").await;
    click(client, "form[action$='/pause'] button[type=submit]").await;
    page_says(client, "paused").await;
    let (_, history) = stack.get("/v1/jobs/billing.export/history").await;
    let last = history["revisions"]
        .as_array()
        .and_then(|r| r.iter().max_by_key(|r| r["revision"].as_u64()))
        .cloned()
        .expect("revisions");
    assert_eq!(
        last["author"]["actor"], "user:alice@corp.example",
        "{history}"
    );

    // Sign out: back to the sign-in page, and writing asks to sign in again.
    click(client, "form[action='/ui/logout'] button[type=submit]").await;
    page_says(client, "Sign in with Corp SSO").await;
    visit(
        client,
        &format!("{base}/ui/jobs/new"),
        "Sign in with Corp SSO",
    )
    .await;

    assert!(found.is_empty(), "axe-core found:\n{}", found.join("\n"));
    browser.close().await;
    stop.cancel();
    stack.stop().await;
}
