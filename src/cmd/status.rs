//! `leasekeeper status [--url URL] [--json] [--samples N] [--timeout D]`: asks a
//! running sidecar (`GET /leader`) who leads and prints it as a short table, for
//! `kubectl exec … -- leasekeeper status` in an image with no shell or curl, and for
//! the chart's `helm test` Pod. Its exit code tells the answer ([`super::exit`]).

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use http_body_util::BodyExt;
use serde_json::Value;

pub use super::exit::status::{DISAGREE, FOLLOWER, LEADER, UNKNOWN, UNREACHABLE, USAGE};

#[derive(Debug, Parser)]
#[command(
    name = "leasekeeper status",
    about = "Ask a running sidecar who leads (no shell or curl needed)",
    after_help = "The exit code tells the answer: leasekeeper man status lists them.",
    max_term_width = 100
)]
pub struct StatusCli {
    /// The sidecar's HTTP listener (http:// only).
    #[arg(
        long,
        env = "LEASEKEEPER_STATUS_URL",
        default_value = "http://localhost:4040"
    )]
    pub url: String,
    /// Print the sidecar's Status JSON as it came (one line per answer).
    #[arg(long)]
    pub json: bool,
    /// Ask this many times (1 to 100), each over a new connection; all must agree.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub samples: u32,
    /// How long to wait for each answer.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,
}

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err("must be more than zero".to_owned()),
        Err(e) => Err(e.to_string()),
    }
}

/// What went wrong asking one sidecar.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    #[error("--url {0:?}: {1}")]
    Url(String, String),
    #[error("{url}: no answer within {within}", url = .0, within = crate::settings::fmt_d(*.1))]
    Timeout(String, Duration),
    #[error("{0}: {1}")]
    Connect(String, String),
    #[error("{0}: answered {1}")]
    Status(String, hyper::StatusCode),
    #[error("{0}: the answer is not a leasekeeper Status: {1}")]
    NotStatus(String, String),
}

/// `URL/leader` as a URI the plain-HTTP client can use.
pub fn leader_uri(url: &str) -> Result<hyper::Uri, AskError> {
    sidecar_uri(url, "leader")
}

/// `URL/PATH_AND_QUERY` as a URI the plain-HTTP client can use.
pub fn sidecar_uri(url: &str, path_and_query: &str) -> Result<hyper::Uri, AskError> {
    let bad = |why: &str| AskError::Url(url.to_owned(), why.to_owned());
    let uri: hyper::Uri = url.parse().map_err(|e| bad(&format!("{e}")))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(_) => return Err(bad("only http:// is served by the sidecar")),
        None => return Err(bad("needs http://HOST:PORT")),
    }
    let authority = uri.authority().ok_or_else(|| bad("needs a host"))?;
    let base = uri.path().trim_end_matches('/');
    format!("http://{authority}{base}/{path_and_query}")
        .parse()
        .map_err(|e| bad(&format!("{e}")))
}

/// One request with an empty body, over a connection of its own: the answer's
/// status and body.
pub async fn exchange(
    method: hyper::Method,
    uri: &hyper::Uri,
    timeout: Duration,
) -> Result<(hyper::StatusCode, hyper::body::Bytes), AskError> {
    let shown = uri.to_string();
    let client = crate::publish::hooks::http_client();
    let request = hyper::Request::builder()
        .method(method)
        .uri(uri.clone())
        .header("connection", "close")
        .body(http_body_util::Full::new(hyper::body::Bytes::new()))
        .map_err(|e| AskError::Url(shown.clone(), e.to_string()))?;
    tokio::time::timeout(timeout, async {
        let response = client
            .request(request)
            .await
            .map_err(|e| AskError::Connect(shown.clone(), source_chain(&e)))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| AskError::Connect(shown.clone(), e.to_string()))?
            .to_bytes();
        Ok::<_, AskError>((status, body))
    })
    .await
    .map_err(|_| AskError::Timeout(shown.clone(), timeout))?
}

/// One `GET /leader`, over a connection of its own.
pub async fn ask(uri: &hyper::Uri, timeout: Duration) -> Result<Value, AskError> {
    let shown = uri.to_string();
    let (status, body) = exchange(hyper::Method::GET, uri, timeout).await?;
    if !status.is_success() {
        return Err(AskError::Status(shown, status));
    }
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| AskError::NotStatus(shown.clone(), e.to_string()))?;
    if value.get("state").and_then(Value::as_str).is_none() {
        return Err(AskError::NotStatus(shown, "no \"state\" field".to_owned()));
    }
    Ok(value)
}

