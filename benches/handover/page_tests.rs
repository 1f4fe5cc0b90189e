//! `page::render` on pages and runs made up here; the model against the committed
//! page. Compiled into tests/suite/cli.rs next to `page` (`make test` runs them there).

use std::collections::BTreeMap;

use super::page::*;

fn run(whole: bool, command: &str, cells: &[(Key, Option<&str>)]) -> Run {
    Run {
        whole,
        command: command.to_owned(),
        machine: "2 cores (load 0.10 at the start, 0.20 at the end), Test OS".to_owned(),
        date: "2030-01-02".to_owned(),
        cells: cells
            .iter()
            .map(|(k, v)| (*k, v.map(str::to_owned)))
            .collect::<BTreeMap<_, _>>(),
    }
}

fn table(id: &str) -> &'static Table {
    TABLES.iter().find(|t| t.id == id).expect("a table")
}

/// Every cell of `id` that shows a figure, set to `value`.
fn every_cell(id: &'static str, value: &'static str) -> Vec<(Key, Option<&'static str>)> {
    let t = table(id);
    t.rows
        .iter()
        .flat_map(|r| {
            r.cells
                .iter()
                .zip(t.columns)
                .map(move |(c, col)| (r, c, col))
        })
        .filter(|(_, c, _)| !matches!(c, Cell::Text(_)))
        .map(|(r, _, col)| (Key::new(id, r.id, col.id), Some(value)))
        .collect()
}

/// The section of `page` under `heading`, as `sections` cuts it.
fn section(page: &str, heading: &str) -> String {
    sections(page).get(heading).expect("the section").clone()
}

/// The figures of `old_page`.
const OLD: &str = "old-figure";

/// A page with every table written by one whole run, every figure `OLD`, and the
/// 100 candidates' table too.
fn old_page() -> String {
    let mut cells = Vec::new();
    for t in TABLES {
        cells.extend(every_cell(t.id, OLD));
    }
    render("", &run(true, "make bench", &cells))
}

#[test]
fn a_partial_run_writes_the_tables_it_measured_whole_and_keeps_the_rest() {
    let old = old_page();
    let exec = run(
        false,
        "LK_BENCH_ONLY=exec cargo bench --bench handover",
        &every_cell("exec", "1.00 / 2.00 / 3.00"),
    );
    let new = render(&old, &exec);
    for t in TABLES {
        let (before, after) = (section(&old, t.heading), section(&new, t.heading));
        if t.id == "exec" {
            assert!(after.contains("Command: `LK_BENCH_ONLY=exec cargo bench --bench handover`"));
            assert!(after.contains("`leasekeeper run`: 1.00 / 2.00 / 3.00"));
            assert!(!after.contains(OLD), "{after}");
        } else {
            assert_eq!(before, after, "{} was not kept", t.id);
        }
    }
    assert_eq!(table("exec").fate(&exec), Fate::Written);
    assert_eq!(table("graceful").fate(&exec), Fate::Kept);
}

#[test]
fn a_table_some_of_whose_rows_a_partial_run_left_out_is_kept() {
    let old = old_page();
    // The file section measures a row of the handover tables and of the footprint's.
    let file = run(
        false,
        "LK_BENCH_ONLY=file cargo bench --bench handover",
        &[
            (Key::new("graceful", "file", "leasekeeper"), Some("new")),
            (Key::new("failover", "file", "crash"), Some("new")),
            (Key::new("footprint", "file_leader", "value"), Some("new")),
            (Key::new("footprint", "binary", "value"), Some("new")),
        ],
    );
    assert_eq!(render(&old, &file), old);
    assert!(TABLES.iter().all(|t| t.fate(&file) == Fate::Kept));
}

#[test]
fn a_kept_section_stays_byte_for_byte_as_the_page_has_it() {
    let hand_written =
        "## Exec mode\n\nCommand: `by hand` · Machine: a  laptop · Date: 1999-12-31\n\n\
                        | a |b|\n|--|--|\n| x |  y |\n\nProse, **as written**.\n\n\n";
    let existing = format!("{PREAMBLE}\n{hand_written}");
    let page = render(&existing, &run(false, "c", &every_cell("modes", "m")));
    assert_eq!(
        section(&page, "Exec mode"),
        hand_written.trim_end().to_owned() + "\n"
    );
    assert!(page.contains(&format!("\n{}", hand_written.trim_end())));
}

