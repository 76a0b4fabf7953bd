//! Any text as a crontab, of either kind: reading never panics, every
//! refusal and warning names a line of the file, and every job line
//! translates into a definition the gateway's own check accepts, or is
//! refused with a reason.
#![no_main]

use jetcron_core::crontab::{self, CrontabKind, TranslateOptions};
use jetcron_core::job::parse_job;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lines = text.split('\n').count();
    for kind in [CrontabKind::User, CrontabKind::System] {
        let parsed = crontab::parse(text, kind);
        for refusal in &parsed.refusals {
            assert!((1..=lines).contains(&refusal.line), "{refusal:?}");
            assert!(!refusal.reason.is_empty());
        }
        for warning in &parsed.warnings {
            assert!((1..=lines).contains(&warning.line), "{warning:?}");
        }
        let options = TranslateOptions {
            namespace: Some("fuzz".into()),
            prefix: "cron-".into(),
            timezone: "Europe/Berlin".into(),
            mail_channel: Some("ops-mail".into()),
            file_label: "/etc/cron.d/fuzz".into(),
        };
        for entry in &parsed.entries {
            match crontab::translate(entry, &options) {
                Ok(job) => {
                    let bytes = serde_json::to_vec(&job.spec_json).expect("encode");
                    if let Err(problems) = parse_job(&bytes, None) {
                        panic!("{entry:?} translated to a job the gateway refuses: {problems:?}");
                    }
                }
                Err(refusal) => assert!(!refusal.reason.is_empty()),
            }
        }
    }
});
