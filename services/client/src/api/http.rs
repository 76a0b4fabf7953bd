//! The HTTP side of [`super::Api`]: each endpoint as its route (`jobs.list`
//! is `GET /v1/jobs?…`, `jobs.pause` of an id `POST /v1/jobs/{id}/pause`),
//! the body's fields moved into the path and query where the route takes
//! them. Answers and refusals are the same JSON as on NATS.

use std::time::Duration;

use anyhow::Context as _;
use reqwest::Method;
use serde_json::{Map, Value};

use super::{answer_or_refusal, CallError, Endpoint};

/// The gateway's HTTP API at `base`, with a bearer token for writes (and
/// for reads when the gateway runs with `--protect-reads`).
#[derive(Clone)]
pub struct HttpApi {
    http: reqwest::Client,
    base: url::Url,
    token: Option<String>,
}

/// A request as the route wants it.
struct Route {
    method: Method,
    path: Vec<String>,
    query: Vec<(String, String)>,
    body: Option<Value>,
}

impl HttpApi {
    pub fn new(base: &str, token: Option<String>, timeout: Duration) -> anyhow::Result<Self> {
        let base = url::Url::parse(base).with_context(|| format!("--http {base:?} is no URL"))?;
        if !matches!(base.scheme(), "http" | "https") {
            anyhow::bail!("--http {base}: the scheme must be http or https");
        }
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .context("build the HTTP client")?;
        Ok(Self { http, base, token })
    }

    pub fn describe(&self) -> String {
        self.base.to_string()
    }

    pub(super) async fn call(&self, endpoint: Endpoint, body: Value) -> Result<Value, CallError> {
        let route = route(endpoint, body).map_err(CallError::Transport)?;
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| {
                CallError::Transport(anyhow::anyhow!("{} cannot take a path", self.base))
            })?
            .pop_if_empty()
            .extend(&route.path);
        if !route.query.is_empty() {
            url.query_pairs_mut().extend_pairs(&route.query);
        }
        let mut request = self.http.request(route.method.clone(), url.clone());
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = &route.body {
            request = request.json(body);
        }
        let what = format!("{} {}", route.method, url.path());
        let response = request
            .send()
            .await
            .map_err(|e| CallError::Transport(anyhow::anyhow!("{what}: {e}")))?;
        let status = response.status().as_u16();
        let text = response
            .text()
            .await
            .map_err(|e| CallError::Transport(anyhow::anyhow!("{what}: read the answer: {e}")))?;
        let answer: Value = serde_json::from_str(&text).map_err(|_| {
            CallError::Transport(anyhow::anyhow!(
                "{what} answered {status} with no JSON: {}",
                text.chars().take(200).collect::<String>()
            ))
        })?;
        answer_or_refusal(Some(status), answer, &what)
    }
}

