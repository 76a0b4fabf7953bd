//! What commands print: aligned tables for people (the default), the API's
//! answer as JSON for scripts (`-o json`).

use std::fmt::Write as _;

/// `-o table` (default) or `-o json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    #[default]
    Table,
    Json,
}

/// Widest a cell gets before it is cut with `…`.
const MAX_CELL: usize = 60;

/// A table: a header row and rows of text cells, columns padded to their
/// widest cell (counted in characters).
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as text, one line per row, ending in a newline.
    pub fn render(&self) -> String {
        let rows: Vec<Vec<String>> = std::iter::once(&self.header)
            .chain(&self.rows)
            .map(|row| row.iter().map(|c| cell(c)).collect())
            .collect();
        let columns = self.header.len();
        let widths: Vec<usize> = (0..columns)
            .map(|i| {
                rows.iter()
                    .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in rows {
            let mut line = String::new();
            for (i, width) in widths.iter().enumerate() {
                let text = row.get(i).map_or("", String::as_str);
                match i + 1 == columns {
                    true => line.push_str(text),
                    false => {
                        let _ =
                            write!(line, "{text}{}  ", " ".repeat(width - text.chars().count()));
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// One line of at most [`MAX_CELL`] characters: line breaks become spaces.
fn cell(text: &str) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match flat.chars().count() > MAX_CELL {
        true => flat.chars().take(MAX_CELL - 1).chain(['…']).collect(),
        false => flat,
    }
}

/// A JSON value's text for a cell: strings bare, nothing as `-`.
pub fn shown(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Null => "-".to_string(),
        serde_json::Value::String(s) if s.is_empty() => "-".to_string(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The answer as pretty JSON, ending in a newline.
pub fn json(value: &serde_json::Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_by_characters_and_long_cells_are_cut() {
        let mut table = Table::new(&["ID", "SCHEDULE", "TARGET"]);
        table.row(vec!["é-job".into(), "@daily".into(), "x".repeat(70)]);
        table.row(vec![
            "b".into(),
            "0 */5 * * * *".into(),
            "line\nbreak".into(),
        ]);
        let text = table.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "ID     SCHEDULE       TARGET");
        assert_eq!(
            lines[1],
            format!("é-job  @daily         {}…", "x".repeat(59))
        );
        assert_eq!(lines[2], "b      0 */5 * * * *  line break");
    }
}
