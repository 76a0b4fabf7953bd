//! A translated job's id: `[NS.]<prefix><slug>-<8 hex>`. The slug is the
//! command's first telling word (its last path part; assignments, options,
//! numbers and shell words such as `test`, `if`, `cd` or `command`
//! skipped) cut to the characters of a job name, so a reader knows the
//! job: `test -x /usr/sbin/anacron || ...` is `anacron`. The hex is the start of sha256(user ␀ schedule ␀
//! command), all as written, so re-importing the same line gives the same
//! id and a changed line a new one. Two identical lines of one file get
//! `-2`, `-3` ([`number_repeated_ids`]).

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use super::{Entry, Translated};
use crate::job::{job_name, MAX_ID_LEN};

/// Longest slug kept from a command.
const MAX_SLUG_LEN: usize = 40;
/// Room kept at the end of a name for a repeat's number (`-99999`).
const REPEAT_ROOM: usize = 6;

/// The id of `entry`'s job (not validated: the caller checks the job).
pub(super) fn job_id(entry: &Entry, namespace: Option<&str>, prefix: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(entry.user.as_deref().unwrap_or_default());
    hash.update([0]);
    hash.update(entry.timing.as_written());
    hash.update([0]);
    hash.update(&entry.command_as_written);
    let digest = hash.finalize();
    let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    let room = MAX_ID_LEN.saturating_sub(prefix.len() + 1 + hex.len() + REPEAT_ROOM);
    let mut slug = slug(&entry.command, prefix.is_empty());
    slug.truncate(room.min(MAX_SLUG_LEN));
    let local = format!("{prefix}{}-{hex}", slug.trim_end_matches(['-', '_']));
    match namespace {
        Some(namespace) => job_name(namespace, &local),
        None => local,
    }
}

/// Words that start a command line without saying what it runs.
const SHELL_WORDS: [&str; 22] = [
    "!", "[", "[[", "{", "(", "if", "then", "while", "until", "do", "test", "cd", "command",
    "exec", "env", "nice", "ionice", "nohup", "sudo", "time", "timeout", "flock",
];

/// The command's first telling word as a name part: `[A-Za-z0-9_-]`,
/// other characters as `-` (runs of them as one); `job` when no word
/// tells. When it starts the name (no prefix), it starts with a letter or
/// digit.
fn slug(command: &str, starts_name: bool) -> String {
    command
        .split_whitespace()
        .filter(|word| {
            !is_assignment(word)
                && !word.starts_with('-')
                && !SHELL_WORDS.contains(word)
                && !word.chars().all(|c| c.is_ascii_digit())
        })
        .map(|word| word_slug(word, starts_name))
        .find(|slug| !slug.is_empty())
        .unwrap_or_else(|| "job".to_string())
}

/// One word's last path part as a name part; empty when nothing is left.
fn word_slug(word: &str, starts_name: bool) -> String {
    let base = word
        .rsplit('/')
        .find(|part| !part.is_empty())
        .unwrap_or_default();
    let mut slug = String::new();
    for c in base.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            c
        } else {
            '-'
        };
        if !(c == '-' && slug.ends_with('-')) {
            slug.push(c);
        }
    }
    let slug = match starts_name {
        true => slug.trim_start_matches(['-', '_']),
        false => slug.as_str(),
    };
    slug.trim_end_matches(['-', '_']).to_string()
}

/// `NAME=value`, as a shell reads a word before the command.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        name.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Make the ids of `jobs` unique, in order: the second job with an id
/// gets `-2` after it, the third `-3`, in `id` and in `spec_json`.
pub fn number_repeated_ids(jobs: &mut [Translated]) {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for job in jobs {
        let count = seen.entry(job.id.clone()).or_insert(0);
        *count += 1;
        if *count > 1 {
            job.id = format!("{}-{count}", job.id);
            job.spec_json["id"] = serde_json::Value::String(job.id.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slug_is_the_commands_first_word_cut_to_name_characters() {
        assert_eq!(slug("/usr/lib/sysstat/debian-sa1 1 1", true), "debian-sa1");
        assert_eq!(slug("$HOME/bin/daily.job >> x", true), "daily-job");
        assert_eq!(
            slug("SERVICE_MODE=1 /sbin/e2scrub_all -A", true),
            "e2scrub_all"
        );
        assert_eq!(slug("[ -x /usr/sbin/anacron ] && x", true), "anacron");
        assert_eq!(
            slug("test -x /usr/sbin/anacron || { cd / && run-parts; }", true),
            "anacron"
        );
        assert_eq!(
            slug("cd / && run-parts --report /etc/cron.hourly", true),
            "run-parts"
        );
        assert_eq!(
            slug("command -v debian-sa1 > /dev/null", true),
            "debian-sa1"
        );
        assert_eq!(slug("timeout 10 backup", true), "backup");
        assert_eq!(slug("{ ; } && > /", true), "job");
        assert_eq!(slug("_private.sh", true), "private-sh");
        assert_eq!(slug("_private.sh", false), "_private-sh");
        assert_eq!(slug("", true), "job");
    }
}
