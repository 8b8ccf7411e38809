//! A JSON POST for the tests and the benches that share their support files.

/// `POST url` with `body` as `application/json`; the status and the JSON answer.
pub async fn post_json_body(url: &str, body: impl Into<reqwest::Body>) -> (u16, serde_json::Value) {
    let r = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{url} answers: {e}"));
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or_else(|e| panic!("{url} answers JSON: {e}")))
}
