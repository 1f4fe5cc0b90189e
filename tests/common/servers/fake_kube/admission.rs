//! Mutating admission webhooks, called the way kube-apiserver calls them (its
//! `admission/plugin/webhook/mutating/dispatcher.go`), on Pod creation only (webhooks
//! see Pods, never a Deployment's Pod template):
//! - the MutatingWebhookConfigurations in order of their names, each one's webhooks in
//!   order; a webhook is called when one of its rules names CREATE of `pods` in the
//!   core group v1 (or `*`), its `namespaceSelector` matches the labels of the Pod's
//!   namespace (which carries `kubernetes.io/metadata.name`) and its `objectSelector`
//!   the Pod's labels (`matchLabels` and `matchExpressions` In, NotIn, Exists,
//!   DoesNotExist);
//! - over HTTPS to `clientConfig.url` with `?timeout=<n>s`, trusting only
//!   `clientConfig.caBundle`, with an AdmissionReview `admission.k8s.io/v1` (uid, kind,
//!   resource, namespace, operation, userInfo, object), within `timeoutSeconds`
//!   (default 10);
//! - the answer must be an AdmissionReview v1 with the same uid, a patch only with
//!   `patchType: JSONPatch`; a refusal reaches the client as the real server's
//!   `ToStatusErr` makes it: the webhook's status with a code of at least 400 and the
//!   message `admission webhook "<name>" denied the request: <message>`;
//! - a call that fails (no connection, TLS, timeout, an invalid answer) admits the Pod
//!   unchanged with `failurePolicy: Ignore`, and with `Fail` (the default) is a 500
//!   `Internal error occurred: failed calling webhook "<name>": failed to call
//!   webhook: Post "<url>": <why>`;
//! - the patched Pod is then validated as the API server would for what a webhook can
//!   get wrong (422): unique container names, mounts of volumes that exist, unique
//!   volume names, `restartPolicy` only on init containers and only `Always`.
//!
//! A configuration is validated (422) and defaulted when created, as by the real API:
//! `sideEffects` None or NoneOnDryRun, `admissionReviewVersions` with v1, an https
//! `clientConfig.url` (this fake calls no Service), `failurePolicy` Fail or Ignore,
//! `timeoutSeconds` 1 to 30.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::response::Response;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Map, Value};

use super::api::status;
use super::store::Shared;

/// An answer that refuses the request (boxed: a Response is large).
pub(super) type Refused = Box<Response>;

fn refused(code: u16, reason: &str, message: &str) -> Refused {
    Box::new(status(code, reason, message))
}

/// The label kube-apiserver sets on every namespace (its name).
pub(super) const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// A configuration as created: validated, with the API's defaults; or the 422.
pub(super) fn admit_configuration(mut obj: Value) -> Result<Value, Refused> {
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let invalid = |why: String| {
        refused(
            422,
            "Invalid",
            &format!("MutatingWebhookConfiguration.admissionregistration.k8s.io {name:?} is invalid: {why}"),
        )
    };
    let Some(hooks) = obj["webhooks"].as_array_mut() else {
        return Ok(obj);
    };
    for (i, hook) in hooks.iter_mut().enumerate() {
        let at = format!("webhooks[{i}]");
        if hook["name"].as_str().is_none_or(|n| !n.contains('.')) {
            return Err(invalid(format!(
                "{at}.name: Invalid value: a fully qualified name, like inject.leasekeeper.io"
            )));
        }
        if !matches!(hook["sideEffects"].as_str(), Some("None" | "NoneOnDryRun")) {
            return Err(invalid(format!(
                "{at}.sideEffects: Unsupported value: must be None or NoneOnDryRun"
            )));
        }
        let versions = hook["admissionReviewVersions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !versions.iter().any(|v| v == "v1") {
            return Err(invalid(format!(
                "{at}.admissionReviewVersions: Required value: must include v1"
            )));
        }
        if !hook["clientConfig"]["url"]
            .as_str()
            .is_some_and(|u| u.starts_with("https://"))
        {
            return Err(invalid(format!("{at}.clientConfig.url: Required value: an https:// URL (this fake calls no Service)")));
        }
        default(hook, "failurePolicy", json!("Fail"));
        default(hook, "timeoutSeconds", json!(10));
        default(hook, "namespaceSelector", json!({}));
        default(hook, "objectSelector", json!({}));
        default(hook, "matchPolicy", json!("Equivalent"));
        default(hook, "reinvocationPolicy", json!("Never"));
        if !matches!(hook["failurePolicy"].as_str(), Some("Fail" | "Ignore")) {
            return Err(invalid(format!("{at}.failurePolicy: Unsupported value")));
        }
        if !hook["timeoutSeconds"]
            .as_u64()
            .is_some_and(|t| (1..=30).contains(&t))
        {
            return Err(invalid(format!("{at}.timeoutSeconds: Invalid value: the timeout value must be between 1 and 30 seconds")));
        }
        if hook.get("matchConditions").is_some() {
            return Err(invalid(format!(
                "{at}.matchConditions: this fake does not evaluate CEL"
            )));
        }
    }
    Ok(obj)
}

