//! Apache Curator (Debian's jars, with a JDK) driven over stdin from a small Java
//! program of `tests/interop/`, for the ZooKeeper interop tests.

use std::io::{BufRead, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

/// Classpath of Debian's Curator (its jars name their dependencies in their manifests).
pub const CURATOR_CP: &str = "/usr/share/java/curator-recipes.jar:/usr/share/java/curator-framework.jar:/usr/share/java/curator-client.jar:/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/guava.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-simple.jar";

/// `tests/interop/<name>.java` compiled against Curator, in a temporary directory.
pub fn compile(name: &str) -> tempfile::TempDir {
    let classes = tempfile::tempdir().expect("dir");
    let source = format!("{}/tests/interop/{name}.java", env!("CARGO_MANIFEST_DIR"));
    let javac = Command::new("javac")
        .args(["-cp", CURATOR_CP, "-d"])
        .arg(classes.path())
        .arg(source)
        .output()
        .expect("javac");
    assert!(
        javac.status.success(),
        "javac: {}",
        String::from_utf8_lossy(&javac.stderr)
    );
    classes
}

/// One such program in a JVM: its stdin, and its stdout's lines as they come.
pub struct Jvm {
    child: Child,
    lines: Receiver<String>,
}

impl Jvm {
    /// Starts `class` (compiled into `classes`) with `args`; returns once it printed
    /// `started` (the lines before it are dropped).
    pub fn start(classes: &std::path::Path, class: &str, args: &[&str]) -> Jvm {
        let cp = format!("{}:{CURATOR_CP}", classes.display());
        let mut child = Command::new("java")
            .args(["-cp", &cp, class])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("java");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut jvm = Jvm { child, lines };
        loop {
            match jvm.line(Duration::from_secs(30)) {
                Some(line) if line == "started" => return jvm,
                Some(_) => continue,
                None => panic!("{class} did not start"),
            }
        }
    }

    /// Writes one command line.
    pub fn send(&mut self, command: &str) {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{command}").expect("write");
        stdin.flush().expect("flush");
    }

    /// The next line printed within `limit`.
    pub fn line(&mut self, limit: Duration) -> Option<String> {
        self.lines.recv_timeout(limit).ok()
    }

    /// Asks it to close, and waits for it.
    pub fn close(&mut self) {
        if let Some(stdin) = self.child.stdin.as_mut() {
            let _ = writeln!(stdin, "close");
        }
        let _ = self.child.wait();
    }
}

impl Drop for Jvm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
