//! The HTTP client the `openidconnect` crate talks to the provider with:
//! the workspace's reqwest (its own `reqwest` feature pins an older major
//! version), following no redirects (the crate's advice against request
//! forgery: a provider's answer must not send the gateway elsewhere) and
//! giving up after 10 seconds.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use openidconnect::{AsyncHttpClient, HttpRequest, HttpResponse};

/// The gateway's client to its provider.
#[derive(Clone)]
pub struct HttpClient(reqwest::Client);

impl<'c> AsyncHttpClient<'c> for HttpClient {
    type Error = HttpError;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, HttpError>> + Send + 'c>>;

    fn call(&'c self, request: HttpRequest) -> Self::Future {
        Box::pin(send(&self.0, request))
    }
}

/// Why a request to the provider failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error(transparent)]
    Request(#[from] reqwest::Error),
    #[error(transparent)]
    Http(#[from] http::Error),
}

/// The client, built once per gateway.
pub fn client() -> anyhow::Result<HttpClient> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .map(HttpClient)
        .map_err(|e| anyhow::anyhow!("the identity provider's HTTP client: {e}"))
}

/// Send `request` with `client`, the answer whole.
async fn send(client: &reqwest::Client, request: HttpRequest) -> Result<HttpResponse, HttpError> {
    let answer = client.execute(request.try_into()?).await?;
    let mut response = http::Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        response = response.header(name, value);
    }
    Ok(response.body(answer.bytes().await?.to_vec())?)
}