fn default(obj: &mut Value, key: &str, value: Value) {
    if obj[key].is_null() {
        obj[key] = value;
    }
}

/// The Pod `pod`, to be created in `ns`, after every matching webhook; or the answer
/// that refuses it.
pub(super) async fn admit_pod(
    shared: &Arc<Shared>,
    ns: &str,
    ns_labels: &Map<String, Value>,
    user: &str,
    mut pod: Value,
) -> Result<Value, Refused> {
    // As the real server's create handler: the object's namespace is the request's.
    pod["metadata"]["namespace"] = Value::String(ns.to_owned());
    let hooks: Vec<Value> = {
        let store = shared.store.lock().expect("store");
        store
            .objects
            .iter()
            .filter(|((kind, _, _), _)| *kind == "mutatingwebhookconfigurations")
            .flat_map(|(_, c)| c["webhooks"].as_array().cloned().unwrap_or_default())
            .collect()
    };
    for hook in hooks {
        if !calls_for_pod_create(&hook, ns_labels, &pod) {
            continue;
        }
        let name = hook["name"].as_str().unwrap_or_default().to_owned();
        match call(&hook, ns, user, &pod).await {
            Ok(Answer::Allowed(Some(patch))) => pod = apply(&name, pod, &patch)?,
            Ok(Answer::Allowed(None)) => {}
            Ok(Answer::Denied(result)) => return Err(Box::new(denied(&name, &result))),
            Err(_) if hook["failurePolicy"] == "Ignore" => {}
            Err(why) => {
                return Err(refused(
                    500,
                    "InternalError",
                    &format!("Internal error occurred: failed calling webhook {name:?}: {why}"),
                ))
            }
        }
    }
    match invalid_pod(&pod) {
        Some(why) => {
            let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
            Err(refused(
                422,
                "Invalid",
                &format!("Pod {pod_name:?} is invalid: {why}"),
            ))
        }
        None => Ok(pod),
    }
}

/// Whether `hook` is called for the creation of `pod` in a namespace with these labels.
fn calls_for_pod_create(hook: &Value, ns_labels: &Map<String, Value>, pod: &Value) -> bool {
    let has = |list: &Value, want: &str| {
        list.as_array()
            .is_some_and(|l| l.iter().any(|v| v == want || v == "*" || v == "*/*"))
    };
    let ruled = hook["rules"].as_array().into_iter().flatten().any(|r| {
        has(&r["operations"], "CREATE")
            && has(&r["apiGroups"], "")
            && has(&r["apiVersions"], "v1")
            && has(&r["resources"], "pods")
            && matches!(r["scope"].as_str(), None | Some("*" | "Namespaced"))
    });
    let pod_labels = pod["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    ruled
        && selector_matches(&hook["namespaceSelector"], ns_labels)
        && selector_matches(&hook["objectSelector"], &pod_labels)
}

/// A LabelSelector (`matchLabels`, `matchExpressions`) against labels; empty matches all.
pub(super) fn selector_matches(selector: &Value, labels: &Map<String, Value>) -> bool {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let by_labels = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k) == v.as_str());
    let by_expressions = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e["key"].as_str().unwrap_or_default();
            let values: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            match e["operator"].as_str() {
                Some("In") => label(key).is_some_and(|v| values.contains(&v)),
                Some("NotIn") => label(key).is_none_or(|v| !values.contains(&v)),
                Some("Exists") => label(key).is_some(),
                Some("DoesNotExist") => label(key).is_none(),
                _ => false,
            }
        });
    by_labels && by_expressions
}

