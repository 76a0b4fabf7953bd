//! Sign-in with an identity provider, against a real OpenID Connect
//! provider process (npm's oidc-provider, started by the testkit): the
//! whole authorization code flow with plain HTTP requests (each site's
//! cookies kept apart, as a browser keeps them), roles from the provider's
//! groups, the audit naming the person, sign-out; and what must be
//! refused: a tampered, expired or foreign ID token, a wrong or replayed
//! `state`, a callback in another browser, the provider's own refusal. A
//! rotation of the provider's keys is followed. (Through a real browser:
//! `console_browser.rs`.)

use std::collections::BTreeMap;

use jetcron_testkit::reqwest::{self, header, redirect, Method, StatusCode};
use jetcron_testkit::{OidcProvider, Stack, StackOptions, API_TOKEN};
use tokio_util::sync::CancellationToken;

use crate::form_browser::{alert_text, invoices_job_form};

/// A gateway with an identity provider, on a stack.
struct Signing {
    stack: Stack,
    provider: OidcProvider,
    base: String,
    stop: CancellationToken,
}

impl Signing {
    async fn start(accounts: &[(&str, &[&str])]) -> Self {
        let stack = Stack::start(StackOptions {
            ticker: false,
            executor: false,
            ..StackOptions::default()
        })
        .await;
        let stop = CancellationToken::new();
        let (base, provider) = stack.gateway_with_provider(accounts, stop.clone()).await;
        Self {
            stack,
            provider,
            base,
            stop,
        }
    }

    async fn stop(self) {
        self.stop.cancel();
        drop(self.provider);
        self.stack.stop().await;
    }
}

/// One answer: status, where it sends, body.
struct Answer {
    status: StatusCode,
    location: String,
    body: String,
}

/// A browser without JavaScript across two sites: the console's cookies
/// and the provider's kept apart, redirects followed by hand.
struct TwoSites {
    http: reqwest::Client,
    console: String,
    console_cookies: BTreeMap<String, String>,
    provider_cookies: BTreeMap<String, String>,
}

impl TwoSites {
    fn new(console: &str) -> Self {
        Self {
            http: reqwest::Client::builder()
                .redirect(redirect::Policy::none())
                .build()
                .expect("client"),
            console: console.to_string(),
            console_cookies: BTreeMap::new(),
            provider_cookies: BTreeMap::new(),
        }
    }

    fn jar(&mut self, url: &str) -> &mut BTreeMap<String, String> {
        match url.starts_with(&self.console) {
            true => &mut self.console_cookies,
            false => &mut self.provider_cookies,
        }
    }

    async fn send(&mut self, method: Method, url: &str, form: Option<&[(&str, &str)]>) -> Answer {
        let cookies: Vec<String> = self
            .jar(url)
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        let mut request = self.http.request(method, url);
        if !cookies.is_empty() {
            request = request.header(header::COOKIE, cookies.join("; "));
        }
        if let Some(form) = form {
            let body = url::form_urlencoded::Serializer::new(String::new())
                .extend_pairs(form)
                .finish();
            request = request
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(body);
        }
        let answer = request.send().await.expect("request");
        let status = answer.status();
        for set in answer.headers().get_all(header::SET_COOKIE) {
            let pair = set
                .to_str()
                .unwrap_or_default()
                .split(';')
                .next()
                .unwrap_or_default();
            if let Some((name, value)) = pair.split_once('=') {
                let jar = self.jar(url);
                match value.is_empty() {
                    true => jar.remove(name),
                    false => jar.insert(name.to_string(), value.to_string()),
                };
            }
        }
        let location = answer
            .headers()
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(|l| resolve(url, l))
            .unwrap_or_default();
        let body = answer.text().await.expect("body");
        Answer {
            status,
            location,
            body,
        }
    }

    async fn get(&mut self, url: &str) -> Answer {
        self.send(Method::GET, url, None).await
    }

    /// Start a sign-in at the console and go through the provider's login
    /// as `login`: the callback URL the provider sends the browser back to
    /// (not yet followed).
    async fn through_provider(&mut self, login: &str) -> String {
        let start = format!("{}/ui/login/oidc?next=/ui/jobs", self.console);
        let mut answer = self.get(&start).await;
        assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
        assert!(self.console_cookies.contains_key("jetcron_oidc"));
        for _ in 0..10 {
            if answer.location.starts_with(&self.console) {
                return answer.location;
            }
            let url = answer.location.clone();
            answer = self.get(&url).await;
            if answer.status == StatusCode::OK {
                // The provider's login form: any password signs in.
                let action = attribute(&answer.body, "action").expect("login form");
                let action = resolve(&url, &action);
                answer = self
                    .send(
                        Method::POST,
                        &action,
                        Some(&[("prompt", "login"), ("login", login), ("password", "x")]),
                    )
                    .await;
            }
            assert!(
                answer.status.is_redirection(),
                "{} {}",
                answer.status,
                answer.body
            );
        }
        panic!("the provider never sent the browser back");
    }

