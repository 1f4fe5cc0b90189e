//! The file store at the floor, as the `file` backend does it: the holder empties the
//! holder in the record and closes its descriptor (which unlocks the file); the
//! waiting candidate, blocked in `flock` behind the gate, gets the lock, reads the
//! record and writes it back with the next token and its name. Shared and exclusive:
//! the last shared holder (`LOCK_SH`, its token bumped under the counter's lock)
//! writes the record under the counter's lock and closes its descriptor; the exclusive
//! candidate, blocked in `flock` behind the gate, takes as above.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use serde_json::{json, Value};

use super::{between, Round, SETTLE};

/// `rounds` handovers between two threads of this process on a lock file in `dir`.
/// The waiting thread wakes when its blocked `flock` returns.
pub fn handovers(dir: &Path, rounds: usize) -> anyhow::Result<Vec<Round>> {
    let path = dir.join("floor.lock");
    let mut held = take(&path, "floor-a")?;
    let mut took = Vec::new();
    for round in 0..rounds {
        let identity = ["floor-a", "floor-b"][(round + 1) % 2];
        let at = path.clone();
        let waiter = std::thread::spawn(move || {
            let (file, woke) = locked(&at)?;
            write_next(&file, identity)?;
            anyhow::Ok((file, woke, Instant::now()))
        });
        std::thread::sleep(SETTLE);
        let t0 = Instant::now();
        release(held)?;
        let answered = Instant::now();
        let (file, woke, t1) = waiter.join().ok().context("the waiter panicked")??;
        held = file;
        took.push(Round::new(t0, answered, woke, t1));
    }
    Ok(took)
}

/// `<lock file><suffix>`: the gate (`.gate`) and the counter's lock (`.count`).
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn open(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// Blocks for the lock behind the gate, then writes the next token and `identity`.
fn take(path: &Path, identity: &str) -> anyhow::Result<File> {
    let (file, _) = locked(path)?;
    write_next(&file, identity)?;
    Ok(file)
}

/// Blocks for the lock behind the gate: the lock file, locked, and when its `flock`
/// returned.
fn locked(path: &Path) -> anyhow::Result<(File, Instant)> {
    let gate = open(&beside(path, ".gate"))?;
    let file = open(path)?;
    gate.lock()?;
    file.lock()?;
    let woke = Instant::now();
    drop(gate);
    Ok((file, woke))
}

/// Writes the record with the next token and `identity` as the holder.
fn write_next(file: &File, identity: &str) -> anyhow::Result<()> {
    let record = read(file);
    let token = record["token"].as_u64().unwrap_or(0) + 1;
    write(file, &json!({"token": token, "holder": identity}))?;
    Ok(())
}

/// Empties the holder in the record and closes the file, which unlocks it.
fn release(file: File) -> anyhow::Result<()> {
    let mut record = read(&file);
    record["holder"] = json!("");
    write(&file, &record)?;
    drop(file);
    Ok(())
}

fn read(file: &File) -> Value {
    let mut bytes = vec![0u8; 4096];
    let n = file.read_at(&mut bytes, 0).unwrap_or(0);
    let line = bytes[..n].split(|b| *b == b'\n').next().unwrap_or(&[]);
    serde_json::from_slice(line).unwrap_or_else(|_| json!({"token": 0, "holder": ""}))
}

fn write(file: &File, record: &Value) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    line.push(b'\n');
    file.write_all_at(&line, 0)?;
    file.set_len(line.len() as u64)
}

/// `rounds` times in `dir`: a shared holder holds, an exclusive candidate waits
/// (another thread); the shared holder's release → the exclusive take, ms.
pub fn exclusive_after_shared(dir: &Path, rounds: usize) -> anyhow::Result<Vec<f64>> {
    let path = dir.join("floor-modes.lock");
    let mut took = Vec::new();
    for _ in 0..rounds {
        let reader = take_shared(&path)?;
        let at = path.clone();
        let writer = std::thread::spawn(move || {
            let file = take(&at, "floor-writer")?;
            anyhow::Ok((file, Instant::now()))
        });
        std::thread::sleep(SETTLE);
        let t0 = Instant::now();
        release_shared(&path, reader)?;
        let (file, t1) = writer.join().ok().context("the writer panicked")??;
        took.push(between(t0, t1));
        release(file)?;
    }
    Ok(took)
}

/// The shared lock past the gate, the token bumped under the counter's lock.
fn take_shared(path: &Path) -> anyhow::Result<File> {
    let gate = open(&beside(path, ".gate"))?;
    let file = open(path)?;
    gate.lock_shared()?;
    file.lock_shared()?;
    drop(gate);
    let counter = open(&beside(path, ".count"))?;
    counter.lock()?;
    let record = read(&file);
    let token = record["token"].as_u64().unwrap_or(0) + 1;
    write(&file, &json!({"token": token, "holder": "floor-reader"}))?;
    drop(counter);
    Ok(file)
}

/// The shared holder's release: the record written under the counter's lock, then the
/// descriptor closed.
fn release_shared(path: &Path, file: File) -> anyhow::Result<()> {
    let counter = open(&beside(path, ".count"))?;
    counter.lock()?;
    let mut record = read(&file);
    record["holder"] = json!("");
    write(&file, &record)?;
    drop(file);
    drop(counter);
    Ok(())
}