/// What a webhook answered.
enum Answer {
    /// Allowed, with the JSONPatch's bytes if any.
    Allowed(Option<Vec<u8>>),
    /// Refused, with its `status`.
    Denied(Value),
}

/// One call, as the API server's `callAttrMutatingHook`; the error is the text after
/// `failed calling webhook "<name>": `.
async fn call(hook: &Value, ns: &str, user: &str, pod: &Value) -> Result<Answer, String> {
    static UID: AtomicU64 = AtomicU64::new(1);
    let uid = format!("fake-admission-{}", UID.fetch_add(1, Ordering::Relaxed));
    let seconds = hook["timeoutSeconds"].as_u64().unwrap_or(10);
    let base = hook["clientConfig"]["url"].as_str().unwrap_or_default();
    let url = format!(
        "{base}{}timeout={seconds}s",
        if base.contains('?') { '&' } else { '?' }
    );
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": pod["metadata"]["name"].as_str().unwrap_or_default(),
            "namespace": ns,
            "operation": "CREATE",
            "userInfo": {"username": user},
            "object": pod,
            "oldObject": null,
            "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        }
    });
    let ca = ca_bundle(hook);
    let post = post(&url, ca.as_deref(), review.to_string().into_bytes());
    let answer = match tokio::time::timeout(Duration::from_secs(seconds), post).await {
        Ok(Ok(body)) => body,
        Ok(Err(why)) => return Err(format!("failed to call webhook: Post {url:?}: {why}")),
        Err(_) => {
            return Err(format!(
                "failed to call webhook: Post {url:?}: context deadline exceeded"
            ))
        }
    };
    verify(&uid, &answer).map_err(|why| format!("received invalid webhook response: {why}"))
}

/// `clientConfig.caBundle`, base64 of PEM.
fn ca_bundle(hook: &Value) -> Option<Vec<u8>> {
    let b64 = hook["clientConfig"]["caBundle"].as_str()?;
    let bytes: k8s_openapi::ByteString = serde_json::from_value(json!(b64)).ok()?;
    Some(bytes.0)
}

/// POSTs `body` over HTTPS (HTTP/1.1), trusting only `ca`; the answer's body.
async fn post(url: &str, ca: Option<&[u8]>, body: Vec<u8>) -> Result<Value, String> {
    use rustls::pki_types::pem::PemObject;
    let uri: axum::http::Uri = url.parse().map_err(|e| format!("{e}"))?;
    let host = uri
        .host()
        .unwrap_or_default()
        .trim_matches(['[', ']'])
        .to_owned();
    let port = uri.port_u16().unwrap_or(443);
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::ConnectionRefused => {
                format!("dial tcp {host}:{port}: connect: connection refused")
            }
            _ => format!("dial tcp {host}:{port}: {e}"),
        })?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca.unwrap_or_default()).flatten()
    {
        let _ = roots.add(cert);
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("tls: failed to verify certificate: {e}"))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let request = axum::http::Request::post(path)
        .header("host", format!("{host}:{port}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, */*")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let code = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if !code.is_success() {
        return Err(format!(
            "the server responded with the status code {} but did not return more information",
            code.as_u16()
        ));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("the answer is not JSON: {e}"))
}