/// The innermost cause: hyper's own text ("client error (Connect)") says little.
fn source_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        last = c.to_string();
        cause = c.source();
    }
    last
}

/// The exit code one answer stands for.
pub fn code_of(status: &Value) -> u8 {
    match status.get("state").and_then(Value::as_str) {
        Some("leader") if status.get("is_leader") == Some(&Value::Bool(true)) => LEADER,
        Some("follower") => FOLLOWER,
        _ => UNKNOWN,
    }
}

fn text(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "-".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// The short human table.
pub fn table(status: &Value) -> String {
    let lease = match status.get("lease_expires_in_ms").and_then(Value::as_u64) {
        Some(ms) => format!("{:.1} s left", ms as f64 / 1000.0),
        None => "-".to_owned(),
    };
    let rows = [
        ("election", text(status.get("election"))),
        ("leader", text(status.get("leader"))),
        ("leader since", text(status.get("leader_since"))),
        ("fencing token", text(status.get("fencing_token"))),
        (
            "this candidate",
            format!(
                "{} ({})",
                text(status.get("identity")),
                text(status.get("state"))
            ),
        ),
        ("lease", lease),
        ("backend", text(status.get("backend"))),
        ("observed at", text(status.get("observed_at"))),
    ];
    let mut out: String = rows.iter().map(|(k, v)| format!("{k:<15}{v}\n")).collect();
    if text(status.get("mode")) == "shared" {
        out.push_str(&format!("{:<15}shared\n", "mode"));
    }
    if slots_of(status) > 1 {
        out.push_str(&slot_rows(status));
    }
    out
}

fn slots_of(status: &Value) -> u64 {
    status.get("slots").and_then(Value::as_u64).unwrap_or(1)
}

/// An election of several slots: the own slot and every slot's holder as observed.
fn slot_rows(status: &Value) -> String {
    let slots = slots_of(status);
    let mut out = format!("{:<15}{} of {slots}\n", "slot", text(status.get("slot")));
    let holders = status.get("holders").and_then(Value::as_array);
    for h in holders.into_iter().flatten() {
        out.push_str(&format!(
            "{:<15}{} (token {})\n",
            format!("  slot {}", text(h.get("slot"))),
            text(h.get("identity")),
            text(h.get("fencing_token"))
        ));
    }
    out
}

/// Who an answer says leads, and with which token.
fn named_leader(status: &Value) -> (String, String) {
    (
        text(status.get("leader")),
        text(status.get("fencing_token")),
    )
}

/// The verdict over several answers (see the module doc).
pub fn verdict(answers: &[Value]) -> (u8, Option<String>) {
    if answers.iter().any(|a| text(a.get("mode")) == "shared") {
        return shared_verdict(answers);
    }
    let mut leaders: Vec<(String, String)> = Vec::new();
    // With several slots, several leaders are the point: two leaders of one slot are
    // the disagreement (each leader says its own slot; a follower's view is older).
    let per_slot = answers.iter().any(|a| slots_of(a) > 1);
    let mut slots: Vec<(String, (String, String))> = Vec::new();
    for a in answers {
        if code_of(a) == LEADER {
            let named = (text(a.get("identity")), text(a.get("fencing_token")));
            let slot = text(a.get("slot"));
            let other = slots
                .iter()
                .find(|(s, n)| per_slot && *s == slot && *n != named);
            if let Some((_, first)) = other {
                return (
                    DISAGREE,
                    Some(format!(
                        "two answers claim slot {slot}: {} (token {}) and {} (token {})",
                        first.0, first.1, named.0, named.1
                    )),
                );
            }
            slots.push((slot, named.clone()));
            if !leaders.contains(&named) {
                leaders.push(named);
            }
        }
        let named = named_leader(a);
        if !per_slot && named.0 != "-" && !leaders.contains(&named) {
            leaders.push(named);
        }
    }
    if leaders.len() > 1 && !per_slot {
        let list: Vec<String> = leaders
            .iter()
            .map(|(who, token)| format!("{who} (token {token})"))
            .collect();
        return (
            DISAGREE,
            Some(format!(
                "the {} answers disagree about who leads: {}",
                answers.len(),
                list.join(", ")
            )),
        );
    }
    (worst_code(answers), None)
}

/// Every answer must come from a leader: the worst code wins (unknown over follower).
fn worst_code(answers: &[Value]) -> u8 {
    answers
        .iter()
        .map(code_of)
        .max_by_key(|c| match *c {
            LEADER => 0,
            FOLLOWER => 1,
            _ => 2,
        })
        .unwrap_or(UNKNOWN)
}

/// The verdict over the answers of a read-write lock (`--mode`): shared holders lead
/// at once by right; an exclusive holder beside another holder is the disagreement.
fn shared_verdict(answers: &[Value]) -> (u8, Option<String>) {
    let leading: Vec<&Value> = answers.iter().filter(|a| code_of(a) == LEADER).collect();
    let who = |a: &Value| (text(a.get("identity")), text(a.get("fencing_token")));
    for x in leading.iter().filter(|a| text(a.get("mode")) != "shared") {
        if let Some(other) = leading.iter().find(|b| who(b) != who(x)) {
            let ((xi, xt), (oi, ot)) = (who(x), who(other));
            return (
                DISAGREE,
                Some(format!(
                    "an exclusive holder beside another: {xi} (token {xt}) and {oi} (token {ot})"
                )),
            );
        }
    }
    (worst_code(answers), None)
}

/// The subcommand; `args` is the whole command line (`leasekeeper status …`).
pub fn main(args: Vec<OsString>) -> ExitCode {
    let cli: StatusCli = match super::parse_cli("leasekeeper status", args, USAGE) {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let uri = match leader_uri(&cli.url) {
        Ok(uri) => uri,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(USAGE);
        }
    };
    let runtime = match super::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(UNREACHABLE);
        }
    };
    let mut answers = Vec::new();
    for _ in 0..cli.samples {
        match runtime.block_on(ask(&uri, cli.timeout)) {
            Ok(answer) => {
                if cli.json {
                    println!("{answer}");
                }
                answers.push(answer);
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(UNREACHABLE);
            }
        }
    }
    let (code, why) = verdict(&answers);
    if !cli.json {
        if let Some(last) = answers.last() {
            print!("{}", table(last));
        }
        if cli.samples > 1 && why.is_none() {
            println!(
                "{:<15}{} answers, one leader: {}",
                "samples",
                answers.len(),
                answers
                    .last()
                    .map(|a| text(a.get("leader")))
                    .unwrap_or_default()
            );
        }
    }
    if let Some(why) = why {
        eprintln!("error: {why}");
    }
    ExitCode::from(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(identity: &str, state: &str, leader: &str, token: u64) -> Value {
        json!({"identity": identity, "state": state, "is_leader": state == "leader",
               "leader": leader, "fencing_token": token})
    }

    #[test]
    fn urls() {
        assert_eq!(
            leader_uri("http://localhost:4040").unwrap().to_string(),
            "http://localhost:4040/leader"
        );
        assert_eq!(
            leader_uri("http://x.ns.svc:4040/").unwrap().to_string(),
            "http://x.ns.svc:4040/leader"
        );
        assert!(leader_uri("https://x:4040").is_err());
        assert!(leader_uri("localhost:4040").is_err());
    }

    #[test]
    fn verdicts() {
        let a = answer("a", "leader", "a", 7);
        let b = answer("b", "follower", "a", 7);
        assert_eq!(verdict(std::slice::from_ref(&a)).0, LEADER);
        assert_eq!(verdict(std::slice::from_ref(&b)).0, FOLLOWER);
        assert_eq!(verdict(&[a.clone(), a.clone()]).0, LEADER);
        // Same leader seen by a follower behind the same Service: not two leaders,
        // but not every answer came from a leader.
        assert_eq!(verdict(&[a.clone(), b]).0, FOLLOWER);
        assert_eq!(
            verdict(&[a.clone(), answer("c", "leader", "c", 8)]).0,
            DISAGREE
        );
        assert_eq!(verdict(&[a, answer("a", "leader", "a", 8)]).0, DISAGREE);
        let unknown = json!({"identity": "d", "state": "unknown", "is_leader": false,
                             "leader": null, "fencing_token": null});
        assert_eq!(verdict(&[unknown]).0, UNKNOWN);
    }

    #[test]
    fn shared_holders_agree_and_an_exclusive_one_beside_them_does_not() {
        let held = |id: &str, mode: &str, token: u64| {
            let mut a = answer(id, "leader", id, token);
            a["mode"] = json!(mode);
            a
        };
        let (r1, r2) = (held("r1", "shared", 3), held("r2", "shared", 4));
        assert_eq!(verdict(&[r1.clone(), r2.clone()]).0, LEADER);
        assert_eq!(
            verdict(&[r1.clone(), held("w", "exclusive", 5)]).0,
            DISAGREE
        );
        assert_eq!(verdict(&[held("w", "exclusive", 5), r2]).0, DISAGREE);
        let mut f = answer("f", "follower", "r1", 3);
        f["mode"] = json!("shared");
        assert_eq!(verdict(&[r1, f]).0, FOLLOWER);
    }
}
