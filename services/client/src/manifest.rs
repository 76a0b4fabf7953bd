//! Job files: what `apply`, `diff` and `jobs put` read.
//!
//! A path is a file or a folder (read recursively; files ending in `.json`,
//! `.yaml` or `.yml`, in name order; names starting with `.` are skipped,
//! so a `.git` folder is). A file holds one job or a list of jobs; a YAML
//! file may hold several documents. `-` reads standard input (JSON or
//! YAML). YAML is read as YAML 1.2: `yes`, `on` and `0755` are no booleans
//! or octal numbers, a key given twice is an error.
//!
//! Every job is checked here with the same check the gateway runs
//! ([`jetcron_core::job::parse_written`]), so a broken file is refused with
//! the API's messages before anything is sent, naming the file and job.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use jetcron_core::job::parse_written;
use serde_json::Value;

/// Where a job came from: `jobs/billing.yaml` or `jobs/all.json[2]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub file: String,
    /// Its place in a list or among a YAML file's documents.
    pub index: Option<usize>,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.index {
            Some(i) => write!(f, "{}[{i}]", self.file),
            None => f.write_str(&self.file),
        }
    }
}

/// A job of a file, checked.
#[derive(Debug, Clone)]
pub struct FileJob {
    pub id: String,
    pub source: Source,
    /// The definition as written (an object).
    pub definition: Value,
}

/// Everything wrong with the files, one line each.
#[derive(Debug, Default)]
pub struct ManifestErrors(pub Vec<String>);

impl fmt::Display for ManifestErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("\n"))
    }
}

impl std::error::Error for ManifestErrors {}

/// Read and check every job of `paths`. Any problem anywhere refuses the
/// whole set (nothing may be half applied because one file is broken).
pub fn read(paths: &[PathBuf]) -> Result<Vec<FileJob>, ManifestErrors> {
    let mut errors = ManifestErrors::default();
    let mut files = Vec::new();
    for path in paths {
        if let Err(e) = collect_files(path, &mut files) {
            errors.0.push(e);
        }
    }
    let mut jobs = Vec::new();
    for file in &files {
        match load(file) {
            Ok(values) => jobs.extend(checked_jobs(file, values, &mut errors)),
            Err(e) => errors.0.push(e),
        }
    }
    let mut seen: BTreeMap<String, Source> = BTreeMap::new();
    for job in &jobs {
        if let Some(first) = seen.insert(job.id.clone(), job.source.clone()) {
            errors.0.push(format!(
                "{}: job {} is defined twice (also in {first})",
                job.source, job.id
            ));
        }
    }
    if paths.is_empty() {
        errors
            .0
            .push("no files given: name files or folders with -f".into());
    }
    match errors.0.is_empty() {
        true => Ok(jobs),
        false => Err(errors),
    }
}

/// The files of `path`: itself, or a folder's job files, recursively.
fn collect_files(path: &Path, files: &mut Vec<PathBuf>) -> Result<(), String> {
    if path.as_os_str() == "-" {
        files.push(path.to_path_buf());
        return Ok(());
    }
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.is_file() {
        files.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            collect_files(&entry, files)?;
        } else if kind_of(&entry).is_some() {
            files.push(entry);
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Json,
    Yaml,
}

fn kind_of(path: &Path) -> Option<Kind> {
    match path.extension()?.to_str()? {
        "json" => Some(Kind::Json),
        "yaml" | "yml" => Some(Kind::Yaml),
        _ => None,
    }
}

/// The file's documents as values (stdin: JSON if it parses, else YAML).
fn load(path: &Path) -> Result<Vec<Value>, String> {
    let name = path.display().to_string();
    let (text, kind) = match path.as_os_str() == "-" {
        true => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .map_err(|e| format!("standard input: {e}"))?;
            let kind = match serde_json::from_str::<Value>(&text) {
                Ok(_) => Kind::Json,
                Err(_) => Kind::Yaml,
            };
            (text, kind)
        }
        false => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: {e}"))?;
            let kind = kind_of(path)
                .ok_or_else(|| format!("{name}: not a job file: name it .json, .yaml or .yml"))?;
            (text, kind)
        }
    };
    match kind {
        Kind::Json => serde_json::from_str::<Value>(&text)
            .map(|v| vec![v])
            .map_err(|e| format!("{name}:{}:{}: {e}", e.line(), e.column())),
        Kind::Yaml => parse_yaml(&text).map_err(|e| format!("{name}:{e}")),
    }
}

