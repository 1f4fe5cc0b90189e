//! docs/benchmarks.md as data, and the pure function that writes it from a run.
//!
//! The page is a preamble, then one section per table (`tables.rs`): a heading, the
//! line naming the command, machine and date of the run that measured it, the table
//! (rows in a fixed order, one column for leasekeeper and one for the peer on the same
//! server where there is one) and the paragraph that explains it. The bench's modules
//! report cells by `Key` (table, row, column); `render` puts them in place.
//!
//! A whole run rewrites every table it measures (every table but the ones of sections
//! that run only when asked for). A run of some sections (`LK_BENCH_ONLY`) rewrites only
//! the tables all of whose rows it measured and keeps every other section byte for
//! byte as the page has it, so each table always carries the command, machine and date
//! of the one run that produced it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

#[path = "tables.rs"]
mod tables;

pub use tables::{PREAMBLE, TABLES};

/// One cell of the page: its table, row and column, by id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub table: &'static str,
    pub row: &'static str,
    pub column: &'static str,
}

impl Key {
    pub const fn new(table: &'static str, row: &'static str, column: &'static str) -> Key {
        Key { table, row, column }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} / {} / {}", self.table, self.row, self.column)
    }
}

/// One table of the page and its section.
pub struct Table {
    pub id: &'static str,
    pub heading: &'static str,
    pub columns: &'static [Column],
    /// In the page's order; each row has one cell per column.
    pub rows: &'static [Row],
    /// The explanation under the table, line-wrapped; empty for none.
    pub paragraph: &'static str,
    /// Whether a whole run measures it (false: its section runs only when asked for).
    pub in_whole_run: bool,
}

pub struct Column {
    pub id: &'static str,
    pub header: &'static str,
}

pub struct Row {
    pub id: &'static str,
    pub cells: &'static [Cell],
}

/// What a table's cell shows.
pub enum Cell {
    /// Fixed text: a row's name, a peer's name, `—` where nothing is measured.
    Text(&'static str),
    /// The run's figure for this cell.
    Value,
    /// The run's figure after a label (`label: figure`), e.g. the peer it is of.
    Labelled(&'static str),
}

/// What one run measured, and where and how it ran.
pub struct Run {
    /// No `LK_BENCH_ONLY`: every section a whole run has.
    pub whole: bool,
    pub command: String,
    pub machine: String,
    /// UTC, YYYY-MM-DD.
    pub date: String,
    /// Every cell the run reported; `None` when its measurement ran but measured
    /// nothing (a peer that is not installed). Such a cell reads `—`.
    pub cells: BTreeMap<Key, Option<String>>,
}

/// What a run does to a table of the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    Written,
    Kept,
}

impl Table {
    /// Whether `run` reported a cell in every row of this table.
    fn measured_by(&self, run: &Run) -> bool {
        self.rows.iter().all(|row| {
            run.cells
                .keys()
                .any(|k| k.table == self.id && k.row == row.id)
        })
    }

    pub fn fate(&self, run: &Run) -> Fate {
        if self.measured_by(run) || (run.whole && self.in_whole_run) {
            Fate::Written
        } else {
            Fate::Kept
        }
    }

