//! The bottom floor of configuration: the error every bad setting becomes, and the
//! parsers every owner of a setting shares (durations, booleans, URLs, secrets, PEM
//! files, redaction).
//!
//! Each backend and publisher declares its own flags (a clap `Args`) and turns them
//! into its typed settings with these functions, so that every message names the setting
//! and fits on one line; `config` only merges the flags, the environment and the YAML
//! file. Nothing here imports from the rest of the crate.
//!
//! The same parsing serves the injector (`leasekeeper inject`), which checks a Pod's
//! settings before the Pod exists: [`in_another_container`] runs a check as the
//! sidecar in that Pod would run it, with its files in the other container.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

thread_local! {
    /// While [`in_another_container`] runs a check on this thread: that container's
    /// environment.
    static ELSEWHERE: RefCell<Option<BTreeMap<String, String>>> = const { RefCell::new(None) };
}

/// Runs `check` as a sidecar in a Pod checks its settings, from outside that Pod: its
/// environment is `env` ([`env_var`] reads it, not this process's), the files the
/// settings name are in its container, not here, so their paths are taken and their
/// contents are neither read nor judged (the sidecar reads them at its start), and
/// [`in_a_pod`] holds.
pub fn in_another_container<T>(env: BTreeMap<String, String>, check: impl FnOnce() -> T) -> T {
    struct Reset(Option<BTreeMap<String, String>>);
    impl Drop for Reset {
        fn drop(&mut self) {
            let previous = self.0.take();
            ELSEWHERE.with(|e| *e.borrow_mut() = previous);
        }
    }
    let _reset = Reset(ELSEWHERE.with(|e| e.borrow_mut().replace(env)));
    check()
}

/// Whether the files named by the settings are in another container (see
/// [`in_another_container`]): then whoever parses their contents skips that.
pub fn files_elsewhere() -> bool {
    ELSEWHERE.with(|e| e.borrow().is_some())
}

/// An environment variable the settings read beside their flags (`POD_NAME` from the
/// downward API, say): this process's, or the checked container's.
pub fn env_var(name: &str) -> Option<String> {
    let elsewhere = ELSEWHERE.with(|e| e.borrow().as_ref().map(|env| env.get(name).cloned()));
    match elsewhere {
        Some(value) => value,
        None => std::env::var(name).ok(),
    }
}

/// What a file read in another container stands in for: a PEM block with no contents.
const ELSEWHERE_PEM: &[u8] = b"-----BEGIN ELSEWHERE-----\n-----END ELSEWHERE-----\n";

/// What went wrong with the configuration; each message names the setting.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

/// A configuration error with this one-line message.
pub fn bad(msg: impl Into<String>) -> ConfigError {
    ConfigError(msg.into())
}

/// Parses durations like `15s`, `500ms`, `2m`; zero is refused.
pub fn parse_duration(setting: &str, raw: &str) -> Result<Duration, ConfigError> {
    let d = humantime::parse_duration(raw.trim()).map_err(|_| {
        bad(format!(
            "{setting} {raw:?} is not a duration; write it like 15s, 500ms or 2m"
        ))
    })?;
    if d.is_zero() {
        return Err(bad(format!("{setting} {raw} must be longer than zero")));
    }
    Ok(d)
}

/// A duration setting that may be left out.
pub fn duration_or(
    setting: &str,
    raw: Option<&str>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    raw.map_or(Ok(default), |raw| parse_duration(setting, raw))
}

/// A switch: absent is off, a bare flag is on.
pub fn parse_bool(setting: &str, raw: Option<&str>) -> Result<bool, ConfigError> {
    match raw.map(|s| s.trim().to_ascii_lowercase()).as_deref() {
        None | Some("false" | "0" | "no" | "off") => Ok(false),
        Some("true" | "1" | "yes" | "on" | "") => Ok(true),
        Some(other) => Err(bad(format!("{setting} {other:?} is not true or false"))),
    }
}

/// An `http://host[:port]/path` URL (the hooks and the drain speak plain HTTP).
pub fn parse_http_url(setting: &str, raw: &str) -> Result<hyper::Uri, ConfigError> {
    let uri: hyper::Uri = raw.trim().parse().map_err(|_| {
        bad(format!(
            "{setting} {raw:?} is not a URL; write it like http://127.0.0.1:8080/drain"
        ))
    })?;
    if uri.scheme_str() != Some("http") || uri.host().is_none() {
        return Err(bad(format!(
            "{setting} {raw:?} must be an http:// URL with a host, like http://127.0.0.1:8080/drain"
        )));
    }
    Ok(uri)
}

/// A duration as people write it and as every message and log line prints it:
/// rounded to the millisecond (`653ms`, `1s 500ms`, `2m 30s`), to the microsecond
/// below one; the form the flags read back.
pub fn fmt_d(d: Duration) -> String {
    let unit = match d < Duration::from_micros(500) {
        true => 1_000,
        false => 1_000_000,
    };
    let rounded = (d.as_nanos() + unit / 2) / unit * unit;
    let rounded = Duration::from_nanos(u64::try_from(rounded).unwrap_or(u64::MAX));
    humantime::format_duration(rounded).to_string()
}