#[test]
fn a_whole_run_writes_every_table_but_those_only_asked_for() {
    let old = old_page();
    let whole = run(true, "make bench", &every_cell("modes", "m"));
    let new = render(&old, &whole);
    for t in TABLES {
        let after = section(&new, t.heading);
        assert_eq!(
            after.contains("Command: `make bench`") && !after.contains(OLD),
            t.in_whole_run,
            "{}: {after}",
            t.id
        );
    }
    // What the run did not measure reads `—`.
    let graceful = section(&new, table("graceful").heading);
    assert!(
        graceful.contains("| Redis | — | — | — | redis-py `Lock` | — |"),
        "{graceful}"
    );
    assert!(section(&new, "100 candidates on one election")
        .contains("| Redis | old-figure | old-figure |"));
}

#[test]
fn a_cell_that_measured_nothing_reads_a_dash_and_counts_as_measured() {
    let mut cells = every_cell("exec", "1.0");
    cells[1].1 = None;
    let r = run(false, "c", &cells);
    let page = render("", &r);
    let exec = section(&page, "Exec mode");
    assert!(
        exec.contains(
            "| SIGTERM → the next command started, on etcd | `leasekeeper run`: 1.0 | — |"
        ),
        "{exec}"
    );
    assert_eq!(table("exec").fate(&r), Fate::Written);
}

#[test]
fn a_table_the_page_lacks_is_written_empty_when_not_measured() {
    let page = render(
        "# Benchmarks\n",
        &run(false, "c", &every_cell("exec", "1.0")),
    );
    assert!(page.starts_with(PREAMBLE));
    let modes = section(&page, table("modes").heading);
    assert!(modes.starts_with(
        "## Shared and exclusive (`--mode`)\n\nCommand: — · Machine: — · Date: —\n\n"
    ));
    assert!(modes.contains("| PostgreSQL | — | — | — |"), "{modes}");
    assert!(
        modes.ends_with("so their floor is the election's.\n"),
        "{modes}"
    );
}

#[test]
fn a_written_table_has_its_stamp_header_rows_and_paragraph() {
    let r = run(false, "cmd", &every_cell("slots", "4.2"));
    let slots = section(&render("", &r), table("slots").heading);
    let expected_start = "## Slots (`--holders 2`)\n\n\
        Command: `cmd` · Machine: 2 cores (load 0.10 at the start, 0.20 at the end), Test OS · Date: 2030-01-02\n\n\
        | store | a slot handed over (SIGTERM → that slot's next claim) | floor (same server, in-process) | leasekeeper / floor |\n\
        |---|---|---|---|\n\
        | etcd | 4.2 | 4.2 | 4.2 |\n| ZooKeeper | 4.2 | 4.2 | 4.2 |\n| Redis | 4.2 | 4.2 | 4.2 |\n\
        | Redis, ttl 15 s: a candidate waiting on two slots, commands/s | 4.2 | — | — |\n\nFour candidates";
    assert!(slots.starts_with(expected_start), "{slots}");
}

#[test]
fn headings_inside_code_blocks_are_not_sections() {
    let page = "# T\n\n```sh\n## not a heading\n```\n\n## Exec mode\n\nkept\n";
    let found = sections(page);
    assert_eq!(found.len(), 1);
    assert_eq!(found["Exec mode"], "## Exec mode\n\nkept\n");
}

#[test]
fn only_cells_that_show_a_figure_are_cells_of_the_page() {
    assert!(has_cell(Key::new("graceful", "redis", "peer")));
    assert!(has_cell(Key::new("exec", "etcd", "peer")));
    assert!(!has_cell(Key::new("graceful", "redis", "peer_name")));
    assert!(!has_cell(Key::new("graceful", "file", "peer")));
    assert!(!has_cell(Key::new("graceful", "nowhere", "leasekeeper")));
    assert!(!has_cell(Key::new("nowhere", "redis", "leasekeeper")));
}

#[test]
fn every_row_has_a_cell_per_column_and_ids_are_unique() {
    let mut headings: Vec<&str> = TABLES.iter().map(|t| t.heading).collect();
    headings.sort_unstable();
    headings.dedup();
    assert_eq!(headings.len(), TABLES.len());
    for t in TABLES {
        assert!(
            TABLES.iter().filter(|o| o.id == t.id).count() == 1,
            "{}",
            t.id
        );
        for r in t.rows {
            assert_eq!(r.cells.len(), t.columns.len(), "{} / {}", t.id, r.id);
            assert_eq!(t.rows.iter().filter(|o| o.id == r.id).count(), 1);
        }
        for c in t.columns {
            assert_eq!(t.columns.iter().filter(|o| o.id == c.id).count(), 1);
        }
    }
}