/// Where `endpoint` with `body` goes over HTTP.
fn route(endpoint: Endpoint, body: Value) -> anyhow::Result<Route> {
    let Value::Object(mut fields) = body else {
        anyhow::bail!("the request body must be an object");
    };
    let mut take = |name: &str| fields.remove(name);
    let route = match endpoint {
        Endpoint::JobsList => {
            let mut query = Vec::new();
            if let Some(Value::Object(labels)) = take("labels") {
                let mut pairs = Vec::new();
                for (key, value) in &labels {
                    let value = value.as_str().unwrap_or_default();
                    // `?labels=` separates pairs with commas and has no escape.
                    if value.contains(',') || key.contains(',') {
                        anyhow::bail!(
                            "label {key}={value}: the HTTP API's selector cannot hold a comma; select over NATS"
                        );
                    }
                    pairs.push(format!("{key}={value}"));
                }
                query.push(("labels".to_string(), pairs.join(",")));
            }
            Route::get(&["v1", "jobs"])
                .with_query(query)
                .with_rest(fields)
        }
        Endpoint::JobsGet => Route::get(&["v1", "jobs", &text(take("id"))]),
        Endpoint::JobsPut => Route::new(Method::POST, &["v1", "jobs"]).with_body(fields),
        Endpoint::JobsDelete => {
            let id = text(take("id"));
            Route::new(Method::DELETE, &["v1", "jobs", &id]).with_rest(fields)
        }
        Endpoint::JobsPause | Endpoint::JobsResume => {
            let verb = if endpoint == Endpoint::JobsPause {
                "pause"
            } else {
                "resume"
            };
            match take("id") {
                Some(id) => Route::new(Method::POST, &["v1", "jobs", &text(Some(id)), verb])
                    .with_body(Map::new()),
                None => {
                    Route::new(Method::POST, &["v1", &format!("jobs:{verb}")]).with_body(fields)
                }
            }
        }
        Endpoint::JobsTrigger => {
            let id = text(take("id"));
            Route::new(Method::POST, &["v1", "jobs", &id, "trigger"]).with_body(fields)
        }
        Endpoint::JobsBackfill => {
            let id = text(take("id"));
            Route::new(Method::POST, &["v1", "jobs", &id, "backfill"]).with_body(fields)
        }
        Endpoint::SchedulesPreview => Route::get(&["v1", "schedules", "preview"]).with_rest(fields),
        Endpoint::RunsList => Route::get(&["v1", "runs"]).with_rest(fields),
        Endpoint::RunsGet => Route::get(&["v1", "runs", &text(take("run_id"))]),
        Endpoint::RunsKill => {
            let run_id = text(take("run_id"));
            Route::new(Method::POST, &["v1", "runs", &run_id, "kill"]).with_body(fields)
        }
        Endpoint::ChannelsList => Route::get(&["v1", "channels"]).with_rest(fields),
    };
    Ok(route)
}

/// A field's text for a path segment (a number as its digits).
fn text(value: Option<Value>) -> String {
    match value {
        Some(Value::String(s)) => s,
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

impl Route {
    fn new(method: Method, path: &[&str]) -> Self {
        Self {
            method,
            path: path.iter().map(|s| s.to_string()).collect(),
            query: Vec::new(),
            body: None,
        }
    }

    fn get(path: &[&str]) -> Self {
        Self::new(Method::GET, path)
    }

    fn with_query(mut self, query: Vec<(String, String)>) -> Self {
        self.query.extend(query);
        self
    }

    /// The remaining fields as query parameters.
    fn with_rest(mut self, fields: Map<String, Value>) -> Self {
        self.query
            .extend(fields.into_iter().map(|(k, v)| (k, text(Some(v)))));
        self
    }

    fn with_body(mut self, fields: Map<String, Value>) -> Self {
        self.body = Some(Value::Object(fields));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_go_where_each_route_takes_them() {
        let r = route(
            Endpoint::JobsList,
            json!({"labels": {"team": "b", "env": "p"}, "limit": 5}),
        )
        .expect("route");
        assert_eq!(
            (r.method, r.path.join("/")),
            (Method::GET, "v1/jobs".to_string())
        );
        assert_eq!(
            r.query,
            [
                ("labels".into(), "env=p,team=b".into()),
                ("limit".into(), "5".into())
            ]
        );
        let r = route(Endpoint::JobsPause, json!({"id": "billing.sync"})).expect("route");
        assert_eq!(r.path.join("/"), "v1/jobs/billing.sync/pause");
        let r = route(Endpoint::JobsResume, json!({"labels": {"team": "b"}})).expect("route");
        assert_eq!(r.path.join("/"), "v1/jobs:resume");
        assert_eq!(r.body, Some(json!({"labels": {"team": "b"}})));
        let r = route(
            Endpoint::JobsDelete,
            json!({"id": "a", "expected_revision": 7}),
        )
        .expect("route");
        assert_eq!(
            (r.method, r.query),
            (
                Method::DELETE,
                vec![("expected_revision".into(), "7".into())]
            )
        );
        let r = route(Endpoint::RunsKill, json!({"run_id": "r", "reason": "x"})).expect("route");
        assert_eq!(r.path.join("/"), "v1/runs/r/kill");
        assert_eq!(r.body, Some(json!({"reason": "x"})));
        assert!(route(Endpoint::JobsGet, json!([1])).is_err());
        let comma = route(
            Endpoint::JobsList,
            json!({"labels": {"crontab.file": "/tmp/a,b"}}),
        );
        assert!(comma
            .err()
            .is_some_and(|e| e.to_string().contains("cannot hold a comma")));
    }
}