/// A one-line secret (a password file): trailing newlines dropped, empty refused.
pub fn read_secret_file(setting: &str, path: &Path) -> Result<String, ConfigError> {
    if files_elsewhere() {
        return Ok("elsewhere".to_owned());
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("{setting} {}: cannot read it: {e}", path.display())))?;
    let secret = text.trim_end_matches(['\n', '\r']).to_owned();
    if secret.is_empty() {
        return Err(bad(format!(
            "{setting} {}: the file is empty",
            path.display()
        )));
    }
    Ok(secret)
}

/// A PEM file's bytes (a certificate, a key, a CA bundle).
pub fn read_pem(setting: &str, path: &Path) -> Result<Vec<u8>, ConfigError> {
    if files_elsewhere() {
        return Ok(ELSEWHERE_PEM.to_vec());
    }
    let bytes = std::fs::read(path)
        .map_err(|e| bad(format!("{setting} {}: cannot read it: {e}", path.display())))?;
    if !bytes.windows(10).any(|w| w == b"-----BEGIN") {
        return Err(bad(format!("{setting} {}: not a PEM file", path.display())));
    }
    Ok(bytes)
}

/// A PEM file as text (for client libraries that take strings).
pub fn pem_text(setting: &str, path: &Path) -> Result<String, ConfigError> {
    String::from_utf8(read_pem(setting, path)?)
        .map_err(|_| bad(format!("{setting} {}: not a PEM text file", path.display())))
}

/// An optional PEM file, read with `read` (bytes or text).
pub fn optional_pem<T>(
    setting: &str,
    path: Option<&Path>,
    read: fn(&str, &Path) -> Result<T, ConfigError>,
) -> Result<Option<T>, ConfigError> {
    path.map(|p| read(setting, p)).transpose()
}

/// A client certificate and its key: both or neither. `prefix` names the pair of
/// settings (`--redis` for `--redis-cert-file` and `--redis-key-file`).
pub fn cert_and_key<T>(
    prefix: &str,
    cert: Option<&Path>,
    key: Option<&Path>,
    read: fn(&str, &Path) -> Result<T, ConfigError>,
) -> Result<Option<(T, T)>, ConfigError> {
    let (cert_setting, key_setting) = (format!("{prefix}-cert-file"), format!("{prefix}-key-file"));
    match (cert, key) {
        (Some(c), Some(k)) => Ok(Some((read(&cert_setting, c)?, read(&key_setting, k)?))),
        (None, None) => Ok(None),
        (Some(_), None) => Err(bad(format!("{cert_setting} needs {key_setting} too"))),
        (None, Some(_)) => Err(bad(format!("{key_setting} needs {cert_setting} too"))),
    }
}

/// Drops the password from a URL for logs and messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{}:***{}", &url[..scheme_end + 3], user, &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// The first non-empty line of a longer message (a parser's caret diagram, say).
pub fn first_line(s: &str) -> String {
    s.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_owned()
}

/// Whether this process runs in a Kubernetes Pod (the API server's address is set), or
/// checks the settings of a sidecar that will ([`in_another_container`]).
pub fn in_a_pod() -> bool {
    files_elsewhere() || std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_is_both_or_neither() {
        let p = Path::new("/nonexistent/x.pem");
        assert!(cert_and_key("--x", None, None, read_pem)
            .expect("neither")
            .is_none());
        let e = cert_and_key("--x", Some(p), None, read_pem).expect_err("cert only");
        assert_eq!(e.to_string(), "--x-cert-file needs --x-key-file too");
        let e = cert_and_key("--x", None, Some(p), read_pem).expect_err("key only");
        assert_eq!(e.to_string(), "--x-key-file needs --x-cert-file too");
        let e = cert_and_key("--x", Some(p), Some(p), read_pem).expect_err("unreadable");
        assert!(e
            .to_string()
            .starts_with("--x-cert-file /nonexistent/x.pem: cannot read it"));
    }

    #[test]
    fn durations_print_as_people_write_them() {
        let ms = Duration::from_millis;
        for (d, shown) in [
            (Duration::from_nanos(653_333_333), "653ms"),
            (ms(1500), "1s 500ms"),
            (Duration::from_nanos(1_999_600_000), "2s"),
            (Duration::from_secs(15), "15s"),
            (Duration::from_secs(150), "2m 30s"),
            (Duration::from_micros(400), "400us"),
            (Duration::ZERO, "0s"),
        ] {
            assert_eq!(fmt_d(d), shown, "{d:?}");
        }
    }

    #[test]
    fn in_another_container_files_are_not_read() {
        let p = Path::new("/nonexistent/x.pem");
        assert!(read_pem("--x", p).is_err());
        let env = BTreeMap::from([("POD_NAME".to_owned(), "web-1".to_owned())]);
        let (pem, secret, pod, home) = in_another_container(env, || {
            (
                read_pem("--x", p),
                read_secret_file("--y", p),
                env_var("POD_NAME"),
                env_var("HOME"),
            )
        });
        assert!(pem.is_ok() && secret.is_ok());
        assert_eq!((pod.as_deref(), home), (Some("web-1"), None));
        assert!(in_another_container(BTreeMap::new(), in_a_pod));
        assert!(!files_elsewhere(), "the check's end resets it");
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("redis://u:pw@h:1"), "redis://u:***@h:1");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
    }
}
