//! The schedule preview through both doors (HTTP and `nats req`), the DST
//! notes it carries, its errors (the same as a job put's), and the next
//! fires of a paused job (what a resume would run).

use jetcron_testkit::{Stack, StackOptions};
use serde_json::Value;

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn http_and_nats_preview_the_same_fires_with_dst_notes() {
    let stack = Stack::start(StackOptions::api_only()).await;
    // A fixed-time line on New York's spring-forward night: 02:30 does not
    // exist on 14 March 2027, so it fires at 03:00 EDT.
    let (status, http) = stack
        .get(&format!(
            "/v1/schedules/preview?schedule={}&timezone=America/New_York&count=3&from=2027-03-13T00:00:00Z",
            encode("30 2 * * *")
        ))
        .await;
    assert_eq!(status, 200, "{http}");
    let (nats, code) = stack
        .api(
            "jetcron.api.schedules.preview",
            r#"{"schedule":"30 2 * * *","timezone":"America/New_York","count":3,"from":"2027-03-13T00:00:00Z"}"#,
        )
        .await;
    assert_eq!(code, None, "{nats}");
    assert_eq!(http, nats, "both doors answer the same");
    let fires = http["fires"].as_array().expect("fires");
    let at: Vec<_> = fires
        .iter()
        .map(|f| f["at"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        at,
        [
            "2027-03-13T07:30:00.000Z",
            "2027-03-14T07:00:00.000Z",
            "2027-03-15T06:30:00.000Z"
        ]
    );
    assert_eq!(fires[1]["local"], "2027-03-14T03:00:00-04:00");
    assert_eq!(fires[1]["dst"], "moved_after_gap");
    assert!(fires[0].get("dst").is_none(), "{}", fires[0]);
    assert_eq!(http["kind"], "fixed-time");
    assert_eq!(http["description"], "At 02:30, in America/New_York");

    // A wildcard line on the fall-back night fires in both copies of 01:xx.
    let (wildcard, _) = stack
        .api(
            "jetcron.api.schedules.preview",
            r#"{"schedule":"0 */30 1 7 11 * 2027","timezone":"America/New_York","count":10,"from":"2027-01-01T00:00:00Z"}"#,
        )
        .await;
    let dst: Vec<_> = wildcard["fires"]
        .as_array()
        .expect("fires")
        .iter()
        .map(|f| (f["local"].clone(), f["dst"].clone()))
        .collect();
    assert_eq!(
        dst,
        [
            ("2027-11-07T01:00:00-04:00".into(), "repeated_first".into()),
            ("2027-11-07T01:30:00-04:00".into(), "repeated_first".into()),
            ("2027-11-07T01:00:00-05:00".into(), "repeated_second".into()),
            ("2027-11-07T01:30:00-05:00".into(), "repeated_second".into()),
        ] as [(Value, Value); 4]
    );
    // A wildcard line whose matches fall in the gap: they are listed as dropped.
    let (hourly, _) = stack
        .api(
            "jetcron.api.schedules.preview",
            r#"{"schedule":"0 * * * *","timezone":"America/New_York","count":3,"from":"2027-03-14T05:30:00Z"}"#,
        )
        .await;
    assert_eq!(hourly["dropped"][0]["wall_time"], "2027-03-14T02:00:00");
    assert_eq!(hourly["dropped"][0]["reason"], "in_gap");
    stack.stop().await;
}

#[tokio::test]
async fn a_bad_preview_gets_the_error_a_put_gets() {
    let stack = Stack::start(StackOptions::api_only()).await;
    for (schedule, timezone) in [
        ("* * * *", "UTC"),
        ("@daily", "Mars/Base"),
        ("0 */15 2 14 3 * 2027", "America/New_York"),
    ] {
        let (put, _) = stack
            .api_put(&format!(
                r#"{{"id":"p","schedule":"{schedule}","timezone":"{timezone}","target":{{"type":"nats","subject":"a"}}}}"#
            ))
            .await;
        let (preview, code) = stack
            .api(
                "jetcron.api.schedules.preview",
                &format!(r#"{{"schedule":"{schedule}","timezone":"{timezone}"}}"#),
            )
            .await;
        assert_eq!(code.as_deref(), Some("400"), "{preview}");
        assert_eq!(
            preview["error"]["code"], put["error"]["code"],
            "{preview} / {put}"
        );
        assert_eq!(preview["error"]["code"], "invalid_job");
        assert_eq!(
            preview["error"]["field"], put["error"]["field"],
            "{preview} / {put}"
        );
        let (put_problem, preview_problem) = (
            &put["error"]["problems"][0],
            &preview["error"]["problems"][0],
        );
        assert_eq!(preview_problem["code"], put_problem["code"]);
        if put_problem["code"] == "never_fires" {
            // The put checks from now, the preview from its `from`: the
            // reason is the same.
            let reason = |p: &Value| {
                p["message"]
                    .as_str()
                    .and_then(|m| m.split_once(": ").map(|(_, r)| r.to_string()))
            };
            assert_eq!(reason(preview_problem), reason(put_problem));
            assert!(
                put_problem["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("daylight-saving gap of America/New_York"),
                "{put_problem}"
            );
        } else {
            assert_eq!(preview_problem["message"], put_problem["message"]);
        }
    }
    // The request's own fields, over HTTP.
    let (status, body) = stack
        .get("/v1/schedules/preview?schedule=%40daily&count=5000")
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "count");
    assert_eq!(body["error"]["code"], "invalid_request");
    let (status, body) = stack
        .get("/v1/schedules/preview?schedule=%40daily&from=soon")
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "from");
    let (status, body) = stack.get("/v1/schedules/preview?timezone=UTC").await;
    assert_eq!(status, 400, "{body}");
    let (_, code) = stack
        .api(
            "jetcron.api.schedules.preview",
            r#"{"schedule":"@daily","colour":"red"}"#,
        )
        .await;
    assert_eq!(code.as_deref(), Some("400"));
    let (_, code) = stack.api("jetcron.api.schedules.preview", "not json").await;
    assert_eq!(code.as_deref(), Some("400"));
    stack.stop().await;
}

#[tokio::test]
async fn a_paused_job_shows_what_a_resume_would_run() {
    let stack = Stack::start(StackOptions::api_only()).await;
    let (reply, code) = stack
        .api_put(r#"{"id":"nightly","schedule":"30 2 * * *","timezone":"Europe/Berlin","paused":true,"target":{"type":"nats","subject":"a"}}"#)
        .await;
    assert_eq!(code, None, "{reply}");
    let (status, body) = stack.get("/v1/jobs/nightly?next=7").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["next_fires"].as_array().map(Vec::len),
        Some(7),
        "{body}"
    );
    assert_eq!(body["next_fires_if_resumed"], true);
    assert_eq!(
        body["schedule_preview"]["description"],
        "At 02:30, in Europe/Berlin"
    );
    assert_eq!(
        body["schedule_preview"]["fires"][0]["at"], body["next_fires"][0],
        "the preview lists the same fires"
    );
    let (status, body) = stack.get("/v1/jobs/nightly?next=0").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "next");
    let (_, code) = stack
        .api_put(r#"{"id":"nightly","schedule":"30 2 * * *","timezone":"Europe/Berlin","target":{"type":"nats","subject":"a"}}"#)
        .await;
    assert_eq!(code, None);
    let (_, body) = stack.get("/v1/jobs/nightly").await;
    assert_eq!(
        body["next_fires"].as_array().map(Vec::len),
        Some(5),
        "{body}"
    );
    assert_eq!(body["next_fires_if_resumed"], false);
    stack.stop().await;
}
