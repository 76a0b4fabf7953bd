//! The retention statements of docs/history.md run as written: the TTL
//! clauses on a current ClickHouse (chdb; 18.16 has no TTL) and the monthly
//! partition drops on both engines.

use std::time::Duration;

use jetcron_testkit::{wait_until, Stack, StackOptions};
use serde_json::json;

/// The SQL statements of the fenced ```sql blocks of the "Retention" section.
fn retention_blocks() -> Vec<Vec<String>> {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/history.md"),
    )
    .expect("docs/history.md");
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Retention"))
        .expect("a Retention section");
    section
        .split("```sql")
        .skip(1)
        .map(|block| {
            let code = block.split("```").next().unwrap_or_default();
            code.split(';')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn the_documented_ttl_and_partition_drops_run_as_written() {
    let blocks = retention_blocks();
    assert_eq!(blocks.len(), 2, "{blocks:?}");
    let (ttl, drops) = (&blocks[0], &blocks[1]);
    assert!(ttl.iter().all(|s| s.contains("MODIFY TTL")), "{ttl:?}");

    // Current ClickHouse: the TTLs take, and every table says so.
    let mut queries: Vec<&str> = ttl.iter().map(String::as_str).collect();
    let check = "SELECT name FROM system.tables WHERE database = 'jetcron' \
                 AND engine_full LIKE '%TTL%' ORDER BY name";
    queries.push(check);
    queries.extend(drops.iter().map(String::as_str));
    let (version, results) = jetcron_testkit::chdb::run_on_chdb(json!({}), &queries).await;
    for (sql, result) in queries.iter().zip(&results) {
        assert!(
            result.get("error").is_none(),
            "chdb {version}: {sql}: {result}"
        );
    }
    let with_ttl = &results[ttl.len()]["data"];
    assert_eq!(
        with_ttl,
        &json!([{"name": "job_events"}, {"name": "run_events"}, {"name": "run_state"}]),
        "chdb {version}"
    );

    // 18.16: the partition drops (the TTL statements are for current versions).
    let stack = Stack::start(StackOptions {
        ticker: false,
        executor: false,
        ..StackOptions::default()
    })
    .await;
    wait_until("schema applied", Duration::from_secs(20), || async {
        let tables = stack
            .clickhouse_sql("SELECT count() FROM system.tables WHERE database = 'jetcron' AND name = 'run_state' FORMAT TSV")
            .await;
        (tables.trim() == "1").then_some(())
    })
    .await;
    for sql in drops {
        stack.clickhouse_sql(sql).await;
    }
    stack.stop().await;
}
