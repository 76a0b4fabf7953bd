#!/usr/bin/env python3
"""Independent reference for jetcron's schedule maths: writes cases.json.

Wall-clock matching comes from croniter (an established Python cron
library, pinned below); the DST rule (Vixie cron(8)'s, docs/schedules.md)
is applied here with the standard library's zoneinfo, by a method unlike
the Rust one: every wall-clock match near the search window is resolved to
the set of instants it fires at, and the fires are that set's sorted
members. Rust walks real time forwards instead.

- A line is fixed-time when neither its minute nor its hour field starts
  with '*' (or '?'); it fires each match once: the first occurrence of a
  repeated wall time, the first instant after the gap for a missing one.
- A wildcard line fires at every instant whose wall time matches: both
  copies of a repeated wall time, nothing for a missing one.

croniter reads neither 'W' nor 'LW', nor '@every' / '@at': those days and
instants are worked out by hand below (nearest_weekday, last_weekday,
every, at). Two croniter 6.0.0 readings differ from cron(8) and are kept out
of the lines: a range with equal ends (23-23, read as every hour) and a
day-of-month step alone (*/10 skips 1 March after February's 21st). Run from the repository root:

    python3 -m pip install croniter==6.0.0
    python3 services/core/tests/schedules/reference/generate.py

The Rust test services/core/tests/schedules/conformance.rs reads cases.json.
"""

import calendar
import json
import os
import re
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from croniter import croniter

UTC = timezone.utc
FIRES = 8
MARGIN = timedelta(hours=3)  # larger than any shift in the zones used


def fields_of(line):
    macros = {
        "@yearly": "0 0 1 1 *",
        "@annually": "0 0 1 1 *",
        "@monthly": "0 0 1 * *",
        "@weekly": "0 0 * * 0",
        "@daily": "0 0 * * *",
        "@midnight": "0 0 * * *",
        "@hourly": "0 * * * *",
    }
    return macros.get(line, line).split()


def is_fixed_time(fields):
    minute, hour = (fields[0], fields[1]) if len(fields) == 5 else (fields[1], fields[2])
    return not (minute[0] in "*?" or hour[0] in "*?")


def nearest_weekday(year, month, day):
    """The weekday nearest the day-th within its month ('nW'), never
    crossing into another month."""
    last = calendar.monthrange(year, month)[1]
    if day > last:
        return None  # "31W" skips the months without a 31st, as in Quartz
    wd = calendar.weekday(year, month, day)  # Monday 0
    if wd == 5:  # Saturday: Friday before, or Monday after on the 1st
        return day - 1 if day > 1 else day + 2
    if wd == 6:  # Sunday: Monday after, or Friday before on the last day
        return day + 1 if day < last else day - 2
    return day


def last_weekday(year, month):
    last = calendar.monthrange(year, month)[1]
    while calendar.weekday(year, month, last) >= 5:
        last -= 1
    return last


def wall_matches(fields, start):
    """Naive wall times matching `fields`, strictly after `start`."""
    six = len(fields) >= 6
    dom_index = 3 if six else 2
    dom = fields[dom_index]
    day_rule = None
    if re.fullmatch(r"LW", dom, re.I):
        day_rule = lambda y, m: last_weekday(y, m)
    elif re.fullmatch(r"\d+W", dom, re.I):
        n = int(dom[:-1])
        day_rule = lambda y, m: nearest_weekday(y, m, n)
    plain = list(fields)
    if day_rule:
        plain[dom_index] = "*"
    # croniter spells "last Friday of the month" L5 where cron(8) and
    # jetcron write 5L.
    plain[dom_index + 2] = re.sub(r"^([0-7])L$", r"L\1", plain[dom_index + 2])
    line = " ".join(plain)
    it = croniter(line, start, second_at_beginning=six, ret_type=datetime)
    for _ in range(2_000_000):
        try:
            m = it.get_next(datetime)
        except Exception:  # no match any more (year bound)
            return
        if day_rule and m.day != day_rule(m.year, m.month):
            continue
        yield m


def gap_end(m, tz):
    """The first instant whose wall time is past the missing wall time m."""
    lo = int((m - timedelta(hours=18)).replace(tzinfo=UTC).timestamp())
    hi = int((m + timedelta(hours=18)).replace(tzinfo=UTC).timestamp())
    target = m.replace(tzinfo=UTC).timestamp()

    def wall(ts):
        local = datetime.fromtimestamp(ts, tz)
        return local.replace(tzinfo=UTC).timestamp()

    while hi - lo > 1:
        mid = (lo + hi) // 2
        if wall(mid) < target:
            lo = mid
        else:
            hi = mid
    return datetime.fromtimestamp(hi, UTC)


def instants_of(m, tz):
    """(kind, instants) of the naive wall time m in tz."""
    found = []
    for fold in (0, 1):
        u = m.replace(tzinfo=tz, fold=fold).astimezone(UTC)
        if u.astimezone(tz).replace(tzinfo=None) == m and u not in found:
            found.append(u)
    found.sort()
    if not found:
        return "gap", [gap_end(m, tz)]
    return ("repeated" if len(found) == 2 else "single"), found


