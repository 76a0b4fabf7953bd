use std::collections::BTreeMap;

use super::compact::Row;
use super::*;

fn job(id: &str, extra: &str) -> Vec<u8> {
    format!(r#"{{"id":"{id}","schedule":"0 * * * *","target":{{"type":"shell","command":"true"}}{extra}}}"#)
        .into_bytes()
}

fn synced() -> JobCatalog {
    let catalog = JobCatalog::default();
    catalog.mark_synced();
    catalog
}

#[test]
fn own_writes_count_at_once_and_late_older_revisions_change_nothing() {
    let catalog = synced();
    let now = Utc::now();
    catalog.note_put("a", 3, &job("a", ""), now);
    catalog.note_put("b", 4, &job("b", ""), now);
    assert_eq!(catalog.lookup("a"), Some((true, 2)));
    // The watch delivers the same and older revisions later.
    let mut state = catalog.write();
    state.record("a", 1, None);
    state.record(
        "a",
        3,
        Some(JobRow::from_value(
            "a",
            3,
            &job("a", ""),
            now,
            &SharedLines::default(),
        )),
    );
    state.record("b", 5, None);
    state.record(
        "b",
        4,
        Some(JobRow::from_value(
            "b",
            4,
            &job("b", ""),
            now,
            &SharedLines::default(),
        )),
    );
    drop(state);
    assert_eq!(catalog.lookup("a"), Some((true, 1)));
    assert_eq!(catalog.lookup("b"), Some((false, 1)));
    catalog.note_put("b", 6, &job("b", ""), now);
    assert_eq!(catalog.lookup("b"), Some((true, 2)));
    catalog.note_delete("a", 7);
    assert_eq!(catalog.lookup("a"), Some((false, 1)));
    // A key longer than any id (a direct `nats kv put`) is counted and
    // listed as invalid.
    let long = "k".repeat(300);
    catalog.note_put(&long, 8, b"{}", now);
    assert_eq!(catalog.lookup(&long), Some((true, 2)));
    let invalid = catalog.page(&RowQuery {
        state: "invalid".into(),
        limit: 10,
        ..Default::default()
    });
    assert_eq!(invalid.rows.len(), 1);
    assert_eq!(invalid.rows[0].id, long);
}

#[test]
fn rows_filter_by_label_text_and_state_sort_and_page() {
    let catalog = synced();
    let t0 = DateTime::from_timestamp(1_800_000_000, 0).expect("time");
    for i in 0..30 {
        let team = if i % 3 == 0 { "billing" } else { "search" };
        let paused = if i % 5 == 0 { r#","paused":true"# } else { "" };
        let extra =
            format!(r#","labels":{{"team":"{team}"}},"description":"Nightly report {i}"{paused}"#);
        let id = format!("job-{i:02}");
        catalog.note_put(
            &id,
            i + 1,
            &job(&id, &extra),
            t0 + chrono::Duration::seconds(30 - i as i64),
        );
    }
    catalog.note_put(
        "broken",
        99,
        br#"{"id":"broken","schedule":"61 * * * *"}"#,
        t0,
    );

    let page = catalog.page(&RowQuery {
        limit: 5,
        offset: 5,
        ..Default::default()
    });
    assert_eq!((page.total, page.matched), (31, 31));
    let ids: Vec<_> = page.rows.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["job-04", "job-05", "job-06", "job-07", "job-08"]);

    let billing = catalog.page(&RowQuery {
        labels: BTreeMap::from([("team".into(), "billing".into())]),
        limit: 100,
        ..Default::default()
    });
    assert_eq!(billing.matched, 10);
    assert!(billing.rows.iter().all(|r| r.labels["team"] == "billing"));

    let text = catalog.page(&RowQuery {
        text: "REPORT 2".into(),
        limit: 100,
        ..Default::default()
    });
    let ids: Vec<_> = text.rows.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "job-02", "job-20", "job-21", "job-22", "job-23", "job-24", "job-25", "job-26",
            "job-27", "job-28", "job-29"
        ]
    );

    let paused = catalog.page(&RowQuery {
        state: "paused".into(),
        limit: 100,
        ..Default::default()
    });
    assert_eq!(paused.matched, 6);
    let invalid = catalog.page(&RowQuery {
        state: "invalid".into(),
        limit: 100,
        ..Default::default()
    });
    assert_eq!(invalid.rows[0].id, "broken");

    // Newest first among the active ones (job-00, written last, is paused).
    let newest = catalog.page(&RowQuery {
        sort: RowSort::Updated,
        descending: true,
        state: "active".into(),
        limit: 2,
        ..Default::default()
    });
    let ids: Vec<_> = newest.rows.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["job-01", "job-02"]);
    let last = catalog.page(&RowQuery {
        descending: true,
        limit: 1,
        ..Default::default()
    });
    assert_eq!(last.rows[0].id, "job-29");
}

#[test]
fn rows_added_in_any_order_list_in_id_order_and_deleted_keys_leave_the_list() {
    let catalog = synced();
    let now = Utc::now();
    // A scrambled order of 500 ids (7 is coprime with 500).
    let ids: Vec<String> = (0..500)
        .map(|i| format!("job-{:03}", (i * 7) % 500))
        .collect();
    for (n, id) in ids.iter().enumerate() {
        catalog.note_put(id, n as u64 + 1, &job(id, ""), now);
    }
    let all = |catalog: &JobCatalog| -> Vec<String> {
        catalog
            .page(&RowQuery {
                limit: 1_000,
                ..Default::default()
            })
            .rows
            .into_iter()
            .map(|r| r.id)
            .collect()
    };
    let mut expected: Vec<String> = (0..500).map(|i| format!("job-{i:03}")).collect();
    assert_eq!(all(&catalog), expected);
    // Rows added after a listing merge into the order.
    catalog.note_put("aaa", 600, &job("aaa", ""), now);
    catalog.note_put("job-2500", 601, &job("job-2500", ""), now);
    catalog.note_delete("job-100", 602);
    expected.retain(|id| id != "job-100");
    expected.insert(0, "aaa".into());
    expected.push("job-2500".into());
    expected.sort();
    assert_eq!(all(&catalog), expected);
    assert_eq!(catalog.lookup("job-100"), Some((false, 501)));
    // Back again under a newer revision, not under an older one.
    catalog.note_put("job-100", 603, &job("job-100", r#","paused":true"#), now);
    catalog.note_delete("job-100", 550);
    let row = catalog
        .page(&RowQuery {
            text: "job-100".into(),
            limit: 10,
            ..Default::default()
        })
        .rows;
    assert_eq!(row.len(), 1);
    assert_eq!((row[0].revision, row[0].paused), (603, true));
    assert_eq!(row[0].schedule, "0 * * * *");
    assert_eq!(row[0].target_type, "shell");
    assert_eq!(std::mem::size_of::<Row>(), 40);
    // A row's zone and target type are kept as one pair.
    catalog.note_put(
        "zoned",
        604,
        &job("zoned", r#","timezone":"Europe/Berlin""#),
        now,
    );
    let zoned = catalog
        .page(&RowQuery {
            text: "zoned".into(),
            limit: 10,
            ..Default::default()
        })
        .rows;
    assert_eq!(
        zoned
            .iter()
            .map(|r| (r.id.as_str(), r.timezone.as_str(), r.target_type.as_str()))
            .collect::<Vec<_>>(),
        [("zoned", "Europe/Berlin", "shell")]
    );
    assert_eq!(
        catalog
            .page(&RowQuery {
                text: "job-10".into(),
                limit: 1,
                ..Default::default()
            })
            .rows[0]
            .timezone,
        ""
    );
}
