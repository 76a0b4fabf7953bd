//! A pool's name as a held job keeps it: a number in the process's list
//! of pool names.
//!
//! Every job names its pool, and a replica holds a million jobs, but a
//! deployment has a handful of pools. A shared pointer to the name cost
//! each held job 8 bytes; this number is 4, which leaves room beside it
//! for the job's paused flag in the same 8 (`HeldJob` is 80 bytes, not 88).
//!
//! The list is one per process, not one per book: a shard's table, a
//! shard pass loading in a task of its own and the fires a plan hands out
//! all name the same few pools, and a list handed to each of them would
//! be threaded through every fire taken for a lookup that never changes.
//! A name stays listed for the life of the process, as the book's shared
//! names did before: pools are few and their names short.

use std::sync::{Arc, LazyLock, RwLock};

use hashbrown::HashMap;

/// A pool's number in the process's list of pool names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PoolName(u32);

#[derive(Default)]
struct Names {
    list: Vec<Arc<String>>,
    numbers: HashMap<Box<str>, u32>,
}

static NAMES: LazyLock<RwLock<Names>> = LazyLock::new(RwLock::default);

impl PoolName {
    /// The number of the pool named `name`, listing it if it is new.
    pub fn of(name: &str) -> Self {
        if let Some(number) = read_names().numbers.get(name).copied() {
            return Self(number);
        }
        let mut names = NAMES
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(number) = names.numbers.get(name).copied() {
            return Self(number);
        }
        let number = u32::try_from(names.list.len()).expect("fewer than 2^32 pool names");
        names.list.push(Arc::new(name.to_string()));
        names.numbers.insert(name.into(), number);
        Self(number)
    }

    /// The pool's name, shared.
    pub fn name(self) -> Arc<String> {
        Arc::clone(&read_names().list[self.0 as usize])
    }
}

/// The list, read. A panic while it was written left it whole (a push
/// and an insert of values made before), so a poisoned lock is read on.
fn read_names() -> std::sync::RwLockReadGuard<'static, Names> {
    NAMES
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_has_one_number_and_gives_it_back() {
        let jobs = PoolName::of("pool-name-test-jobs");
        let other = PoolName::of("pool-name-test-other");
        assert_ne!(jobs, other);
        assert_eq!(PoolName::of("pool-name-test-jobs"), jobs);
        assert_eq!(*jobs.name(), "pool-name-test-jobs");
        assert_eq!(*other.name(), "pool-name-test-other");
        assert!(Arc::ptr_eq(
            &jobs.name(),
            &PoolName::of("pool-name-test-jobs").name()
        ));
    }
}
