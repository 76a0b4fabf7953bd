//! A headless Chromium driven over WebDriver: `chromedriver` on a free port
//! with a temporary profile, and a `fantoccini` client connected to it.
//! Debian's `chromium` and `chromium-driver` packages provide both
//! (`infra/test.sh` installs them); nothing downloads a browser of its own.
//! Dropping the browser kills `chromedriver`, which ends its Chromium.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder};

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