    /// The cell of `row` under `column`, if the table has them.
    fn cell(&self, row: &str, column: &str) -> Option<&Cell> {
        let at = self.columns.iter().position(|c| c.id == column)?;
        self.rows.iter().find(|r| r.id == row)?.cells.get(at)
    }
}

/// Whether `key` names a cell of the page that shows a run's figure.
pub fn has_cell(key: Key) -> bool {
    TABLES.iter().filter(|t| t.id == key.table).any(|t| {
        matches!(
            t.cell(key.row, key.column),
            Some(Cell::Value | Cell::Labelled(_))
        )
    })
}

/// The page after `run`: the preamble, then each table, written from the run or kept
/// as `existing_page` has it (a kept table the page lacks is written with `—` in every
/// figure and no run). Sections of `existing_page` under headings no table has are
/// dropped.
pub fn render(existing_page: &str, run: &Run) -> String {
    let old = sections(existing_page);
    let mut page = String::from(PREAMBLE);
    for table in TABLES {
        page.push('\n');
        match (table.fate(run), old.get(table.heading)) {
            (Fate::Written, _) => page.push_str(&table_text(table, &stamp(run), &run.cells)),
            (Fate::Kept, Some(kept)) => page.push_str(kept),
            (Fate::Kept, None) => page.push_str(&table_text(
                table,
                "Command: — · Machine: — · Date: —",
                &BTreeMap::new(),
            )),
        }
    }
    page
}

/// The line under a written table's heading.
fn stamp(run: &Run) -> String {
    format!(
        "Command: `{}` · Machine: {} · Date: {}",
        run.command, run.machine, run.date
    )
}

/// The sections of `page` by heading (`## ` lines outside code blocks): each from its
/// heading to the next one, as the page has it, trailing blank lines trimmed to one
/// line end.
pub fn sections(page: &str) -> HashMap<&str, String> {
    let mut found = HashMap::new();
    let mut current: Option<(&str, String)> = None;
    let mut in_code = false;
    for line in page.split_inclusive('\n') {
        in_code ^= line.starts_with("```");
        let heading = (!in_code)
            .then(|| line.strip_prefix("## "))
            .flatten()
            .map(str::trim_end);
        if let Some(heading) = heading {
            finish(&mut found, current.take());
            current = Some((heading, String::new()));
        }
        if let Some((_, text)) = current.as_mut() {
            text.push_str(line);
        }
    }
    finish(&mut found, current);
    found
}

fn finish<'a>(found: &mut HashMap<&'a str, String>, section: Option<(&'a str, String)>) {
    if let Some((heading, text)) = section {
        found.insert(heading, format!("{}\n", text.trim_end()));
    }
}

/// A table's section: heading, `stamp`, the table with `cells`, the paragraph.
fn table_text(table: &Table, stamp: &str, cells: &BTreeMap<Key, Option<String>>) -> String {
    let mut text = format!("## {}\n\n{stamp}\n\n", table.heading);
    text.push_str(&table_line(
        table.columns.iter().map(|c| c.header.to_owned()),
    ));
    text.push_str(&format!("|{}\n", "---|".repeat(table.columns.len())));
    for row in table.rows {
        let shown = row.cells.iter().zip(table.columns).map(|(cell, column)| {
            let value = cells.get(&Key::new(table.id, row.id, column.id));
            cell_text(cell, value.and_then(Option::as_deref))
        });
        text.push_str(&table_line(shown));
    }
    if !table.paragraph.is_empty() {
        text.push('\n');
        text.push_str(table.paragraph);
        text.push('\n');
    }
    text
}

fn table_line(cells: impl Iterator<Item = String>) -> String {
    format!("| {} |\n", cells.collect::<Vec<_>>().join(" | "))
}

/// What `cell` shows given the run's `value` for it.
fn cell_text(cell: &Cell, value: Option<&str>) -> String {
    let value = value.map(|v| v.replace('|', "\\|"));
    match (cell, value) {
        (Cell::Text(text), _) => (*text).to_owned(),
        (Cell::Value, Some(v)) => v,
        (Cell::Labelled(label), Some(v)) => format!("{label}: {v}"),
        (Cell::Value | Cell::Labelled(_), None) => "—".to_owned(),
    }
}

/// The command a run was started with: `make bench` for a whole run, `cargo bench
/// --bench handover` for some sections, `cargo test --bench handover` for a debug
/// build; after the `LK_BENCH_*` settings it was given, in order.
pub fn command(settings: &[(&str, String)], debug: bool) -> String {
    let whole = !settings.iter().any(|(name, _)| *name == "LK_BENCH_ONLY");
    let tool = match (debug, whole) {
        (true, _) => "cargo test --bench handover",
        (false, true) => "make bench",
        (false, false) => "cargo bench --bench handover",
    };
    let given: String = settings.iter().map(|(n, v)| format!("{n}={v} ")).collect();
    given + tool
}

/// The machine a run measured on: cores, the 1-minute load average (/proc/loadavg) at
/// its start and end, the OS's PRETTY_NAME (/etc/os-release).
pub fn machine(cores: usize, load: (&str, &str), os_release: &str) -> String {
    let os = os_release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim().trim_matches('"'))
        .unwrap_or("unknown OS");
    let first = |l: &str| l.split_whitespace().next().unwrap_or("?").to_owned();
    format!(
        "{cores} cores (load {} at the start, {} at the end), {os}",
        first(load.0),
        first(load.1)
    )
}

/// YYYY-MM-DD (UTC) of `unix_seconds`.
pub fn utc_date(unix_seconds: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix_seconds);
    let mut stamp = humantime::format_rfc3339_seconds(at).to_string();
    stamp.truncate("YYYY-MM-DD".len());
    stamp
}
