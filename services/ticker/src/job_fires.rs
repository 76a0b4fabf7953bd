//! The scheduled times of one job's queued or in-flight fires, in 16 bytes.
//!
//! A plan holds one of these per job, a million of them at the design
//! point, and nearly every job has exactly one pending fire (its next);
//! catch-ups beyond it are rare and go on the heap. A `SmallVec` of one
//! inline element is 24 bytes whatever the element (its heap form is a
//! pointer and a length beside the capacity), so this keeps the first time
//! in place and the rest behind one pointer. Only scheduled times are
//! kept: a fire's publish instant follows from its scheduled time and the
//! job (`Timing::fire_instant`), which do not change while the job is
//! held in its slot.

use crate::millis::Millis;

/// Scheduled times, in no order, each at most once (the caller checks).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFires {
    first: Option<Millis>,
    // A thin pointer (8 bytes; a boxed slice or a `Vec` in place is 16 or
    // 24), and catch-ups are rare enough for the second allocation.
    #[allow(clippy::box_collection)]
    more: Option<Box<Vec<Millis>>>,
}

impl JobFires {
    pub fn iter(&self) -> impl Iterator<Item = Millis> + '_ {
        self.first
            .into_iter()
            .chain(self.more.iter().flat_map(|more| more.iter().copied()))
    }

    pub fn contains(&self, scheduled: Millis) -> bool {
        self.iter().any(|t| t == scheduled)
    }

    pub fn push(&mut self, scheduled: Millis) {
        if self.first.is_none() {
            self.first = Some(scheduled);
        } else {
            self.more.get_or_insert_with(Box::default).push(scheduled);
        }
    }

    /// Keep the times `keep` says to keep; it sees each time once.
    pub fn retain(&mut self, mut keep: impl FnMut(Millis) -> bool) {
        if self.first.is_some_and(|first| !keep(first)) {
            self.first = None;
        }
        if let Some(more) = &mut self.more {
            more.retain(|t| keep(*t));
            if self.first.is_none() {
                self.first = more.pop();
            }
            if more.is_empty() {
                self.more = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Millis {
        Millis::of(
            chrono::DateTime::from_timestamp_millis(1_800_000_000_000 + ms).expect("instant"),
        )
    }

    fn sorted(fires: &JobFires) -> Vec<Millis> {
        let mut all: Vec<Millis> = fires.iter().collect();
        all.sort();
        all
    }

    #[test]
    fn times_are_pushed_found_and_dropped_each_seen_once() {
        let mut fires = JobFires::default();
        assert_eq!(sorted(&fires), []);
        fires.push(at(3));
        assert_eq!(fires.more, None, "one time in place");
        fires.push(at(1));
        fires.push(at(2));
        assert_eq!(sorted(&fires), [at(1), at(2), at(3)]);
        assert!(fires.contains(at(2)) && !fires.contains(at(4)));

        // The first one dropped: one of the others takes its place.
        let mut seen = Vec::new();
        fires.retain(|t| {
            seen.push(t);
            t != at(3)
        });
        seen.sort();
        assert_eq!(seen, [at(1), at(2), at(3)], "each seen once");
        assert_eq!(sorted(&fires), [at(1), at(2)]);
        assert!(fires.first.is_some());

        fires.retain(|t| t == at(2));
        assert_eq!(sorted(&fires), [at(2)]);
        assert_eq!(fires.more, None, "the heap part goes once empty");
        fires.retain(|_| false);
        assert_eq!(fires, JobFires::default());
    }

    #[test]
    fn the_times_of_a_job_fit_in_16_bytes() {
        assert_eq!(std::mem::size_of::<JobFires>(), 16);
    }
}
