//! Steps of the browser tests (WebDriver through `fantoccini`) that several
//! of them take.

use fantoccini::{Client, Locator};

/// Type `value` into the input `css`, replacing what it held.
pub async fn fill(client: &Client, css: &str, value: &str) {
    let input = client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css}: {e}"));
    input.clear().await.expect("clear");
    input.send_keys(value).await.expect("type");
}

/// Click the element `css`.
pub async fn click(client: &Client, css: &str) {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("click {css}: {e}"));
}