def cron_fires(line, zone, after, n):
    fields = fields_of(line)
    tz = ZoneInfo(zone)
    fixed = is_fixed_time(fields)
    start_wall = after.astimezone(tz).replace(tzinfo=None) - MARGIN
    fires = set()
    for m in wall_matches(fields, start_wall):
        kind, instants = instants_of(m, tz)
        if kind == "gap":
            chosen = instants if fixed else []
        elif kind == "repeated":
            chosen = instants[:1] if fixed else instants
        else:
            chosen = instants
        fires.update(u for u in chosen if u > after)
        ahead = sorted(fires)
        if len(ahead) >= n:
            last_wall = ahead[n - 1].astimezone(tz).replace(tzinfo=None)
            if m > last_wall + MARGIN:
                break
        if m > start_wall + timedelta(days=366 * 30):
            break
    return sorted(fires)[:n]


def every(period_s, after, n):
    first = (int(after.timestamp()) // period_s + 1) * period_s
    return [datetime.fromtimestamp(first + i * period_s, UTC) for i in range(n)]


def fmt(u):
    return u.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def transitions(zone, year):
    """Instants in `year` where the zone's offset changes (to the second)."""
    tz = ZoneInfo(zone)
    out = []
    t = datetime(year, 1, 1, tzinfo=UTC)
    step = timedelta(hours=6)
    end = datetime(year + 1, 1, 1, tzinfo=UTC)
    while t < end:
        a, b = t.astimezone(tz).utcoffset(), (t + step).astimezone(tz).utcoffset()
        if a != b:
            lo, hi = int(t.timestamp()), int((t + step).timestamp())
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if datetime.fromtimestamp(mid, tz).utcoffset() == a:
                    lo = mid
                else:
                    hi = mid
            out.append(datetime.fromtimestamp(hi, UTC))
        t += step
    return out


def general_cases():
    """Syntax and calendar cases, in zones without a DST night in reach."""
    after = datetime(2026, 1, 1, tzinfo=UTC)
    lines = [
        # 5 fields, crontab(5) examples
        "5 0 * * *", "15 14 1 * *", "0 22 * * 1-5", "23 0-23/2 * * *", "5 4 * * sun",
        "0 0 1,15 * 3", "0 12 * * 0", "0 12 * * 7", "*/5 * * * *", "0 */6 * * *",
        "30 9 * * MON-FRI", "0 0 * JAN,JUL *", "0 8-18/2 * * *", "15,45 * * * *",
        "0 0 1 */3 *", "59 23 31 12 *", "0 0 * * 6,0", "0 9 1-7 * 1",
        # 6 fields, seconds first (the Nats-Schedule form)
        "*/10 * * * * *", "0 */15 * * * *", "30 0 12 * * *", "0 0 0 * * 1",
        "15,45 30 8 * * *", "0 0 9-17 * * MON-FRI", "*/30 * 9 * * *", "0 30 */4 * * *",
        # 7 fields, year bounds
        "0 0 0 1 1 * 2030", "0 0 12 * * * 2027", "0 30 6 15 6 * 2026-2028",
        "0 0 0 1 * * 2026-2030/2", "0 0 0 29 2 * 2028",
        # leap years
        "0 0 29 2 *", "0 12 29 2 *", "0 0 0 29 2 *",
        # L, W, LW, #
        "0 0 L * *", "0 18 L * *", "0 0 L 2 *", "0 0 15W * *", "0 0 1W * *",
        "0 0 31W * *", "0 9 LW * *", "0 0 LW 2 *", "0 0 * * 1#2", "0 0 * * 5#3",
        "0 0 * * MON#1", "0 0 * * 5L", "0 10 * * 0#5",
        # day-of-month OR day-of-week when both are restricted
        "0 0 1 * MON", "0 0 13 * 5", "0 0 1,15 * 3", "0 12 L * 0",
        # macros
        "@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly",
        # more shapes: lists of ranges, steps from a value, names in ranges
        "0 9,12,18 * * *", "10-20 8 * * *", "0 0-6/3 * * *", "5-59/20 * * * *", "0 4 * * 1-5", "15 3 * * 0,6", "0 */4 * * 1", "20 4 1,15 * *", "0 0 * 6-8 1", "0 18 * * fri", "0 2 1 jan *", "30 12 */10 * 1",
        "0 0 1-7,15-21 * *", "0 6 * * TUE,THU", "0 6 * * SAT-SUN", "0 0 1 JAN-MAR *",
        "0 12 15 */2 *", "0 0 10-20/5 * *", "45 23 * * 5", "0 0 * * 3-5",
        "30 5 1,L * *", "0 0 2-31/2 * *", "0 7 * 2,4,6,8,10,12 *", "0 8 1 * 1-5",
        "0 30 1 * * 0", "10,20,30 0 0 * * *", "0 0 8 * * 1#1,3#3", "0 0 0 1 1 * 2026-2035/3",
        "0 15 10 * * ? 2027", "0 0 12 ? * WED", "59 59 23 31 12 *", "0 0 0 L 2 * 2028",
        "0 0 0 LW 6 * 2026-2027",
    ]
    cases = []
    for zone in ["UTC", "Asia/Kathmandu", "Asia/Tokyo"]:
        for line in lines:
            if zone != "UTC" and lines.index(line) % 3:
                continue  # every third line also in the fixed-offset zones
            fires = cron_fires(line, zone, after, FIRES)
            cases.append({"line": line, "timezone": zone, "after": fmt(after),
                          "fires": [fmt(u) for u in fires], "why": "syntax and calendar"})
    for period, line in [(90, "@every 90s"), (5400, "@every 1h30m"), (86400, "@every 1d"),
                         (7, "@every 7s"), (3600 * 25, "@every 25h")]:
        for zone in ["UTC", "America/New_York"]:
            fires = every(period, after + timedelta(seconds=17), FIRES)
            cases.append({"line": line, "timezone": zone, "after": fmt(after + timedelta(seconds=17)),
                          "fires": [fmt(u) for u in fires], "why": "@every, epoch-anchored, zone ignored"})
    for text, zone in [("@at 2030-05-01T10:00:00+02:00", "UTC"),
                       ("@at 2027-03-14T02:30:00-05:00", "America/New_York")]:
        at = datetime.fromisoformat(text.split(" ", 1)[1]).astimezone(UTC)
        cases.append({"line": text, "timezone": zone, "after": fmt(after),
                      "fires": [fmt(at)], "why": "@at, one instant"})
        cases.append({"line": text, "timezone": zone, "after": fmt(at),
                      "fires": [], "why": "@at, nothing after its instant"})
    return cases


def dst_cases():
    """Lines at and around every transition of the DST zones in 2026-2027
    (and of zones in years when their rules differed)."""
    zones = [
        ("America/New_York", [2026, 2027]),
        ("Europe/Berlin", [2026, 2027]),
        ("Europe/London", [2027]),
        ("Australia/Sydney", [2027]),
        ("America/Santiago", [2027]),
        ("Australia/Lord_Howe", [2026, 2027]),
        ("Pacific/Chatham", [2026, 2027]),
        ("America/Sao_Paulo", [2018]),  # DST abolished in 2019
        ("Asia/Tehran", [2021]),  # DST abolished in 2022
    ]
    cases = []
    for zone, years in zones:
        tz = ZoneInfo(zone)
        for year in years:
            for t in transitions(zone, year):
                before = (t - timedelta(seconds=1)).astimezone(tz)
                after_t = t.astimezone(tz)
                wall_before = before.replace(tzinfo=None) + timedelta(seconds=1)
                wall_after = after_t.replace(tzinfo=None)
                # The wall time that is missing or repeated begins at the
                # earlier of the two and lasts as long as the shift.
                start = min(wall_before, wall_after)
                inside = start + abs(wall_after - wall_before) / 2
                h, mi = inside.hour, inside.minute - inside.minute % 5
                sh = start.hour
                day = f"{inside.day} {inside.month}"
                lines = [
                    f"{mi} {h} * * *",  # fixed, inside the gap or overlap
                    f"0 {mi} {h} * * *",
                    f"*/30 {mi} {h} * * *",  # fixed-time, seconds wildcard
                    f"0 0,{(mi + 15) % 60} {h} {day} * {year}",
                    f"0 */15 {sh} {day} * {year}",  # wildcard minute, fixed hour
                    f"*/20 {h} * * *",
                    "0 * * * *",
                    "*/15 * * * *",
                    "0 */30 * * * *",
                    f"0 {sh} * * *",
                    f"{mi} {h},{(h + 1) % 24} * * *",  # fixed, two hours
                    f"0 {mi}-59/10 {h} * * *",  # fixed-time (no leading *)
                    f"{mi} */2 * * *",  # wildcard hour
                    f"0 0-59/20 * * * *",  # fixed-time minute, wildcard hour
                    # wildcard; croniter 6.0.0 reads a range like 23-23 as
                    # every hour, so the range always has two ends
                    f"*/45 * {sh}-{min(sh + 2, 23)} * * *" if sh < 23 else "*/45 * 23 * * *",
                ]
                search_from = t - timedelta(hours=4)
                for line in lines:
                    fires = cron_fires(line, zone, search_from, FIRES)
                    cases.append({"line": line, "timezone": zone, "after": fmt(search_from),
                                  "fires": [fmt(u) for u in fires],
                                  "why": f"DST transition {fmt(t)}"})
    return cases


def main():
    cases = general_cases() + dst_cases()
    lines = {(c["line"], c["timezone"]) for c in cases}
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases.json")
    with open(out, "w") as f:
        json.dump({"generated_by": "services/core/tests/schedules/reference/generate.py",
                   "reference": "croniter 6.0.0 for wall-clock matches; zoneinfo for the DST rule",
                   "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases, {len(lines)} distinct (line, zone) pairs -> {out}")


if __name__ == "__main__":
    main()