/// A run of some sections rewrites the preamble from `PREAMBLE` and finds the kept
/// tables by heading: the committed page must have both as the model does.
#[test]
fn the_committed_page_has_the_model_preamble_and_headings() {
    let page = include_str!("../../docs/benchmarks.md");
    assert!(
        page.starts_with(PREAMBLE),
        "docs/benchmarks.md's preamble is not tables.rs's PREAMBLE"
    );
    let found = sections(page);
    for t in TABLES {
        assert!(
            found.contains_key(t.heading),
            "docs/benchmarks.md lacks ## {}",
            t.heading
        );
    }
}

/// The committed page is as the writer leaves it: a run that measured nothing keeps
/// every section byte for byte and writes none that the page lacks.
#[test]
fn the_committed_page_is_what_a_run_that_measured_nothing_keeps() {
    let page = include_str!("../../docs/benchmarks.md");
    assert_eq!(render(page, &run(false, "c", &[])), page);
}

#[test]
fn the_floor_steps_follow_leasekeepers_steps_row_for_row_but_the_machine_and_a_close() {
    let page = render("", &run(false, "cmd", &every_cell("floor_steps", "0.42")));
    let at = |id| {
        let heading = format!("\n## {}\n", table(id).heading);
        page.find(&heading).expect("the heading")
    };
    assert!(at("steps") < at("floor_steps") && at("floor_steps") < at("failover"));
    let floor = section(&page, table("floor_steps").heading);
    assert!(
        floor.contains(
            "| store | release sent → answered | release sent → the waiting client woke \
             | woke → its take answered |\n|---|---|---|---|\n| file | 0.42 | 0.42 | 0.42 |\n"
        ),
        "{floor}"
    );
    let rows = |id| -> Vec<&str> { table(id).rows.iter().map(|r| r.id).collect() };
    let mut leasekeepers = rows("steps");
    leasekeepers.retain(|r| *r != "machine");
    let mut floors = rows("floor_steps");
    let close = floors.iter().position(|r| *r == "zookeeper_close");
    assert_eq!(
        close.and_then(|i| floors.get(i - 1)),
        Some(&"zookeeper"),
        "ZooKeeper's close row follows ZooKeeper's"
    );
    floors.retain(|r| *r != "zookeeper_close");
    assert_eq!(floors, leasekeepers);
    assert_eq!(
        table("floor_steps").fate(&run(false, "c", &every_cell("floor_steps", "1"))),
        Fate::Written
    );
}

#[test]
fn the_command_names_the_settings_and_the_build() {
    assert_eq!(command(&[], false), "make bench");
    assert_eq!(
        command(&[("LK_BENCH_ROUNDS", "10".to_owned())], false),
        "LK_BENCH_ROUNDS=10 make bench"
    );
    let some = [
        ("LK_BENCH_ONLY", "file,steady".to_owned()),
        ("LK_BENCH_ROUNDS", "3".to_owned()),
    ];
    assert_eq!(
        command(&some, false),
        "LK_BENCH_ONLY=file,steady LK_BENCH_ROUNDS=3 cargo bench --bench handover"
    );
    assert_eq!(
        command(&some, true),
        "LK_BENCH_ONLY=file,steady LK_BENCH_ROUNDS=3 cargo test --bench handover"
    );
}

#[test]
fn the_machine_line_has_cores_load_and_os() {
    let os =
        "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\n";
    assert_eq!(
        machine(
            2,
            ("4.20 1.00 0.50 3/150 99", "0.48 0.90 0.60 1/150 120\n"),
            os
        ),
        "2 cores (load 4.20 at the start, 0.48 at the end), Debian GNU/Linux 12 (bookworm)"
    );
    assert_eq!(
        machine(8, ("", ""), ""),
        "8 cores (load ? at the start, ? at the end), unknown OS"
    );
}

#[test]
fn dates_are_utc_days() {
    assert_eq!(utc_date(0), "1970-01-01");
    assert_eq!(utc_date(951_782_400), "2000-02-29");
    assert_eq!(utc_date(1_735_689_599), "2024-12-31");
    assert_eq!(utc_date(1_735_689_600), "2025-01-01");
    assert_eq!(utc_date(4_102_444_800), "2100-01-01");
}
