//! What a due event must hold before anything of it runs: it can come from
//! anyone allowed to publish on `jetcron.due.>`.

use jetcron_core::events::DueEvent;
use jetcron_core::job;

/// A due event can come from anyone allowed to publish on `jetcron.due.>`:
/// check what the executor relies on before running anything.
pub(super) fn check_due_event(due: &DueEvent, subject: &str) -> Result<(), String> {
    let canonical = uuid::Uuid::parse_str(due.run_id.as_str())
        .map(|u| u.hyphenated().to_string())
        .map_err(|_| format!("run_id {:?} is not a UUID", due.run_id.as_str()))?;
    if canonical != due.run_id.as_str() {
        return Err(format!(
            "run_id {:?} is not in lowercase hyphenated form",
            due.run_id.as_str()
        ));
    }
    job::validate_id(&due.job_id).map_err(|e| format!("job_id: {}", e.message))?;
    job::validate_token("pool", &due.pool).map_err(|e| format!("pool: {}", e.message))?;
    if due.job.id != due.job_id {
        return Err(format!(
            "job.id {:?} differs from job_id {:?}",
            due.job.id, due.job_id
        ));
    }
    let expected = jetcron_core::subjects::due_subject(&due.pool, &due.job_id);
    if subject != expected {
        return Err(format!("published on {subject:?}, expected {expected:?}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use jetcron_core::events::{RunId, Trigger};

    fn due() -> DueEvent {
        let job = job::parse_job(
            br#"{"id":"j1","schedule":"@daily","target":{"type":"shell","command":"true"}}"#,
            None,
        )
        .expect("job");
        let at = Utc
            .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
            .single()
            .expect("t");
        DueEvent {
            run_id: RunId::for_fire("j1", at),
            job_id: "j1".into(),
            scheduled_at: at,
            trigger: Trigger::Schedule,
            pool: "default".into(),
            job_revision: 1,
            job: job.spec,
            shard: None,
            parent: None,
        }
    }

    const SUBJECT: &str = "jetcron.due.default.j1";

    #[test]
    fn well_formed_due_events_pass() {
        assert_eq!(check_due_event(&due(), SUBJECT), Ok(()));
    }

    #[test]
    fn malformed_due_events_are_refused() {
        let mut bad_run_id = due();
        bad_run_id.run_id = RunId("r\r\nX: 1".into());
        let mut uppercase_run_id = due();
        uppercase_run_id.run_id = RunId(due().run_id.as_str().to_uppercase());
        let mut bad_job_id = due();
        bad_job_id.job_id = "evil x".into();
        let mut mismatched = due();
        mismatched.job.id = "other".into();
        let mut bad_pool = due();
        bad_pool.pool = "a.b".into();
        for (event, subject, needle) in [
            (bad_run_id, SUBJECT, "not a UUID"),
            (uppercase_run_id, SUBJECT, "lowercase"),
            (bad_job_id, SUBJECT, "job_id"),
            (mismatched, SUBJECT, "differs from job_id"),
            (bad_pool, SUBJECT, "pool"),
            (due(), "jetcron.due.default.other", "expected"),
        ] {
            let why = check_due_event(&event, subject).expect_err(needle);
            assert!(why.contains(needle), "{why}");
        }
    }
}
