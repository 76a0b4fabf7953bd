//! A line diff of two pretty-printed definitions, for the revision history
//! (the `similar` crate computes it; this only labels the lines).

use similar::{ChangeTag, TextDiff};

/// One line of a diff.
pub struct DiffLine {
    /// `+`, `-` or a space.
    pub sign: &'static str,
    /// `added`, `removed` or `same` (a CSS class).
    pub class: &'static str,
    pub text: String,
}

/// The lines of `before` and `after`, changed ones marked.
pub fn lines(before: &str, after: &str) -> Vec<DiffLine> {
    TextDiff::from_lines(before, after)
        .iter_all_changes()
        .map(|change| {
            let (sign, class) = match change.tag() {
                ChangeTag::Delete => ("-", "removed"),
                ChangeTag::Insert => ("+", "added"),
                ChangeTag::Equal => (" ", "same"),
            };
            DiffLine {
                sign,
                class,
                text: change.value().trim_end_matches('\n').to_string(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_lines_are_marked() {
        let diff = lines(
            "{\n  \"a\": 1,\n  \"b\": 2\n}",
            "{\n  \"a\": 1,\n  \"b\": 3\n}",
        );
        let marked: Vec<_> = diff
            .iter()
            .map(|l| format!("{}{}", l.sign, l.text))
            .collect();
        assert_eq!(
            marked,
            ["{", "  \"a\": 1,", "-  \"b\": 2", "+  \"b\": 3", "}"].map(|l| {
                if l.starts_with(['-', '+']) {
                    l.to_string()
                } else {
                    format!(" {l}")
                }
            })
        );
    }
}
