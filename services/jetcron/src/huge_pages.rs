//! No transparent huge pages for the process's memory.
//!
//! mimalloc asks the kernel for 2 MB pages (`MADV_HUGEPAGE`) on its arenas.
//! A 2 MB page touched for a few bytes is resident whole, and each is zeroed
//! whole when first touched. Measured on this project's benchmark machine
//! (docs/benchmarks.md, issue 44): with them, `jetcron all` held 86 MiB
//! with a thousand jobs and a million-job cold start spent an eighth of its
//! CPU zeroing pages (`clear_page_erms`); without them, its first due event
//! came 0.3-0.4 s sooner at 50 MiB less, and at 10,000 runs a second the
//! CPU per run was the same either way. So the process turns them off
//! (`PR_SET_THP_DISABLE`) unless `MIMALLOC_ALLOW_THP` says otherwise, which
//! then decides as mimalloc documents it.

use tracing::warn;

/// The variable that leaves huge pages to mimalloc when set.
const MIMALLOC_SAYS: &str = "MIMALLOC_ALLOW_THP";

/// Turn transparent huge pages off for this process, unless
/// `MIMALLOC_ALLOW_THP` is set. Call it first: pages already faulted in
/// stay as they are.
pub fn turn_off_unless_asked() {
    if std::env::var_os(MIMALLOC_SAYS).is_none() {
        turn_off();
    }
}

fn turn_off() {
    if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
        warn!(error = %e, "cannot turn transparent huge pages off (PR_SET_THP_DISABLE): memory may be held in 2 MB pages");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_pages_are_off_for_the_process_once_turned_off() {
        turn_off();
        assert!(nix::sys::prctl::get_thp_disable().expect("PR_GET_THP_DISABLE"));
    }
}
