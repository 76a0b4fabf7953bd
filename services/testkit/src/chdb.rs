//! A current ClickHouse for tests: chdb (the engine embedded in a Python
//! package, 26.x) in a `python3` subprocess. The Debian server the harness
//! starts is 18.16; every DDL statement and every query jetcron ships must also
//! run on a current engine, and this is how the tests run them there.
//!
//! `run_on_chdb` applies `schemas/clickhouse/*.sql` in order, inserts the
//! given rows (`JSONEachRow` text per table, e.g. exported from the 18.16
//! server) and answers each query with its columns and rows. Without chdb it
//! fails with a message pointing at `infra/test.sh`, which installs it.
//! `run_statements_on_chdb` runs any statements in a fresh session instead,
//! without the schema (the replicated DDL's checks use it).

use std::path::Path;
use std::process::Stdio;

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt as _;

const CHDB_SCRIPT: &str = r#"
import glob, json, os, sys
try:
    import chdb
    from chdb import session
except ImportError as e:
    print(json.dumps({"import_error": str(e)}))
    sys.exit(0)
spec = json.load(sys.stdin)
s = session.Session()
try:
    for path in sorted(glob.glob(os.path.join(spec["schema_dir"], "*.sql"))) if spec["schema_dir"] else []:
        with open(path) as f:
            text = "\n".join(l for l in f.read().splitlines() if not l.lstrip().startswith("--"))
        for statement in text.split(";"):
            if statement.strip():
                s.query(statement)
    for table, rows in spec["inserts"].items():
        if rows.strip():
            s.query("INSERT INTO " + table + " FORMAT JSONEachRow\n" + rows)
    results = []
    for sql in spec["queries"]:
        try:
            raw = s.query(sql, "JSON").bytes()
            if not raw.strip():
                # A statement without a result set (ALTER, ...).
                results.append({"columns": [], "rows": 0, "data": []})
                continue
            answer = json.loads(raw)
            results.append({
                "columns": [[m["name"], m["type"]] for m in answer["meta"]],
                "rows": answer["rows"],
                "data": answer["data"],
            })
        except Exception as e:
            results.append({"error": str(e)})
    version = str(s.query("SELECT version()", "TSV")).strip()
finally:
    s.close()
print(json.dumps({"version": version, "results": results}))
"#;

/// Run `queries` on chdb over the DDL and the rows exported from 18.16.
pub async fn run_on_chdb(inserts: Value, queries: &[&str]) -> (String, Vec<Value>) {
    let input = json!({
        "schema_dir": Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schemas/clickhouse"),
        "inserts": inserts,
        "queries": queries,
    });
    run_script(input, queries.len()).await
}

/// Run `statements` in order in one fresh chdb session, without jetcron's
/// schema: DDL, inserts and queries alike, each answered as by
/// [`run_on_chdb`] (`{"error": …}` for a statement chdb refused; the next
/// statement still runs). For DDL that is not the single-node schema, e.g.
/// `schemas/clickhouse/replicated/` made single-node, or parsed by
/// `formatQuery`.
pub async fn run_statements_on_chdb(statements: &[String]) -> (String, Vec<Value>) {
    let input = json!({
        "schema_dir": Value::Null,
        "inserts": {},
        "queries": statements,
    });
    run_script(input, statements.len()).await
}

/// Run [`CHDB_SCRIPT`] on `input` in its own working directory; `expected`
/// results.
async fn run_script(input: Value, expected: usize) -> (String, Vec<Value>) {
    // One directory per call: a test may run several chdb sessions at once.
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let workdir = std::env::temp_dir().join(format!("jetcron-chdb-{}-{call}", std::process::id()));
    std::fs::create_dir_all(&workdir).expect("chdb working directory");
    let mut child = tokio::process::Command::new("python3")
        .arg("-c")
        .arg(CHDB_SCRIPT)
        // As the test's 18.16 server: DateTime values print the same.
        .env("TZ", "UTC")
        // chdb reads a config.xml in its working directory: not ours.
        .current_dir(&workdir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 must be installed to run the dashboards on chdb");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(input.to_string().as_bytes())
        .await
        .expect("write to python3");
    drop(stdin);
    let output = child.wait_with_output().await.expect("python3 runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default();
    let answer: Value = serde_json::from_str(last).unwrap_or_else(|_| {
        panic!(
            "python3 with chdb failed ({}):\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
    });
    if let Some(err) = answer["import_error"].as_str() {
        panic!(
            "python3 cannot import chdb ({err}): run infra/test.sh, which installs it, \
             or `python3 -m pip install chdb`"
        );
    }
    let results = answer["results"].as_array().expect("results").clone();
    assert_eq!(results.len(), expected);
    let _ = std::fs::remove_dir_all(&workdir);
    let version = answer["version"].as_str().unwrap_or_default().to_string();
    (version, results)
}
