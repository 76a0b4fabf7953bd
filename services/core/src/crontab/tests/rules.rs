//! One test per rule of C.1: how cron reads a crontab.

use super::*;

fn fields(line: &str) -> Timing {
    let fields: Vec<String> = line.split(' ').map(String::from).collect();
    Timing::Fields(fields.try_into().expect("five fields"))
}

#[test]
fn rule_1_blank_and_comment_lines_are_skipped_and_there_are_no_trailing_comments() {
    let parsed = parse(
        "\n  # a comment\n\t\n   5 0 * * * echo a # b \\\n# c\n",
        CrontabKind::User,
    );
    assert_eq!(parsed.refusals, vec![]);
    let [entry] = parsed.entries.as_slice() else {
        panic!("one entry: {parsed:?}");
    };
    assert_eq!(entry.line, 4);
    assert_eq!(entry.command, "echo a # b \\");
    assert_eq!(
        entry.comments,
        vec![] as Vec<String>,
        "a blank line came between"
    );
}

#[test]
fn rule_1_a_file_without_a_final_newline_is_refused_whole() {
    let parsed = parse(
        "MAILTO=\"\"\n0 * * * * true\n0 0 * * * date",
        CrontabKind::User,
    );
    assert_eq!(parsed.entries, vec![]);
    let [refusal] = parsed.refusals.as_slice() else {
        panic!("one refusal: {parsed:?}");
    };
    assert_eq!(refusal.line, 3);
    assert!(
        refusal.reason.contains("does not end with a newline"),
        "{refusal}"
    );
    assert_eq!(parse("", CrontabKind::User), Parsed::default());
}

#[test]
fn rule_1_a_file_of_more_than_ten_thousand_lines_is_refused_whole() {
    let text = "# x\n".repeat(MAX_LINES + 1);
    let parsed = parse(&text, CrontabKind::User);
    assert_eq!(parsed.refusals.len(), 1);
    assert_eq!(parsed.refusals[0].line, MAX_LINES + 1);
    assert!(parse(&"# x\n".repeat(MAX_LINES), CrontabKind::User)
        .refusals
        .is_empty());
}

#[test]
fn rule_2_fields_take_lists_ranges_steps_and_names_in_any_case() {
    for line in [
        "*/15 0-23/2 1,15 jan-MAR/2 Mon-fri",
        "0 0 * Jan,jul sun,SAT,7",
        "59 23 31 12 0-7",
        "05 0 1-31/10 * *",
    ] {
        let entry = only_entry(&format!("{line} true\n"));
        assert_eq!(entry.timing, fields(line));
    }
}

#[test]
fn rule_2_names_are_three_letters_of_month_and_day_of_week_only() {
    let cases = [
        ("0 0 * * monday", "\"monday\" is not a name cron knows"),
        ("0 0 * * june", "\"june\" is not a name cron knows"),
        ("0 jan * * *", "names are only for month"),
        ("0 0 * mon *", "\"mon\" is not a name cron knows"),
    ];
    for (line, why) in cases {
        let refusal = refusal(&format!("{line} true\n"));
        assert!(refusal.reason.contains(why), "{line}: {refusal}");
    }
}

#[test]
fn rule_2_out_of_range_values_single_number_steps_and_step_zero_are_refused() {
    let cases = [
        ("60 * * * *", "minute field \"60\": 60 is out of range 0-59"),
        ("* 24 * * *", "hour field \"24\": 24 is out of range 0-23"),
        (
            "0 0 0 * *",
            "day-of-month field \"0\": 0 is out of range 1-31",
        ),
        ("0 0 * 0 *", "month field \"0\": 0 is out of range 1-12"),
        (
            "0 0 * * 8",
            "day-of-week field \"8\": 8 is out of range 0-7",
        ),
        ("0 0 * * 99999999999", "out of range 0-7"),
        (
            "5/10 * * * *",
            "a step needs a range before it: cron refuses \"5/10\"; write 5-59/10",
        ),
        (
            "*/0 * * * *",
            "minute field \"*/0\": a step of 0 is refused",
        ),
        ("*/x * * * *", "the step \"x\" is not a number"),
        ("1,,2 * * * *", "has an empty list element"),
        ("1- * * * *", "expected a number or * at \"\""),
        ("-1 * * * *", "expected a number or * at \"-1\""),
    ];
    for (line, why) in cases {
        let refusal = refusal(&format!("{line} true\n"));
        assert!(refusal.reason.contains(why), "{line}: {refusal}");
    }
}