/// YAML 1.2 documents as JSON values; an error as `LINE:COL: message`.
pub fn parse_yaml(text: &str) -> Result<Vec<Value>, String> {
    let options = serde_saphyr::options! {
        strict_booleans: true,
        with_snippet: false,
    };
    serde_saphyr::from_str_multiple_with_options::<Value, Vec<Value>>(text, options).map_err(|e| {
        let at = e
            .location()
            .map(|l| format!("{}:{}: ", l.line(), l.column()))
            .unwrap_or_else(|| " ".to_string());
        let line = e
            .location()
            .and_then(|l| text.lines().nth((l.line() as usize).saturating_sub(1)))
            .unwrap_or_default();
        let hint = match line.contains(": *") || line.contains(": &") {
            true => " (a value starting with * or & is an alias or anchor in YAML: quote it, e.g. schedule: \"*/5 * * * *\")",
            false => "",
        };
        format!("{at}{e}{hint}")
    })
}

/// The jobs of a file's documents, each checked; problems go to `errors`.
fn checked_jobs(file: &Path, values: Vec<Value>, errors: &mut ManifestErrors) -> Vec<FileJob> {
    let name = file.display().to_string();
    let listed = values.len() > 1 || values.first().is_some_and(Value::is_array);
    let definitions: Vec<Value> = values
        .into_iter()
        .flat_map(|v| match v {
            Value::Array(items) => items,
            Value::Null => Vec::new(),
            other => vec![other],
        })
        .collect();
    let now = chrono::Utc::now();
    let mut jobs = Vec::new();
    for (i, definition) in definitions.into_iter().enumerate() {
        let source = Source {
            file: name.clone(),
            index: listed.then_some(i),
        };
        let Some(id) = definition
            .get("id")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            errors
                .0
                .push(format!("{source}: a job needs an \"id\" (a string)"));
            continue;
        };
        let bytes = serde_json::to_vec(&definition).unwrap_or_default();
        match parse_written(&bytes, None, now) {
            Ok(_) => jobs.push(FileJob {
                id,
                source,
                definition,
            }),
            Err(problems) => {
                for problem in problems {
                    errors.0.push(format!("{source}: job {id}: {problem}"));
                }
            }
        }
    }
    jobs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, text).expect("write");
        path
    }

    #[test]
    fn folders_lists_and_yaml_documents_are_read_in_name_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), "b/two.yaml", "id: b\nschedule: '@daily'\ntarget: {type: nats, subject: s.b}\n---\nid: c\nschedule: '@hourly'\ntarget: {type: nats, subject: s.c}\n");
        write(
            dir.path(),
            "a.json",
            r#"[{"id":"a","schedule":"@daily","target":{"type":"nats","subject":"s.a"}}]"#,
        );
        write(dir.path(), ".git/x.json", "not json");
        write(dir.path(), "README.md", "# not a job");
        let jobs = read(&[dir.path().to_path_buf()]).expect("read");
        let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert!(jobs[0].source.to_string().ends_with("a.json[0]"));
        assert!(jobs[2].source.to_string().ends_with("two.yaml[1]"));
    }

    #[test]
    fn yaml_is_read_as_yaml_1_2() {
        let values = parse_yaml("a: yes\nb: on\nc: 0755\nd: true\n").expect("yaml");
        assert_eq!(values[0]["a"], "yes");
        assert_eq!(values[0]["b"], "on");
        assert_eq!(values[0]["d"], true);
        let twice = parse_yaml("id: a\nid: b\n").expect_err("duplicate key");
        assert!(twice.starts_with("2:"), "{twice}");
    }

    #[test]
    fn an_unquoted_star_schedule_gets_a_hint_with_its_line() {
        let error = parse_yaml("id: a\nschedule: */5 * * * *\n").expect_err("alias");
        assert!(error.starts_with("2:"), "{error}");
        assert!(error.contains("quote it"), "{error}");
    }

    #[test]
    fn every_problem_of_every_file_is_named_and_nothing_is_returned() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(
            dir.path(),
            "bad.json",
            r#"{"id":"x","schedule":"* * * *","target":{"type":"nats","subject":"a"}}"#,
        );
        write(dir.path(), "noid.yaml", "schedule: '@daily'\n");
        write(
            dir.path(),
            "dup1.json",
            r#"{"id":"d","schedule":"@daily","target":{"type":"nats","subject":"a"}}"#,
        );
        write(
            dir.path(),
            "dup2.json",
            r#"{"id":"d","schedule":"@daily","target":{"type":"nats","subject":"a"}}"#,
        );
        write(dir.path(), "broken.json", "{\n  \"id\": ");
        let errors = read(&[dir.path().to_path_buf()]).expect_err("refused").0;
        let text = errors.join("\n");
        assert!(
            text.contains("bad.json: job x: schedule: expected 5, 6 or 7 fields, got 4"),
            "{text}"
        );
        assert!(text.contains("noid.yaml: a job needs an \"id\""), "{text}");
        assert!(
            text.contains("dup2.json: job d is defined twice (also in"),
            "{text}"
        );
        assert!(text.contains("broken.json:2:"), "{text}");
        assert_eq!(errors.len(), 4, "{text}");
    }
}
