//! Local users' passwords, as Argon2id hashes in PHC form
//! (`$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>`): the `argon2` crate's
//! defaults, which are OWASP's recommended minimum (19 MiB, two passes,
//! one lane), with a fresh random salt each time.
//!
//! A sign-in with a name nobody has verifies the password against a hash
//! made once at start, so an unknown name takes as long as a wrong
//! password and the answer's timing does not say which names exist.

use std::sync::OnceLock;

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher as _, PasswordVerifier as _, SaltString};
use argon2::Argon2;

/// Fewest characters of a password.
pub const MIN_PASSWORD_CHARS: usize = 10;
/// Most bytes of a password (hashing a huge one costs time for nothing).
pub const MAX_PASSWORD_BYTES: usize = 1024;

/// Why a password is not taken.
pub fn refusal(password: &str) -> Option<String> {
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Some(format!(
            "a password has at least {MIN_PASSWORD_CHARS} characters"
        ));
    }
    if password.len() > MAX_PASSWORD_BYTES {
        return Some(format!("a password has at most {MAX_PASSWORD_BYTES} bytes"));
    }
    None
}

/// The PHC string of `password` with a new salt.
pub fn hash(password: &str) -> anyhow::Result<String> {
    let salt = SaltString::generate(&mut OsRng);
    let hash = Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map_err(|e| anyhow::anyhow!("hash the password: {e}"))?;
    Ok(hash.to_string())
}

/// Whether `password` is the one of `phc` (`None`: no such user; a hash
/// is still verified, and the answer is no). A hash that does not parse
/// matches nothing. Slow on purpose: call it off the async threads.
pub fn verify(phc: Option<&str>, password: &str) -> bool {
    if password.len() > MAX_PASSWORD_BYTES {
        return false;
    }
    let stand_in = stand_in();
    let (text, real) = match phc {
        Some(phc) => (phc, true),
        None => (stand_in.as_str(), false),
    };
    let Ok(parsed) = PasswordHash::new(text) else {
        return false;
    };
    let matched = Argon2::default()
        .verify_password(password.as_bytes(), &parsed)
        .is_ok();
    matched && real
}

/// Make the stand-in hash now (at start, off the async threads), so the
/// first sign-in with an unknown name takes no longer than any other.
pub fn prepare() {
    let _ = stand_in();
}

/// A hash with the same parameters as real ones, of a password nobody
/// knows, verified for unknown names.
fn stand_in() -> &'static String {
    static STAND_IN: OnceLock<String> = OnceLock::new();
    STAND_IN.get_or_init(|| {
        let unknown = uuid::Uuid::new_v4().simple().to_string();
        hash(&unknown).unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_verifies_against_its_own_hash_only() {
        let kept = hash("correct horse battery").expect("hash");
        assert!(
            kept.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
            "{kept}"
        );
        assert_ne!(kept, hash("correct horse battery").expect("salted"));
        assert!(verify(Some(&kept), "correct horse battery"));
        assert!(!verify(Some(&kept), "correct horse batterY"));
        assert!(!verify(None, "correct horse battery"));
        assert!(!verify(Some("not a hash"), "correct horse battery"));
        assert!(!verify(Some(&kept), &"x".repeat(MAX_PASSWORD_BYTES + 1)));
    }

    #[test]
    fn short_and_huge_passwords_are_refused_with_why() {
        assert!(refusal("short").expect("short").contains("at least 10"));
        assert!(refusal(&"x".repeat(2000))
            .expect("long")
            .contains("at most"));
        assert_eq!(refusal("long enough pass"), None);
    }
}
