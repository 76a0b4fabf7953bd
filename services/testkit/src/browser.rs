//! A headless Chromium driven over WebDriver: `chromedriver` on a free port
//! with a temporary profile, and a `fantoccini` client connected to it.
//! Debian's `chromium` and `chromium-driver` packages provide both
//! (`infra/test.sh` installs them); nothing downloads a browser of its own.
//! Dropping the browser kills `chromedriver`, which ends its Chromium.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder};

/// Run axe-core on the document and hand back its serious and critical
/// violations (WebDriver's script execution is not bound by the page's
/// Content-Security-Policy).
const AXE_RUN: &str = r"
const done = arguments[arguments.length - 1];
axe.run(document, {
  runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice'] },
  resultTypes: ['violations'],
}).then(r => done(r.violations
    .filter(v => v.impact === 'critical' || v.impact === 'serious')
    .map(v => ({ id: v.id, impact: v.impact, help: v.help,
                 nodes: v.nodes.map(n => n.target.join(' ')) }))))
  .catch(e => done({ error: String(e) }));
";

/// A browser window for one test.
pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Chromium with a `width` × `height` window.
    pub async fn start(width: u32, height: u32) -> Self {
        let driver_bin = crate::find_binary("JETCRON_CHROMEDRIVER", "chromedriver", &[]);
        let chromium = crate::find_binary(
            "JETCRON_CHROMIUM",
            "chromium",
            &["/usr/bin/chromium".into()],
        );
        let port = crate::free_port();
        let profile = tempfile::tempdir().expect("browser profile dir");
        let driver = Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", driver_bin.display()));
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": chromium,
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-dev-shm-usage",
                    "--disable-gpu",
                    "--no-first-run",
                    format!("--window-size={width},{height}"),
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let mut last_error = String::new();
        for _ in 0..100 {
            // chromedriver speaks plain HTTP on localhost: no TLS stack needed.
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(capabilities.clone())
                .connect(&url)
                .await
            {
                Ok(client) => {
                    return Self {
                        client,
                        driver,
                        _profile: profile,
                    }
                }
                Err(e) => last_error = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("chromedriver on port {port} gave no session: {last_error}");
    }

    /// The accessibility violations axe-core (npm's `axe-core`, injected
    /// into the page now shown) finds that are serious or critical, under
    /// the WCAG 2.1 A and AA rules and axe's best practices: one line each,
    /// `<rule> (<impact>): <help> at <elements>`.
    pub async fn axe(&self) -> Vec<String> {
        let source = std::fs::read_to_string(crate::node_modules().join("axe-core/axe.min.js"))
            .expect("axe-core/axe.min.js (infra/test.sh installs it)");
        self.client
            .execute(&source, Vec::new())
            .await
            .expect("inject axe-core");
        let found = self
            .client
            .execute_async(AXE_RUN, Vec::new())
            .await
            .expect("run axe-core");
        if let Some(error) = found.get("error") {
            panic!("axe-core failed: {error}");
        }
        found
            .as_array()
            .expect("axe-core's violations")
            .iter()
            .map(|v| {
                format!(
                    "{} ({}): {} at {}",
                    v["id"].as_str().unwrap_or_default(),
                    v["impact"].as_str().unwrap_or_default(),
                    v["help"].as_str().unwrap_or_default(),
                    v["nodes"]
                )
            })
            .collect()
    }

    /// End the session and the driver.
    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
