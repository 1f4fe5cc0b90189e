//! A minimal HTTP/1.1 client for probing sidecars, with short timeouts (a SIGSTOPped
//! process accepts connections and never answers). A GET goes over a kept-alive
//! connection per sidecar and thread (a fresh connection costs the sidecar half again
//! as much CPU as a request on an open one, and the suite polls thousands of times a
//! second); every other request has a connection of its own.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_millis(300);

fn request(port: u16, method: &str, path: &str) -> Option<(u16, String)> {
    request_within(port, method, path, TIMEOUT)
}

fn request_within(port: u16, method: &str, path: &str, limit: Duration) -> Option<(u16, String)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    request_to(addr, method, path, limit)
}

fn request_to(
    addr: SocketAddr,
    method: &str,
    path: &str,
    limit: Duration,
) -> Option<(u16, String)> {
    let mut stream = connect(addr, limit).ok()?;
    let req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    stream.write_all(req.as_bytes()).ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw);
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((code, body))
}

/// A connection whose connect, reads and writes each give up after `limit`.
pub fn connect(addr: SocketAddr, limit: Duration) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, limit)?;
    stream.set_read_timeout(Some(limit))?;
    stream.set_write_timeout(Some(limit))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

thread_local! {
    /// The open connection to each port this thread has asked a GET of.
    static KEPT: RefCell<HashMap<u16, KeepAlive>> = RefCell::new(HashMap::new());
}

/// A GET over this thread's kept-alive connection to `port`; a connection that fails
/// (closed by the sidecar as idle, shed, or its process gone) is dropped and the GET
/// asked once more on a new one. One that times out is dropped too: its late answer
/// must not be read as the next one's.
pub fn get(port: u16, path: &str) -> Option<(u16, String)> {
    if let Some(mut kept) = KEPT.with(|k| k.borrow_mut().remove(&port)) {
        if let Some(answer) = kept.ask(path) {
            KEPT.with(|k| k.borrow_mut().insert(port, kept));
            return Some(answer);
        }
    }
    let mut fresh = KeepAlive::open_within(port, TIMEOUT)?;
    let answer = fresh.ask(path)?;
    KEPT.with(|k| k.borrow_mut().insert(port, fresh));
    Some(answer)
}

/// A GET to another address than loopback (a Pod's IP).
pub fn get_from(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    request_to(addr, "GET", path, TIMEOUT)
}

pub fn post(port: u16, path: &str) -> Option<(u16, String)> {
    request(port, "POST", path)
}

/// A POST whose answer may take up to `limit` (a release that waits for a drain).
pub fn post_within(port: u16, path: &str, limit: Duration) -> Option<(u16, String)> {
    request_within(port, "POST", path, limit)
}

/// Opens `GET /watch` and returns a reader of its `data:` lines.
pub fn watch(port: u16) -> Option<impl Iterator<Item = String>> {
    Some(watch_raw(port)?.filter_map(|l| l.strip_prefix("data:").map(|d| d.trim().to_owned())))
}

/// Every line `/watch` sends (headers, events, keep-alive comments), as it comes; ends
/// at the first read that waits more than 5 s.
pub fn watch_raw(port: u16) -> Option<impl Iterator<Item = String>> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(b"GET /watch HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .ok()?;
    let reader = BufReader::new(stream);
    Some(reader.lines().map_while(Result::ok))
}

/// One kept-alive connection, for asking a question that is already waiting in the
/// socket when a paused process wakes up (so it is answered before any timer runs).
pub struct KeepAlive {
    reader: BufReader<TcpStream>,
}

impl KeepAlive {
    pub fn open(port: u16) -> Option<KeepAlive> {
        Self::open_within(port, Duration::from_secs(5))
    }

    fn open_within(port: u16, limit: Duration) -> Option<KeepAlive> {
        let stream = connect(SocketAddr::from(([127, 0, 0, 1], port)), limit).ok()?;
        Some(KeepAlive {
            reader: BufReader::new(stream),
        })
    }

    /// Sends a GET and reads its answer.
    fn ask(&mut self, path: &str) -> Option<(u16, String)> {
        self.send(path)?;
        self.receive()
    }

    /// Writes a request without waiting for the answer.
    pub fn send(&mut self, path: &str) -> Option<()> {
        let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        self.reader.get_mut().write_all(req.as_bytes()).ok()
    }

    /// Reads one answer: status code and body (of a known length or chunked; an
    /// answer of neither kind is read to the connection's end).
    pub fn receive(&mut self) -> Option<(u16, String)> {
        let mut status = String::new();
        self.reader.read_line(&mut status).ok()?;
        let code = status.split_whitespace().nth(1)?.parse().ok()?;
        let (mut length, mut chunked) = (None, false);
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).ok()?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = Some(value.trim().parse().ok()?);
                } else if name.eq_ignore_ascii_case("transfer-encoding") {
                    chunked = value.trim().eq_ignore_ascii_case("chunked");
                }
            }
        }
        let body = match (length, chunked) {
            (Some(n), _) => self.exactly(n)?,
            (None, true) => self.chunks()?,
            (None, false) if code == 204 || code == 304 => Vec::new(),
            (None, false) => {
                let mut rest = Vec::new();
                self.reader.read_to_end(&mut rest).ok()?;
                rest
            }
        };
        Some((code, String::from_utf8_lossy(&body).into_owned()))
    }

    fn exactly(&mut self, n: usize) -> Option<Vec<u8>> {
        let mut body = vec![0u8; n];
        self.reader.read_exact(&mut body).ok()?;
        Some(body)
    }

    /// A chunked body: each chunk's size line, the chunk and its CRLF, up to the empty
    /// chunk and the blank line after it.
    fn chunks(&mut self) -> Option<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let mut size = String::new();
            self.reader.read_line(&mut size).ok()?;
            let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            body.extend(self.exactly(size)?);
            let mut end = String::new();
            self.reader.read_line(&mut end).ok()?;
            if size == 0 {
                return Some(body);
            }
        }
    }
}