/// The API server's `VerifyAdmissionResponse` for v1 and a mutating webhook.
fn verify(uid: &str, review: &Value) -> Result<Answer, String> {
    let response = &review["response"];
    if !response.is_object() {
        return Err("webhook response was absent".to_owned());
    }
    if response["uid"] != uid {
        return Err(format!(
            "expected response.uid={uid:?}, got {:?}",
            response["uid"]
        ));
    }
    if review["apiVersion"] != "admission.k8s.io/v1" || review["kind"] != "AdmissionReview" {
        return Err(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {}, Kind={}",
            review["apiVersion"], review["kind"]
        ));
    }
    let patch = patch_bytes(&response["patch"]);
    match (&patch, response["patchType"].as_str()) {
        (Some(_), None) => {
            return Err("webhook returned response.patch but not response.patchType".to_owned())
        }
        (None, Some(_)) => {
            return Err("webhook returned response.patchType but not response.patch".to_owned())
        }
        _ => {}
    }
    if response["allowed"] != true {
        return Ok(Answer::Denied(response["status"].clone()));
    }
    Ok(Answer::Allowed(patch))
}

/// `response.patch`: Go decodes a `[]byte` from base64 text or from an array of numbers.
fn patch_bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::String(_) => serde_json::from_value::<k8s_openapi::ByteString>(v.clone())
            .ok()
            .map(|b| b.0),
        Value::Array(items) => items
            .iter()
            .map(|n| n.as_u64().and_then(|n| u8::try_from(n).ok()))
            .collect(),
        _ => None,
    }
    .filter(|b| !b.is_empty())
}

/// The refusal as `ToStatusErr` makes it.
fn denied(name: &str, result: &Value) -> Response {
    let denied_by = format!("admission webhook {name:?} denied the request");
    let code = result["code"].as_u64().unwrap_or(0).max(400) as u16;
    let message = result["message"].as_str().filter(|m| !m.is_empty());
    let reason = result["reason"].as_str().filter(|r| !r.is_empty());
    let text = match (message, reason) {
        (Some(m), _) => format!("{denied_by}: {m}"),
        (None, Some(r)) => format!("{denied_by}: {r}"),
        (None, None) => format!("{denied_by} without explanation"),
    };
    status(code, reason.unwrap_or(""), &text)
}

/// The JSONPatch applied to the Pod (500 when it does not apply, as the real server).
fn apply(name: &str, mut pod: Value, patch: &[u8]) -> Result<Value, Refused> {
    let internal = |why: String| {
        refused(
            500,
            "InternalError",
            &format!("Internal error occurred: {why}"),
        )
    };
    let ops: json_patch::Patch = serde_json::from_slice(patch)
        .map_err(|e| internal(format!("admission webhook {name:?}: not a JSONPatch: {e}")))?;
    json_patch::patch(&mut pod, &ops).map_err(|e| internal(e.to_string()))?;
    Ok(pod)
}

/// What the API server's Pod validation refuses that a webhook could get wrong.
fn invalid_pod(pod: &Value) -> Option<String> {
    let spec = &pod["spec"];
    let list = |k: &str| spec[k].as_array().cloned().unwrap_or_default();
    let (containers, inits, volumes) =
        (list("containers"), list("initContainers"), list("volumes"));
    let mut names: Vec<&str> = containers
        .iter()
        .chain(&inits)
        .filter_map(|c| c["name"].as_str())
        .collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Some(format!(
            "spec.containers[].name: Duplicate value: {:?}",
            w[0]
        ));
    }
    let mut volume_names: Vec<&str> = volumes.iter().filter_map(|v| v["name"].as_str()).collect();
    volume_names.sort_unstable();
    if let Some(w) = volume_names.windows(2).find(|w| w[0] == w[1]) {
        return Some(format!("spec.volumes[].name: Duplicate value: {:?}", w[0]));
    }
    for c in containers.iter().chain(&inits) {
        for m in c["volumeMounts"].as_array().into_iter().flatten() {
            let mount = m["name"].as_str().unwrap_or_default();
            if !volume_names.contains(&mount) {
                return Some(format!(
                    "spec.containers[].volumeMounts[].name: Not found: {mount:?}"
                ));
            }
        }
    }
    if containers.iter().any(|c| !c["restartPolicy"].is_null()) {
        return Some(
            "spec.containers[].restartPolicy: Forbidden: may not be set for non-init containers"
                .to_owned(),
        );
    }
    if inits
        .iter()
        .any(|c| !(c["restartPolicy"].is_null() || c["restartPolicy"] == "Always"))
    {
        return Some(
            "spec.initContainers[].restartPolicy: Unsupported value: only Always".to_owned(),
        );
    }
    None
}