#[test]
fn rule_2_backwards_ranges_are_refused_with_the_spelling_that_wraps() {
    let cases = [
        (
            "0 9 * * fri-mon",
            "\"fri-mon\" runs backwards",
            "write 5-7,1 ",
        ),
        (
            "0 9 * * sat-sun",
            "\"sat-sun\" runs backwards",
            "write 6-7 ",
        ),
        (
            "0 22-2 * * *",
            "\"22-2\" runs backwards",
            "write 22-23,0-2 ",
        ),
        (
            "0 0 * nov-feb *",
            "\"nov-feb\" runs backwards",
            "write 11-12,1-2 ",
        ),
    ];
    for (line, backwards, spelled) in cases {
        let refusal = refusal(&format!("{line} true\n"));
        assert!(refusal.reason.contains(backwards), "{line}: {refusal}");
        assert!(refusal.reason.contains(spelled), "{line}: {refusal}");
    }
}

#[test]
fn rule_2_croner_only_syntax_is_refused() {
    let cases = [
        ("0 0 L * *", "L (last) and LW are not cron syntax"),
        ("0 0 LW * *", "L (last) and LW are not cron syntax"),
        ("0 0 15W * *", "W (nearest weekday) is not cron syntax"),
        ("0 0 * * 5L", "L (last) is not cron syntax"),
        ("0 0 * * mon#2", "# (the n-th weekday) is not cron syntax"),
        ("0 0 ? * mon", "? (\"no specific value\") is Quartz's"),
        (
            "0 0 1 * +mon",
            "+ (both day fields must match) is jetcron's",
        ),
        ("*x * * * *", "cron reads \"*x\" as * and drops \"x\""),
        // cron takes a `*` inside a list; croner does not.
        (
            "0 0 *,5 * 2",
            "jetcron cannot read the schedule \"0 0 *,5 * +2\"",
        ),
    ];
    for (line, why) in cases {
        let refusal = refusal(&format!("{line} true\n"));
        assert!(refusal.reason.contains(why), "{line}: {refusal}");
    }
}

#[test]
fn rule_3_a_starred_day_field_makes_cron_require_both_days() {
    let cases = [
        ("0 0 */2 * 1", "0 0 */2 * +1"),
        ("0 0 1-7 * */2", "0 0 1-7 * +*/2"),
        ("0 0 *,5 * 1", "0 0 *,5 * +1"),
        ("0 0 */2 * */3", "0 0 */2 * +*/3"),
        ("30 4 1,15 * 5", "30 4 1,15 * 5"),
        ("0 0 */2 * *", "0 0 */2 * *"),
        ("0 0 * * */2", "0 0 * * */2"),
        ("0 0 * * 1", "0 0 * * 1"),
    ];
    for (line, jetcron) in cases {
        assert_eq!(fields(line).schedule_line(), jetcron, "{line}");
    }
}

#[test]
fn rule_3_a_line_that_never_fires_is_refused() {
    for line in [
        "0 0 31 2 *",
        "0 0 30 feb *",
        "0 0 31 4,6 */2",
        "0 0 31 9 */3",
    ] {
        let refusal = refusal(&format!("{line} true\n"));
        assert!(refusal.reason.contains("never fires"), "{line}: {refusal}");
    }
    // Either day field may match: February's Mondays.
    only_entry("0 0 31 2 1 true\n");
}

#[test]
fn rule_4_macros_are_cron_s_and_case_sensitive() {
    for name in [
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@midnight",
        "@hourly",
    ] {
        let entry = only_entry(&format!("{name}\ttrue\n"));
        assert_eq!(entry.timing, Timing::Macro(name.into()));
        assert_eq!(entry.timing.schedule_line(), name);
    }
    let reboot = refusal("@reboot start-agent\n");
    assert_eq!(
        reboot.reason,
        "@reboot: jetcron has no host boot; use a systemd unit or trigger the job after deploy"
    );
    assert!(refusal("@Daily x\n")
        .reason
        .contains("case-sensitive: write @daily"));
    assert!(refusal("@every 5m x\n")
        .reason
        .contains("unknown macro \"@every\""));
    assert!(refusal("@daily\n")
        .reason
        .contains("no command after \"@daily\""));
}

