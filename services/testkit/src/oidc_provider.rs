//! A real OpenID Connect provider for the console's sign-in tests: npm's
//! `oidc-provider` (OpenID Certified; `infra/node/package.json`, installed by
//! `infra/test.sh`) run by this machine's Node.js on a free port, with the
//! script `oidc_provider.mjs`. Killed on drop; [`OidcProvider::restart`]
//! brings it back on the same port with other signing keys (a rotation).
//!
//! Its issuer is `http://localhost:<port>` while the gateways of the tests
//! listen on `127.0.0.1`: another site to a browser, so the redirect back
//! really is a cross-site navigation (which a `SameSite=Strict` cookie
//! would not survive).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const SCRIPT: &str = include_str!("oidc_provider.mjs");

/// The client the provider knows: the gateway of a test.
#[derive(Debug, Clone)]
pub struct OidcClient {
    pub client_id: String,
    pub client_secret: String,
    /// The gateway's `/ui/oidc/callback`.
    pub redirect_uri: String,
}

/// A running provider.
pub struct OidcProvider {
    child: Child,
    port: u16,
    client: OidcClient,
    accounts: BTreeMap<String, Vec<String>>,
}

/// Where `npm ci` put the test's Node.js packages: `JETCRON_NODE_MODULES`,
/// else `<repo>/.local/node/node_modules` (infra/test.sh).
pub fn node_modules() -> PathBuf {
    let dir = std::env::var_os("JETCRON_NODE_MODULES").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.local/node/node_modules"),
        PathBuf::from,
    );
    assert!(
        dir.join("oidc-provider/package.json").exists(),
        "no oidc-provider in {}: run infra/test.sh (it installs infra/node/package.json's packages)",
        dir.display()
    );
    dir
}

impl OidcProvider {
    /// Start for `client`, with `accounts` (a login and its groups) and
    /// one signing key, `k1`.
    pub fn start(client: OidcClient, accounts: &[(&str, &[&str])]) -> Self {
        let accounts = accounts
            .iter()
            .map(|(login, groups)| {
                (
                    login.to_string(),
                    groups.iter().map(|g| g.to_string()).collect(),
                )
            })
            .collect();
        let port = crate::free_port();
        let child = spawn(port, &client, &accounts, &["k1"]);
        Self {
            child,
            port,
            client,
            accounts,
        }
    }

    /// The issuer URL (`http://localhost:<port>`).
    pub fn issuer(&self) -> String {
        format!("http://localhost:{}", self.port)
    }

    pub fn client(&self) -> &OidcClient {
        &self.client
    }

    /// Stop and start again on the same port signing with new keys
    /// `kids` (made anew: a key rotation the relying party must follow).
    pub fn restart(&mut self, kids: &[&str]) {
        stop(&mut self.child);
        self.child = spawn(self.port, &self.client, &self.accounts, kids);
    }

    /// Make the token endpoint answer as `mode` says (`normal`, `tamper`,
    /// `expired`, `other_key`, `unknown_kid`: oidc_provider.mjs).
    pub async fn set_mode(&self, mode: &str) {
        let answer = reqwest::get(format!("{}/test/mode?set={mode}", self.issuer()))
            .await
            .expect("provider mode");
        assert!(answer.status().is_success(), "{}", answer.status());
    }
}

fn spawn(
    port: u16,
    client: &OidcClient,
    accounts: &BTreeMap<String, Vec<String>>,
    kids: &[&str],
) -> Child {
    let config = serde_json::json!({
        "port": port,
        "issuer": format!("http://localhost:{port}"),
        "client_id": client.client_id,
        "client_secret": client.client_secret,
        "redirect_uri": client.redirect_uri,
        "kids": kids,
        "accounts": accounts,
    });
    let modules = node_modules();
    // `node -e` resolves `import 'oidc-provider'` from its working
    // directory: the one that holds node_modules.
    let child = Command::new("node")
        .arg("--input-type=module")
        .arg("-e")
        .arg(SCRIPT)
        .current_dir(modules.parent().expect("node_modules has a parent"))
        .env("JETCRON_OIDC_TEST", config.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start node with oidc-provider (infra/test.sh installs both)");
    crate::nats_server::wait_for_port(port, Duration::from_secs(30), "oidc-provider");
    child
}

fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}
