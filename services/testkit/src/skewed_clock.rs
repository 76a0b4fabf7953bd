//! Skewed clocks: a process whose wall clock is off by a fixed offset,
//! through libfaketime (`LD_PRELOAD`), as on a machine whose NTP drifted or
//! never synced.
//!
//! Only the wall clock (`CLOCK_REALTIME`: `SystemTime`, `chrono::Utc::now`,
//! `date`) moves; the monotonic clock (`Instant`, tokio's timers) is left
//! alone, as a skewed machine's is, so that a jetcron service under test
//! computes fire instants and lag from a wrong "now" while its timeouts and
//! leases still run at the real pace. libfaketime 0.9.10 would otherwise
//! report the faked *wall* time from `CLOCK_MONOTONIC` as well.
//!
//! It works for dynamically linked programs that read the time through libc
//! (jetcron and other Rust programs, `date`), not for statically linked ones
//! that ask the kernel themselves (nats-server is Go: use a skew only on the
//! jetcron processes).

use std::path::PathBuf;

use anyhow::Context as _;

/// Environment override for the library's path.
const LIBRARY_ENV: &str = "JETCRON_LIBFAKETIME";

/// The environment that runs a process with its wall clock `offset_secs`
/// seconds ahead (positive) or behind (negative) the real one, for
/// [`crate::JetcronProcess::start`]:
///
/// ```no_run
/// # let jetcron = std::path::Path::new("jetcron");
/// let skew = jetcron_testkit::faketime_env(30).unwrap();
/// let env: Vec<(&str, &str)> = skew.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
/// let ticker = jetcron_testkit::JetcronProcess::start(jetcron, &["ticker"], &env);
/// ```
///
/// Fails when libfaketime is not installed (Debian: `apt-get install
/// libfaketime`; or set `JETCRON_LIBFAKETIME` to `libfaketime.so.1`).
pub fn faketime_env(offset_secs: i64) -> anyhow::Result<Vec<(String, String)>> {
    let library = libfaketime()?;
    Ok(vec![
        ("LD_PRELOAD".into(), library.display().to_string()),
        ("FAKETIME".into(), relative_offset(offset_secs)),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        // File times are not shifted: the files others wrote keep theirs.
        ("NO_FAKE_STAT".into(), "1".into()),
    ])
}

/// libfaketime's spelling of a relative offset: a signed number of seconds
/// (`+30`, `-30`), so the faked clock runs at the real pace from the real
/// time plus the offset. Without the sign it would be a fixed date.
fn relative_offset(offset_secs: i64) -> String {
    format!("{offset_secs:+}")
}

/// `libfaketime.so.1`: `JETCRON_LIBFAKETIME`, or where Debian, Fedora and
/// libfaketime's own `make install` put it.
fn libfaketime() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os(LIBRARY_ENV) {
        return Ok(path.into());
    }
    let multiarch = format!("/usr/lib/{}-linux-gnu", std::env::consts::ARCH);
    let candidates = [
        format!("{multiarch}/faketime/libfaketime.so.1"),
        "/usr/lib64/faketime/libfaketime.so.1".to_string(),
        "/usr/lib/faketime/libfaketime.so.1".to_string(),
        "/usr/local/lib/faketime/libfaketime.so.1".to_string(),
    ];
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
        .with_context(|| {
            format!(
                "libfaketime.so.1 not found in {candidates:?}: install libfaketime \
                 (Debian: apt-get install libfaketime) or set {LIBRARY_ENV}"
            )
        })
}

#[cfg(test)]
mod tests {
    #[test]
    fn offsets_are_signed_seconds() {
        assert_eq!(super::relative_offset(30), "+30");
        assert_eq!(super::relative_offset(-30), "-30");
        assert_eq!(super::relative_offset(0), "+0");
    }
}