#[test]
fn rule_5_system_lines_name_a_user_and_cron_d_names_are_checked() {
    let parsed = parse(
        "17 * * * * root cd / && run-parts /etc/cron.hourly\n@daily nobody true\n* * * * * root\n",
        CrontabKind::System,
    );
    let users: Vec<_> = parsed.entries.iter().map(|e| e.user.as_deref()).collect();
    assert_eq!(users, vec![Some("root"), Some("nobody")]);
    assert_eq!(
        parsed.entries[0].command,
        "cd / && run-parts /etc/cron.hourly"
    );
    assert_eq!(parsed.refusals.len(), 1);
    assert_eq!(parsed.refusals[0].line, 3);
    assert!(parsed.refusals[0].reason.contains("no command"));
    let run_as: Vec<usize> = parsed
        .warnings
        .iter()
        .filter(|w| w.message.contains("executor's user"))
        .map(|w| w.line)
        .collect();
    assert_eq!(run_as, vec![1, 2], "one warning per user");
    assert!(cron_reads_cron_d_file("e2scrub_all"));
    assert!(cron_reads_cron_d_file("my-job_2"));
    assert!(!cron_reads_cron_d_file("backup.bak"));
    assert!(!cron_reads_cron_d_file("x~"));
}

#[test]
fn rule_6_assignments_apply_to_later_lines_in_order() {
    let parsed = parse(
        "B=1\n* * * * * first\nA = \"x y\"\nB='2'\n* * * * * second\n",
        CrontabKind::User,
    );
    let env = |i: usize| -> Vec<(String, String, usize)> {
        parsed.entries[i]
            .env
            .iter()
            .map(|v| (v.name.clone(), v.value.clone(), v.line))
            .collect()
    };
    assert_eq!(env(0), vec![("B".into(), "1".into(), 1)]);
    assert_eq!(
        env(1),
        vec![("B".into(), "2".into(), 4), ("A".into(), "x y".into(), 3)]
    );
}

#[test]
fn rule_6_broken_assignments_are_refused_by_line() {
    let parsed = parse(
        "NAME=\nA = \"x y\" # c\nB=1 # kept\n* * * * * true\n",
        CrontabKind::User,
    );
    let lines: Vec<usize> = parsed.refusals.iter().map(|r| r.line).collect();
    assert_eq!(lines, vec![1, 2]);
    assert!(parsed.refusals[0].reason.contains("write NAME=\"\""));
    assert!(parsed.refusals[1]
        .reason
        .contains("only blanks may follow a quoted value"));
    assert_eq!(parsed.entries[0].env[0].value, "1 # kept");
    let whole_file: Vec<usize> = parsed
        .warnings
        .iter()
        .filter(|w| w.message.contains("refuses this whole file"))
        .map(|w| w.line)
        .collect();
    assert_eq!(whole_file, vec![1], "cron ignores the file for line 1");
}

#[test]
fn rule_6_what_cron_takes_but_jetcron_cannot_do_is_no_syntax_error() {
    let parsed = parse("@reboot x\n0 9 * * fri-mon x\n", CrontabKind::User);
    assert_eq!(parsed.refusals.len(), 2);
    assert_eq!(parsed.warnings, vec![]);
}

#[test]
fn rule_7_cron_tz_is_warned_about_where_it_is_set() {
    let parsed = parse("CRON_TZ=Europe/Berlin\n0 2 * * * x\n", CrontabKind::User);
    assert_eq!(parsed.warnings.len(), 1);
    assert_eq!(parsed.warnings[0].line, 1);
    assert!(parsed.warnings[0].message.contains("cronie's"));
}

#[test]
fn rule_8_percent_splits_the_command_from_its_stdin() {
    let entry = only_entry("0 22 * * 1-5\tmail -s \"It's 10pm\" joe%Joe,%%Where are your kids?%\n");
    assert_eq!(entry.command, "mail -s \"It's 10pm\" joe");
    assert_eq!(
        entry.stdin.as_deref(),
        Some("Joe,\n\nWhere are your kids?\n")
    );
    assert_eq!(
        entry.command_as_written,
        "mail -s \"It's 10pm\" joe%Joe,%%Where are your kids?%"
    );
    let entry = only_entry("57 0 * * 0 [ $(date +\\%d) -le 7 ] && check\n");
    assert_eq!(entry.command, "[ $(date +%d) -le 7 ] && check");
    assert_eq!(entry.stdin, None);
    let empty = refusal("* * * * * %data\n");
    assert!(
        empty.reason.contains("command before the first % is empty"),
        "{empty}"
    );
}

#[test]
fn crlf_line_ends_are_refused_by_line() {
    let parsed = parse("A=1\r\n* * * * * true\r\n\r\n", CrontabKind::User);
    assert_eq!(parsed.entries, vec![]);
    let lines: Vec<usize> = parsed.refusals.iter().map(|r| r.line).collect();
    assert_eq!(lines, vec![2, 3]);
    assert!(parsed.refusals[0].reason.contains("carriage return"));
}

#[test]
fn comments_directly_above_an_entry_are_kept() {
    let entry = only_entry("# not this one\n\n# first\n  #second\n#\n0 0 * * * true\n");
    assert_eq!(entry.comments, vec!["first", "second", ""]);
}
