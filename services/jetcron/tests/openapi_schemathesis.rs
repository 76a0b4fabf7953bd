//! Schemathesis against the real stack: every operation of `/openapi.json`
//! fuzzed from the document (its examples, coverage and fuzzing phases, every
//! check: no server error, a valid request accepted, an invalid one refused,
//! each status, content type, header and answer as documented, 405 with
//! `Allow` for an undeclared method, authentication enforced).
//!
//! The gateway runs with the projector and ClickHouse (the history reads
//! answer), no ticker or executor, and the bootstrap token (admin of every
//! namespace). Schemathesis runs twice: every route but the namespaces'
//! first, then those, since a fuzzed target policy turns later puts of its
//! namespace's jobs into refusals the document cannot foresee.
//!
//! `infra/schemathesis/` holds the configuration and the hooks that give the
//! document's `jetcron-*` formats generators and keep positive cases within
//! their `x-jetcron-rules`; this test first checks that both name the same
//! formats and rules as the document. Schemathesis is PyPI's
//! `schemathesis==4.32.5`, which `infra/test.sh` installs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use jetcron_testkit::{Stack, StackOptions, API_TOKEN};

/// The version the hooks are written against.
const SCHEMATHESIS: &str = "4.32.5";
/// Test cases per operation and phase.
const MAX_EXAMPLES: &str = "100";

fn schemathesis_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../infra/schemathesis")
}

/// `python3 -m schemathesis.cli`, as the testkit runs the other PyPI tools
/// (aiosmtpd, chdb); fails naming `infra/test.sh` when it is not there.
fn schemathesis() -> Command {
    let version = Command::new("python3")
        .args(["-c", "import schemathesis; print(schemathesis.__version__)"])
        .output();
    let found = version
        .as_ref()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match found {
        Some(found) if found == SCHEMATHESIS => {}
        Some(found) => panic!(
            "schemathesis {found} is installed, the hooks need {SCHEMATHESIS}: run infra/test.sh (python3 -m pip install schemathesis=={SCHEMATHESIS})"
        ),
        None => panic!(
            "schemathesis is not installed for python3: run infra/test.sh (python3 -m pip install schemathesis=={SCHEMATHESIS})"
        ),
    }
    let mut command = Command::new("python3");
    command
        .args(["-m", "schemathesis.cli"])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(schemathesis_dir());
    command
}

/// The names `hooks.py` has generators and keepers for: (formats, rules).
fn hooks_names() -> (BTreeSet<String>, BTreeSet<String>) {
    let script = "import importlib.util, json\n\
        spec = importlib.util.spec_from_file_location('hooks', 'hooks.py')\n\
        hooks = importlib.util.module_from_spec(spec)\n\
        spec.loader.exec_module(hooks)\n\
        print(json.dumps([sorted(hooks.FORMATS), sorted(hooks.RULES)]))";
    let output = Command::new("python3")
        .args(["-c", script])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(schemathesis_dir())
        .output()
        .expect("run python3");
    assert!(
        output.status.success(),
        "hooks.py does not load: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let names: Vec<BTreeSet<String>> =
        serde_json::from_slice(&output.stdout).expect("the hooks' names as JSON");
    (names[0].clone(), names[1].clone())
}

/// The failures and errors of a JUnit report, each with its text.
fn junit_failures(dir: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    for entry in std::fs::read_dir(dir).expect("report dir") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "xml") {
            continue;
        }
        let xml = std::fs::read_to_string(&path).expect("junit report");
        for case in xml.split("<testcase").skip(1) {
            let name = case
                .split("name=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or("?");
            for tag in ["<failure", "<error"] {
                for found in case.split(tag).skip(1) {
                    let text = found
                        .split_once('>')
                        .map_or("", |(_, rest)| rest)
                        .split(&format!("</{}", &tag[1..]))
                        .next()
                        .unwrap_or_default();
                    failures.push(format!("{name}:\n{}", unescaped(text)));
                }
            }
        }
    }
    failures
}

fn unescaped(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&#10;", "\n")
        .replace("&amp;", "&")
}

/// One Schemathesis run over the operations `filter` selects (its summary
/// printed): its failures.
fn run(base: &str, filter: [&str; 2], report: &Path) -> Vec<String> {
    let started = Instant::now();
    let output = schemathesis()
        // Hypothesis' own files (Unicode tables, constants) go with the report.
        .env("HYPOTHESIS_STORAGE_DIRECTORY", report.join("hypothesis"))
        .args(["--config-file", "schemathesis.toml", "run"])
        .arg(format!("{base}/openapi.json"))
        .args(["--checks", "all", "--phases", "examples,coverage,fuzzing"])
        .args(["-H", &format!("Authorization: Bearer {API_TOKEN}")])
        .args(["--max-examples", MAX_EXAMPLES, "--seed", "43"])
        .args(["--generation-deterministic", "--workers", "2"])
        .args(["--report", "junit", "--report-dir"])
        .arg(report)
        .args(filter)
        .args(["--no-color"])
        .output()
        .expect("run schemathesis");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary: String = stdout
        .lines()
        .skip_while(|l| !l.contains("SUMMARY"))
        .collect::<Vec<_>>()
        .join("\n");
    println!("{filter:?} took {:?}\n{summary}", started.elapsed());
    let mut failures = junit_failures(report);
    if !output.status.success() && failures.is_empty() {
        failures.push(format!(
            "schemathesis failed without a report:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    failures
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_schemathesis_finds_the_gateway_as_the_document_says() {
    // Before the stack: a machine without Schemathesis fails at once.
    drop(schemathesis());
    let stack = Stack::start(StackOptions {
        ticker: false,
        executor: false,
        ..StackOptions::default()
    })
    .await;
    let (status, document) = stack.get("/openapi.json").await;
    assert_eq!(status, 200);
    let (formats, rules) = hooks_names();
    let named = |key: &str| -> BTreeSet<String> {
        document["info"][key]
            .as_object()
            .expect("named in info")
            .keys()
            .map(|name| name.split(':').next().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(
        named("x-jetcron-formats"),
        formats,
        "the document's formats (left) and hooks.py's FORMATS"
    );
    assert_eq!(
        named("x-jetcron-rules"),
        rules,
        "the document's rules (left) and hooks.py's RULES"
    );

    let base = stack.http_base.clone();
    let report = tempfile::tempdir().expect("report dir");
    let (first, second) = (report.path().join("api"), report.path().join("namespaces"));
    // Schemathesis blocks; the stack's services keep running on the runtime.
    let failures = tokio::task::spawn_blocking(move || {
        let mut failures = run(&base, ["--exclude-path-regex", "^/v1/namespaces/"], &first);
        failures.extend(run(
            &base,
            ["--include-path-regex", "^/v1/namespaces/"],
            &second,
        ));
        failures
    })
    .await
    .expect("schemathesis runs");
    stack.stop().await;
    assert!(
        failures.is_empty(),
        "Schemathesis found {} failures:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
