//! When jobs fire: the schedule language, the DST rule that reads a cron
//! line on a zone's wall clock, a job's fire times, and the preview that
//! shows all of it before a job is saved.
//!
//! One folder because it is one question ("when does this fire, and why
//! then?") that was answered in six files at two places (five at the
//! crate's root, one under `job`); a reader following a fire time from the
//! line to the instant now stays here. Pure and synchronous throughout:
//! callers pass the instant to search after, nothing reads a clock.
//!
//! The files, imports going one way (each uses only those above it):
//! - [`words`]: a cron line in English ("At 02:30, Monday through Friday");
//! - [`wall_clock`]: a cron line on a zone's wall clock ([`CronLine`]) and
//!   the DST rule (Vixie cron(8)'s) that turns its matches into instants;
//!   inside it, `zone_offsets` (a zone's offsets and transitions, probed)
//!   and `dst_effects` (what the rule did to each fire, for the preview);
//! - `line`: the parsed schedule line ([`Schedule`]: cron, `@every`, `@at`)
//!   and its `next_fire` maths; `parse`: the text to it;
//! - [`shared_lines`]: parsed lines shared by the jobs that use the same
//!   line ([`SharedLines`]);
//! - [`fire_times`]: when a valid job fires ([`Timing`]: its line within
//!   its bounds, with jitter and misfire recovery); it reads the job's
//!   definition, so it sits on top of `job` as `job` sits on `line`;
//! - [`preview`]: a line's next fires with wall times, DST notes and the
//!   line in English, for the preview request and a job's page.
//!
//! [`CronLine`]: wall_clock::CronLine
//! [`SharedLines`]: shared_lines::SharedLines
//! [`Timing`]: fire_times::Timing

pub mod fire_times;
mod line;
mod parse;
pub mod preview;
pub mod shared_lines;
pub mod wall_clock;
pub mod words;

pub use line::{Schedule, ScheduleError, MIN_EVERY};
pub use parse::parse_timezone;

#[cfg(test)]
mod tests;
