//! `leasekeeper switchover --to ID [--url URL] [--cooldown D] [--timeout D]`: asks the
//! leading sidecar (`POST /release?to=ID`, loopback only, so run it in the leader's
//! Pod: `kubectl exec POD -c leasekeeper -- leasekeeper switchover --to ID`) to hand
//! the lease over to candidate ID, then asks the same sidecar (`GET /leader`) until
//! it sees ID lead. Its exit code tells how that went ([`super::exit`]).

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use serde_json::Value;
use tokio::time::Instant;

use super::status::{ask, exchange, leader_uri, parse_duration, sidecar_uri, AskError};
use crate::settings::fmt_d;

pub use super::exit::switchover::{NOT_LEADER, NOT_TAKEN, REFUSED, SWITCHED, UNREACHABLE, USAGE};

#[derive(Debug, Parser)]
#[command(
    name = "leasekeeper switchover",
    about = "Hand the lease over to a named candidate and wait until it leads",
    after_help = "Run it beside the leader's sidecar: POST /release?to=ID answers loopback only.\nThe exit code tells how it went: leasekeeper man switchover lists them.",
    max_term_width = 100
)]
pub struct SwitchoverCli {
    /// The identity of the candidate that is to lead next (required).
    #[arg(long)]
    pub to: Option<String>,
    /// The leading sidecar's listener (http://; it needs --enable-release-endpoint).
    #[arg(
        long,
        env = "LEASEKEEPER_STATUS_URL",
        default_value = "http://localhost:4040"
    )]
    pub url: String,
    /// How long the old leader stays out afterwards [default: one renew interval].
    #[arg(long, value_parser = parse_duration)]
    pub cooldown: Option<Duration>,
    /// How long to wait in all, for the release (after a drain) and to see ID lead.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// How one switchover ended: the exit code and the line to print.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    pub code: u8,
    pub message: String,
}

fn outcome(code: u8, message: String) -> Outcome {
    Outcome { code, message }
}

/// What the sidecar's answer to `POST /release?to=ID` means; `None` when it released.
pub fn refusal(to: &str, status: u16, body: &Value) -> Option<Outcome> {
    let field = |k: &str| body.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    match status {
        200 => None,
        409 if field("error") == "not leader" => {
            let leader = match field("leader") {
                l if l.is_empty() => "nobody known right now".to_owned(),
                l => format!("{l}: run the switchover in its Pod"),
            };
            Some(outcome(
                NOT_LEADER,
                format!("this sidecar does not lead; the leader is {leader}"),
            ))
        }
        409 | 422 | 503 => {
            let live = body
                .get("candidates")
                .and_then(Value::as_array)
                .map(|l| {
                    let names: Vec<&str> = l.iter().filter_map(Value::as_str).collect();
                    format!(" (live candidates: {})", names.join(", "))
                })
                .unwrap_or_default();
            Some(outcome(
                REFUSED,
                format!("switchover to {to} refused: {}{live}", field("error")),
            ))
        }
        403 => Some(outcome(USAGE, field("error"))),
        other => Some(outcome(
            UNREACHABLE,
            format!("the sidecar answered {other}: {body}"),
        )),
    }
}

/// Asks for the release, then watches `/leader` until `to` leads or time runs out.
pub async fn switchover(cli: &SwitchoverCli, to: &str) -> Result<Outcome, AskError> {
    let start = Instant::now();
    let deadline = start + cli.timeout;
    let mut query = form_urlencoded::Serializer::new(String::new());
    query.append_pair("to", to);
    if let Some(c) = cli.cooldown {
        query.append_pair("cooldown", &format!("{}ms", c.as_millis()));
    }
    let uri = sidecar_uri(&cli.url, &format!("release?{}", query.finish()))?;
    let (status, body) = exchange(hyper::Method::POST, &uri, cli.timeout).await?;
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if let Some(refused) = refusal(to, status.as_u16(), &body) {
        return Ok(refused);
    }
    let released = start.elapsed();
    let leader = leader_uri(&cli.url)?;
    let mut seen = None;
    while Instant::now() < deadline {
        let status = ask(&leader, Duration::from_secs(2)).await?;
        let named = status.get("leader").and_then(Value::as_str);
        if named == Some(to) {
            let token = status.get("fencing_token").cloned().unwrap_or(Value::Null);
            return Ok(outcome(
                SWITCHED,
                format!(
                    "{} leads (fencing token {token}); released after {}, confirmed after {}",
                    to,
                    fmt_d(released),
                    fmt_d(start.elapsed())
                ),
            ));
        }
        if let Some(other) = named {
            seen = Some(other.to_owned());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let why = match seen {
        Some(other) => format!("{other} took the lease instead"),
        None => format!("nobody was seen leading within {}", fmt_d(cli.timeout)),
    };
    Ok(outcome(
        NOT_TAKEN,
        format!("released, but {} did not take the lease: {why}", to),
    ))
}

/// The subcommand; `args` is the whole command line (`leasekeeper switchover …`).
pub fn main(args: Vec<OsString>) -> ExitCode {
    let cli: SwitchoverCli = match super::parse_cli("leasekeeper switchover", args, USAGE) {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let to = match cli.to.as_deref() {
        Some(to) if crate::status::identity_is_usable(to) => to,
        Some(to) => {
            eprintln!("error: --to {to:?} names no candidate (1 to 253 characters, no control characters or '|')");
            return ExitCode::from(USAGE);
        }
        None => {
            eprintln!("error: --to is required: the identity of the candidate to lead next");
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
    match runtime.block_on(switchover(&cli, to)) {
        Ok(Outcome {
            code: SWITCHED,
            message,
        }) => {
            println!("{message}");
            ExitCode::SUCCESS
        }
        Ok(Outcome { code, message }) => {
            eprintln!("error: {message}");
            ExitCode::from(code)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(match e {
                AskError::Url(..) => USAGE,
                _ => UNREACHABLE,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn refusals() {
        assert_eq!(refusal("b", 200, &json!({"released": true})), None);
        let not = refusal("b", 409, &json!({"error": "not leader", "leader": "a"})).unwrap();
        assert_eq!(not.code, NOT_LEADER);
        assert!(not.message.contains("the leader is a"), "{}", not.message);
        let nobody = refusal("b", 409, &json!({"error": "not leader", "leader": null})).unwrap();
        assert!(
            nobody.message.contains("nobody known"),
            "{}",
            nobody.message
        );
        let dead = refusal(
            "z",
            422,
            &json!({"error": "z is not a live candidate", "candidates": ["a", "b"]}),
        )
        .unwrap();
        assert_eq!(dead.code, REFUSED);
        assert!(
            dead.message.ends_with("(live candidates: a, b)"),
            "{}",
            dead.message
        );
        let own = refusal(
            "a",
            409,
            &json!({"error": "the named candidate is this leader itself"}),
        );
        assert_eq!(own.unwrap().code, REFUSED);
        assert_eq!(
            refusal("b", 403, &json!({"error": "off"})).unwrap().code,
            USAGE
        );
        assert_eq!(refusal("b", 500, &json!(null)).unwrap().code, UNREACHABLE);
    }
}
