//! No input makes the importer panic: thousands of lines of cron-like
//! pieces and random characters, from a fixed seed so a failure repeats
//! (an open-ended search is a fuzz target's job). Every refusal and
//! warning names a line of the file, and every job translated is one the
//! API takes.

use super::*;

/// xorshift64*: small, deterministic, no dependency.
struct Prng(u64);

impl Prng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const PIECES: [&str; 48] = [
    "*",
    "*/",
    "-",
    ",",
    "/",
    "0",
    "1",
    "5",
    "7",
    "12",
    "23",
    "31",
    "59",
    "60",
    "99999999999",
    "mon",
    "FRI",
    "jan",
    "Dec",
    "sun",
    "@daily",
    "@reboot",
    "@Weekly",
    "%",
    "\\",
    "\\%",
    "\"",
    "'",
    "=",
    " ",
    " ",
    "\t",
    "#",
    "L",
    "W",
    "?",
    "+",
    "\r",
    "é",
    "\u{0}",
    "SHELL=",
    "CRON_TZ=",
    "HOME=",
    "MAILTO=",
    "TZ=",
    "root",
    "echo",
    "Europe/Berlin",
];

/// Field-like pieces, so that many lines get as far as a job.
const FIELDS: [&str; 16] = [
    "*", "*/2", "1-5", "0", "7", "mon-fri", "jan", "*/0", "5/10", "fri-mon", "L", "1,15", "31",
    "2", "*,5", "*/7",
];

/// A job line, an assignment or plain garbage.
fn some_line(prng: &mut Prng) -> String {
    match prng.below(3) {
        0 => {
            let fields: Vec<&str> = (0..5).map(|_| FIELDS[prng.below(FIELDS.len())]).collect();
            format!("{} {}", fields.join(" "), garbage_line(prng))
        }
        1 => format!(
            "{}={}",
            PIECES[prng.below(PIECES.len())],
            garbage_line(prng)
        ),
        _ => garbage_line(prng),
    }
}

fn garbage_line(prng: &mut Prng) -> String {
    let mut line = String::new();
    for _ in 0..prng.below(14) {
        if prng.below(8) == 0 {
            let c = char::from_u32(prng.below(0x3000) as u32).unwrap_or('x');
            line.push(c);
        } else {
            line.push_str(PIECES[prng.below(PIECES.len())]);
        }
    }
    line
}

fn check_file(text: &str, kind: CrontabKind) {
    let lines = text.split('\n').count();
    let parsed = parse(text, kind);
    for refusal in &parsed.refusals {
        assert!((1..=lines).contains(&refusal.line), "{refusal} of {text:?}");
        assert!(!refusal.reason.is_empty());
    }
    for warning in &parsed.warnings {
        assert!((1..=lines).contains(&warning.line), "{warning} of {text:?}");
    }
    let options = TranslateOptions {
        namespace: Some("fuzz".into()),
        prefix: "cron-".into(),
        ..options()
    };
    let mut jobs: Vec<Translated> = Vec::new();
    for entry in &parsed.entries {
        assert!((1..=lines).contains(&entry.line));
        match translate(entry, &options) {
            Ok(job) => jobs.push(job),
            Err(refusal) => assert_eq!(refusal.line, entry.line),
        }
    }
    number_repeated_ids(&mut jobs);
    for job in &jobs {
        assert_accepted(job);
    }
}

#[test]
fn garbage_lines_never_panic_and_every_refusal_names_its_line() {
    let mut prng = Prng(0x9e37_79b9_7f4a_7c15);
    for file in 0..400 {
        let count = 1 + prng.below(12);
        let mut text: String = (0..count).map(|_| some_line(&mut prng) + "\n").collect();
        if file % 10 == 0 {
            text.pop();
        }
        let kind = if file % 2 == 0 {
            CrontabKind::User
        } else {
            CrontabKind::System
        };
        check_file(&text, kind);
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut prng = Prng(42);
    for _ in 0..300 {
        let bytes: Vec<u8> = (0..prng.below(300)).map(|_| prng.next() as u8).collect();
        let text = String::from_utf8_lossy(&bytes).into_owned() + "\n";
        check_file(&text, CrontabKind::User);
        check_file(&text, CrontabKind::System);
    }
}
