//! What a real kube-apiserver (1.33, `pkg/registry/coordination/lease/strategy.go` and
//! `pkg/apis/coordination/validation`) does to a Lease write before it stores it:
//!
//! - With the `CoordinatedLeaderElection` feature gate **off** (the default up to at
//!   least 1.36) `spec.strategy` and `spec.preferredHolder` are **silently dropped** on
//!   create, and on update unless the stored Lease already carries them (written while
//!   the gate was on).
//! - Validation (gate on or off): `spec.preferredHolder` needs `spec.strategy` (422
//!   Forbidden), `spec.strategy` is `OldestEmulationVersion` or a qualified
//!   `prefix/name`, `leaseDurationSeconds` > 0 and `leaseTransitions` >= 0.

use serde_json::Value;

/// The Lease `new` as the API server stores it over `old` (None: a create), or the
/// message of its 422.
pub(super) fn admit_lease(
    coordinated: bool,
    name: &str,
    old: Option<&Value>,
    new: &mut Value,
) -> Result<(), String> {
    if !coordinated {
        for field in ["strategy", "preferredHolder"] {
            let kept = old.is_some_and(|o| !o["spec"][field].is_null());
            if !kept {
                if let Some(spec) = new["spec"].as_object_mut() {
                    spec.remove(field);
                }
            }
        }
    }
    let problems = problems(&new["spec"]);
    if problems.is_empty() {
        return Ok(());
    }
    Err(format!(
        "Lease.coordination.k8s.io {name:?} is invalid: {}",
        problems.join(", ")
    ))
}

/// The field errors `ValidateLeaseSpec` finds in `spec`.
fn problems(spec: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if spec["leaseDurationSeconds"]
        .as_i64()
        .is_some_and(|d| d <= 0)
    {
        out.push(format!(
            "spec.leaseDurationSeconds: Invalid value: {}: must be greater than 0",
            spec["leaseDurationSeconds"]
        ));
    }
    if spec["leaseTransitions"].as_i64().is_some_and(|t| t < 0) {
        out.push(format!(
            "spec.leaseTransitions: Invalid value: {}: must be greater than or equal to 0",
            spec["leaseTransitions"]
        ));
    }
    let strategy = spec["strategy"].as_str();
    if let Some(s) = strategy {
        let known = s == "OldestEmulationVersion";
        let qualified = s.split('/').count() == 2 && s.split('/').all(|p| !p.is_empty());
        if !known && !qualified {
            out.push(format!(
                "spec.strategy: Unsupported value: {s:?}: supported values: \"OldestEmulationVersion\""
            ));
        }
    }
    let preferred = spec["preferredHolder"]
        .as_str()
        .is_some_and(|p| !p.is_empty());
    if preferred && strategy.is_none_or(str::is_empty) {
        out.push(
            "spec.preferredHolder: Forbidden: may only be specified if `strategy` is defined"
                .to_owned(),
        );
    }
    out
}
