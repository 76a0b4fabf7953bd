//! A browser without JavaScript for the console's tests: plain HTTP
//! requests that keep the session cookie and the last page's CSRF token.

use jetcron_testkit::reqwest::{self, header, redirect, StatusCode};
use jetcron_testkit::{Stack, API_TOKEN};

/// A browser without JavaScript: follows nothing by itself, keeps the
/// session cookie, reads the CSRF token off the last page.
pub struct Browser {
    pub base: String,
    pub http: reqwest::Client,
    pub cookie: Option<String>,
    pub csrf: String,
}

pub struct Page {
    pub status: StatusCode,
    pub headers: header::HeaderMap,
    pub body: String,
}

impl Page {
    pub fn location(&self) -> &str {
        self.headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }
}

pub fn form(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// The value of the first `name="<name>" value="..."` on a page.
pub fn input_value(body: &str, name: &str) -> Option<String> {
    let marker = format!("name=\"{name}\" value=\"");
    let start = body.find(&marker)? + marker.len();
    let end = body[start..].find('"')? + start;
    Some(body[start..end].to_string())
}

impl Browser {
    pub fn new(stack: &Stack) -> Self {
        Self {
            base: stack.http_base.clone(),
            http: reqwest::Client::builder()
                .redirect(redirect::Policy::none())
                .build()
                .expect("client"),
            cookie: None,
            csrf: String::new(),
        }
    }

    pub async fn request(&mut self, request: reqwest::RequestBuilder) -> Page {
        let request = match &self.cookie {
            Some(cookie) => request.header(header::COOKIE, cookie),
            None => request,
        };
        let response = request.send().await.expect("console request");
        let status = response.status();
        let headers = response.headers().clone();
        if let Some(set) = headers
            .get(header::SET_COOKIE)
            .and_then(|v| v.to_str().ok())
        {
            let pair = set.split(';').next().unwrap_or_default().to_string();
            self.cookie = pair
                .split_once('=')
                .filter(|(_, v)| !v.is_empty())
                .map(|_| pair.clone());
        }
        let body = response.text().await.expect("body");
        if let Some(csrf) = input_value(&body, "csrf").filter(|c| !c.is_empty()) {
            self.csrf = csrf;
        }
        Page {
            status,
            headers,
            body,
        }
    }

    pub async fn get(&mut self, path: &str) -> Page {
        let request = self.http.get(format!("{}{path}", self.base));
        self.request(request).await
    }

    pub async fn post(&mut self, path: &str, pairs: &[(&str, &str)]) -> Page {
        let request = self
            .http
            .post(format!("{}{path}", self.base))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(form(pairs));
        self.request(request).await
    }

    pub async fn sign_in(&mut self) {
        self.sign_in_with(API_TOKEN).await;
    }

    pub async fn sign_in_with(&mut self, token: &str) {
        let page = self
            .post("/ui/login", &[("token", token), ("next", "/ui/jobs")])
            .await;
        assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
        assert_eq!(page.location(), "/ui/jobs");
    }
}

/// The text of a page's alert paragraph (`role="alert"`), with the
/// entities askama writes for quotes turned back.
pub fn alert_text(body: &str) -> String {
    let start = body.find("role=\"alert\">").map_or(0, |i| i + 13);
    let end = body[start..].find("</p>").map_or(start, |i| start + i);
    body[start..end]
        .replace("&#x27;", "'")
        .replace("&quot;", "\"")
}

/// The new-job form's fields for `billing.invoices`, a NATS target,
/// posted with `csrf`.
pub fn invoices_job_form(csrf: &str) -> [(&str, &str); 8] {
    [
        ("csrf", csrf),
        ("expected_revision", "0"),
        ("id", "billing.invoices"),
        ("schedule", "0 3 * * *"),
        ("timezone", "UTC"),
        ("target.type", "nats"),
        ("target.subject", "svc.invoices"),
        ("retry.max_attempts", "1"),
    ]
}
