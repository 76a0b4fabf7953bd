//! The console's inline SVG charts of run figures ([`Day`]): the overview's
//! runs per hour and the job table's sparklines. Numbers only, so nothing
//! from a job reaches the markup.

use crate::runs::figures::{Day, HOURS};

/// An inline SVG bar chart of `day` (the overview): runs per hour, stacked
/// succeeded / other / failed, with the peak written beside it.
pub fn chart(day: &Day) -> String {
    let total = |h: usize| day.succeeded[h] + day.failed[h] + day.other[h];
    let peak = (0..HOURS).map(total).max().unwrap_or(0).max(1);
    let mut svg = format!(
        r#"<svg class="chart" viewBox="0 0 480 120" role="img" aria-label="Runs per hour over the last 24 hours, at most {peak} in an hour">"#
    );
    for hour in 0..HOURS {
        let x = hour * 20;
        let mut y = 120u64;
        for (count, class) in [
            (day.succeeded[hour], "ok"),
            (day.other[hour], "muted"),
            (day.failed[hour], "bad"),
        ] {
            let height = (count * 110).div_ceil(peak);
            if height > 0 {
                y = y.saturating_sub(height);
                svg.push_str(&format!(
                    r#"<rect x="{x}" y="{y}" width="16" height="{height}" class="{class}"/>"#
                ));
            }
        }
    }
    svg.push_str(&format!(
        r#"<text x="478" y="10" text-anchor="end" class="axis">{peak}/h</text></svg>"#
    ));
    svg
}

/// An inline SVG sparkline of `day`: one bar per hour, its height the runs
/// of that hour, failed runs stacked on top in the failure colour. Numbers
/// only, so nothing from a job reaches the markup.
pub fn sparkline(day: &Day) -> String {
    let peak = (0..HOURS)
        .map(|h| day.succeeded[h] + day.failed[h])
        .max()
        .unwrap_or(0)
        .max(1);
    let mut svg = String::from(
        r#"<svg class="spark" viewBox="0 0 72 16" width="72" height="16" aria-hidden="true">"#,
    );
    for hour in 0..HOURS {
        let x = hour * 3;
        let ok = day.succeeded[hour] * 16 / peak;
        let bad = (day.failed[hour] * 16).div_ceil(peak);
        if ok > 0 {
            svg.push_str(&format!(
                r#"<rect x="{x}" y="{}" width="2" height="{ok}" class="ok"/>"#,
                16 - ok
            ));
        }
        if bad > 0 {
            svg.push_str(&format!(
                r#"<rect x="{x}" y="{}" width="2" height="{bad}" class="bad"/>"#,
                16u64.saturating_sub(ok + bad)
            ));
        }
    }
    svg.push_str("</svg>");
    svg
}