    /// Sign in as `login` all the way: the console's answer to the callback.
    async fn sign_in(&mut self, login: &str) -> Answer {
        let callback = self.through_provider(login).await;
        self.get(&callback).await
    }
}

/// `location` as an absolute URL, relative to `base`.
fn resolve(base: &str, location: &str) -> String {
    url::Url::parse(base)
        .and_then(|b| b.join(location))
        .map(|u| u.to_string())
        .unwrap_or_else(|_| location.to_string())
}

/// The first `name="…"` attribute's value on a page.
fn attribute(body: &str, name: &str) -> Option<String> {
    let marker = format!("{name}=\"");
    let start = body.find(&marker)? + marker.len();
    let end = body[start..].find('"')? + start;
    Some(body[start..end].replace("&amp;", "&"))
}

/// `url` with query parameter `name` set to `value`.
fn with_param(url: &str, name: &str, value: &str) -> String {
    let mut url = url::Url::parse(url).expect("url");
    let kept: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(k, _)| k != name)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    url.query_pairs_mut()
        .clear()
        .extend_pairs(kept)
        .append_pair(name, value);
    url.to_string()
}

#[tokio::test]
async fn people_sign_in_with_the_provider_and_hold_their_groups_roles() {
    let signing = Signing::start(&[("alice", &["billing-devs"]), ("bob", &[])]).await;
    let (status, answer) = signing
        .stack
        .send(
            Method::PUT,
            "/v1/namespaces/billing/bindings/group:billing-devs",
            r#"{"role":"editor"}"#,
            Some(API_TOKEN),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let base = signing.base.clone();
    let mut alice = TwoSites::new(&base);
    let login = alice.get(&format!("{base}/ui/login")).await;
    assert!(
        login.body.contains("Sign in with Corp SSO"),
        "{}",
        login.body
    );

    let signed = alice.sign_in("alice").await;
    assert_eq!(signed.status, StatusCode::SEE_OTHER, "{}", signed.body);
    assert_eq!(signed.location, format!("{base}/ui/jobs"));
    assert!(alice.console_cookies.contains_key("jetcron_session"));
    assert!(
        !alice.console_cookies.contains_key("jetcron_oidc"),
        "used up"
    );
    let jobs = alice.get(&format!("{base}/ui/jobs")).await;
    assert_eq!(jobs.status, StatusCode::OK, "{}", jobs.body);
    assert!(
        jobs.body.contains("alice@corp.example"),
        "her name is shown"
    );

    // What she writes names her, and how she signed in.
    let form = alice.get(&format!("{base}/ui/jobs/new")).await;
    let csrf = attribute(
        &form.body[form.body.find("name=\"csrf\"").expect("csrf")..],
        "value",
    )
    .expect("csrf value");
    let made = alice
        .send(
            Method::POST,
            &format!("{base}/ui/jobs/new"),
            Some(&invoices_job_form(&csrf)),
        )
        .await;
    assert_eq!(made.status, StatusCode::SEE_OTHER, "{}", made.body);
    let (_, history) = signing.stack.get("/v1/jobs/billing.invoices/history").await;
    let author = &history["revisions"][0]["author"];
    assert_eq!(author["actor"], "user:alice@corp.example", "{history}");
    assert_eq!(author["door"], "console");
    assert_eq!(
        author["note"],
        format!("signed in by {}", signing.provider.issuer()).as_str()
    );

    // Bob's groups bind him nowhere: signed in, shown nothing.
    let mut bob = TwoSites::new(&base);
    assert_eq!(bob.sign_in("bob").await.status, StatusCode::SEE_OTHER);
    let nothing = bob.get(&format!("{base}/ui/jobs")).await;
    assert_eq!(nothing.status, StatusCode::FORBIDDEN, "{}", nothing.body);

    // Signed out: the session cookie opens nothing any more.
    let kept = alice.console_cookies.clone();
    let out = alice
        .send(
            Method::POST,
            &format!("{base}/ui/logout"),
            Some(&[("csrf", csrf.as_str())]),
        )
        .await;
    assert_eq!(out.status, StatusCode::SEE_OTHER, "{}", out.body);
    alice.console_cookies = kept;
    let after = alice.get(&format!("{base}/ui/jobs/new")).await;
    assert_eq!(after.status, StatusCode::SEE_OTHER);
    assert!(after.location.contains("/ui/login"), "{}", after.location);
    signing.stop().await;
}

#[tokio::test]
async fn wrong_states_foreign_callbacks_and_bad_tokens_are_refused_and_rotated_keys_followed() {
    let mut signing = Signing::start(&[("carol", &["ops"])]).await;
    let base = signing.base.clone();
    let refused = |answer: &Answer, status: StatusCode, why: &str| {
        assert_eq!(answer.status, status, "{}", answer.body);
        let said = alert_text(&answer.body);
        assert!(said.contains(why), "{said:?} should say {why:?}");
    };

    // A wrong state: refused, no session, and the sign-in is used up.
    let mut browser = TwoSites::new(&base);
    let callback = browser.through_provider("carol").await;
    let wrong = browser
        .get(&with_param(&callback, "state", "forged-state"))
        .await;
    refused(
        &wrong,
        StatusCode::BAD_REQUEST,
        "out of date or was not started in this browser",
    );
    assert!(!browser.console_cookies.contains_key("jetcron_session"));
    let replayed = browser.get(&callback).await;
    refused(&replayed, StatusCode::BAD_REQUEST, "out of date");

    // The right callback in another browser (no pending sign-in there).
    let callback = browser.through_provider("carol").await;
    let mut other = TwoSites::new(&base);
    let elsewhere = other.get(&callback).await;
    refused(
        &elsewhere,
        StatusCode::BAD_REQUEST,
        "not started in this browser",
    );
    assert!(!other.console_cookies.contains_key("jetcron_session"));
    // ... and in the right one, once; a replay of a used callback is refused.
    let signed = browser.get(&callback).await;
    assert_eq!(signed.status, StatusCode::SEE_OTHER, "{}", signed.body);
    let again = browser.get(&callback).await;
    refused(&again, StatusCode::BAD_REQUEST, "out of date");

    // An `iss` of another provider, with this browser's state.
    let mut browser = TwoSites::new(&base);
    let callback = browser.through_provider("carol").await;
    let foreign = browser
        .get(&with_param(&callback, "iss", "https://evil.example"))
        .await;
    refused(
        &foreign,
        StatusCode::BAD_REQUEST,
        "another identity provider",
    );
    assert!(!browser.console_cookies.contains_key("jetcron_session"));

    // The provider's own refusal, with this browser's state.
    let callback = browser.through_provider("carol").await;
    let state = url::Url::parse(&callback)
        .expect("url")
        .query_pairs()
        .find(|(k, _)| k == "state")
        .map(|(_, v)| v.into_owned())
        .expect("state");
    let denied = browser
        .get(&format!(
            "{base}/ui/oidc/callback?error=access_denied&error_description=not+today&state={state}"
        ))
        .await;
    refused(
        &denied,
        StatusCode::UNAUTHORIZED,
        "refused the sign-in: access_denied: not today",
    );

    // ID tokens the provider's token endpoint alters: each refused.
    for (mode, why) in [
        ("tamper", "signature does not verify"),
        ("expired", "out of date"),
        ("other_key", "signature does not verify"),
        ("unknown_kid", "a key the provider does not publish"),
    ] {
        signing.provider.set_mode(mode).await;
        let mut browser = TwoSites::new(&base);
        let answer = browser.sign_in("carol").await;
        refused(&answer, StatusCode::UNAUTHORIZED, why);
        assert!(
            !browser.console_cookies.contains_key("jetcron_session"),
            "{mode}"
        );
    }
    signing.provider.set_mode("normal").await;
    let mut browser = TwoSites::new(&base);
    assert_eq!(browser.sign_in("carol").await.status, StatusCode::SEE_OTHER);

    // The provider rotates to a new key: the gateway fetches the new set.
    signing.provider.restart(&["k2"]);
    let mut browser = TwoSites::new(&base);
    let rotated = browser.sign_in("carol").await;
    assert_eq!(rotated.status, StatusCode::SEE_OTHER, "{}", rotated.body);
    assert!(browser.console_cookies.contains_key("jetcron_session"));
    signing.stop().await;
}

/// Named by `sub` (the provider's login), a person whose name a local user
/// of the console has is refused: the provider cannot hand out a local
/// user's bindings.
#[tokio::test]
async fn the_provider_cannot_sign_in_a_local_users_name() {
    let stack = Stack::start(StackOptions {
        ticker: false,
        executor: false,
        ..StackOptions::default()
    })
    .await;
    let stop = CancellationToken::new();
    let (base, provider) = stack
        .gateway_with_provider_naming(
            &[("dave", &[]), ("erin", &[])],
            jetcron_gateway::people::provider_claims::UserClaim::Subject,
            stop.clone(),
        )
        .await;
    let bucket = stack
        .js
        .get_key_value(jetcron_core::subjects::USERS_BUCKET)
        .await
        .expect("users bucket");
    let now = chrono::Utc::now();
    jetcron_gateway::people::local_users::LocalUsers::new(bucket)
        .add(&jetcron_gateway::people::local_users::UserRecord {
            name: "dave".into(),
            password: jetcron_gateway::people::passwords::hash("dave's own password")
                .expect("hash"),
            created_at: now,
            password_changed_at: now,
        })
        .await
        .expect("add dave");
    let mut dave = TwoSites::new(&base);
    let answer = dave.sign_in("dave").await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN, "{}", answer.body);
    assert!(
        alert_text(&answer.body).contains("local user"),
        "{}",
        answer.body
    );
    assert!(!dave.console_cookies.contains_key("jetcron_session"));
    // Another login of the provider is named by its `sub` and signs in.
    let mut erin = TwoSites::new(&base);
    assert_eq!(erin.sign_in("erin").await.status, StatusCode::SEE_OTHER);
    let jobs = erin.get(&format!("{base}/ui/jobs")).await;
    assert_eq!(jobs.status, StatusCode::FORBIDDEN, "bound nowhere");
    stop.cancel();
    drop(provider);
    stack.stop().await;
}
