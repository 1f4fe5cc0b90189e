//! The fake's HTTP API: routes, the bearer token, the chart's Role (403), injected
//! latency, failures and held requests, then get, list, create (409 AlreadyExists),
//! update and JSON merge patch (409 Conflict on a stale resourceVersion).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::admission::{admit_configuration, admit_pod, Refused, NAME_LABEL};
use super::lease_rules::admit_lease;
use super::store::{label_selector, labels_match, remove, write, Shared, Store};
use super::watch::watch_response;
use super::{ADMIN_TOKEN, INJECTOR_TOKEN, TOKEN};

/// The chart's Role as `kubectl apply -f manifests/` (and `helm install` with default
/// values) creates it; with `lease_candidates`, plus the rule the chart adds with
/// `leaseCandidate.enabled` (read from its template).
pub(crate) fn chart_role(lease_candidates: bool) -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/02-role.yaml");
    let text = std::fs::read_to_string(path).expect("manifests/02-role.yaml");
    let mut role: Value = serde_yaml_ng::from_str(&text).expect("the Role is YAML");
    assert_eq!(role["kind"], "Role", "manifests/02-role.yaml is not a Role");
    if lease_candidates {
        let extra = chart_rules_if("leaseCandidate.enabled");
        if let Some(rules) = role["rules"].as_array_mut() {
            rules.extend(extra);
        }
    }
    role
}

/// The (resource, verb) pairs of [`chart_role`].
pub(crate) fn role_rules(lease_candidates: bool) -> Vec<(String, String)> {
    let role = chart_role(lease_candidates);
    let rules = role["rules"].as_array().expect("rules").clone();
    let mut granted = Vec::new();
    for rule in &rules {
        let group = rule["apiGroups"][0].as_str().unwrap_or("");
        for resource in rule["resources"].as_array().expect("resources") {
            let resource = resource.as_str().expect("resource");
            // This fake serves pods and events in the core group, and leases and
            // leasecandidates in coordination.k8s.io.
            let served = matches!(
                (group, resource),
                ("", "pods")
                    | ("", "events")
                    | ("coordination.k8s.io", "leases" | "leasecandidates")
            );
            if !served {
                continue;
            }
            for verb in rule["verbs"].as_array().expect("verbs") {
                granted.push((resource.to_owned(), verb.as_str().expect("verb").to_owned()));
            }
        }
    }
    granted
}

/// The rules the chart's Role adds under `{{- if … .Values.<value> }}` (in its named
/// template `leasekeeper.sidecarRules`, which the injected sidecars' Roles share): the
/// lines up to its `{{- end }}`, as YAML (they hold no template expressions).
fn chart_rules_if(value: &str) -> Vec<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/charts/leasekeeper/templates/_sidecar.tpl"
    );
    let text = std::fs::read_to_string(path).expect("the chart's _sidecar.tpl");
    let block: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.contains("define \"leasekeeper.sidecarRules\""))
        .skip_while(|l| !(l.contains("{{- if") && l.contains(&format!(".Values.{value}"))))
        .skip(1)
        .take_while(|l| !l.contains("{{- end }}"))
        .collect();
    assert!(!block.is_empty(), "no rule under .Values.{value} in {path}");
    let rules: Value = serde_yaml_ng::from_str(&block.join("\n")).expect("the rules are YAML");
    rules.as_array().expect("a list of rules").clone()
}

/// RFC 7386 JSON merge patch.
pub(crate) fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(fields) => {
            if !target.is_object() {
                *target = json!({});
            }
            let Some(t) = target.as_object_mut() else {
                return;
            };
            for (k, v) in fields {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

pub(super) fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    });
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn ok(obj: &Value, code: StatusCode) -> Response {
    (
        code,
        [("content-type", "application/json")],
        obj.to_string(),
    )
        .into_response()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query(uri: &Uri) -> BTreeMap<String, String> {
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

/// One request, as routed: what it acts on and how.
struct Request<'a> {
    kind: &'static str,
    ns: &'a str,
    name: Option<&'a str>,
    verb: &'static str,
    q: &'a BTreeMap<String, String>,
    headers: &'a HeaderMap,
    body: &'a Bytes,
}

pub(super) async fn handle(
    shared: Arc<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // A paused server answers nothing until resumed.
    let mut paused = shared.paused.subscribe();
    let _ = paused.wait_for(|p| !*p).await;
    let latency = shared.store.lock().expect("store").latency;
    if !latency.is_zero() {
        // The fault: the latency set on the fake API.
        tokio::time::sleep(latency).await;
    }
    let Some(user) = User::of(&headers) else {
        return status(401, "Unauthorized", "no valid bearer token");
    };
    if let Some(answer) = version(&shared, &uri) {
        return answer;
    }
    if let Some(answer) = discovery(&shared, &method, &uri) {
        return answer;
    }
    let Some((kind, ns, name)) = route(&uri) else {
        return status(404, "NotFound", &format!("no route {}", uri.path()));
    };
    let q = query(&uri);
    let watching = q.get("watch").is_some_and(|w| w == "true" || w == "1");
    let Some(verb) = verb_of(&method, name, watching) else {
        return status(405, "MethodNotAllowed", "method not allowed");
    };
    if let Some(refused) = user.refuse_unless_allowed(&shared, verb, kind, ns) {
        return refused;
    }
    let body = match (verb, kind) {
        ("create", "pods") => match admit(&shared, ns, user, &body).await {
            Ok(admitted) => admitted,
            Err(refused) => return *refused,
        },
        ("create", "mutatingwebhookconfigurations") => {
            let parsed = serde_json::from_slice(&body).unwrap_or(Value::Null);
            match admit_configuration(parsed) {
                Ok(obj) => Bytes::from(obj.to_string()),
                Err(refused) => return *refused,
            }
        }
        _ => body,
    };
    let served = shared
        .lease_candidates_served
        .load(std::sync::atomic::Ordering::Relaxed);
    if kind == "leasecandidates" && !served {
        // As an API server that does not serve the group version (authorization
        // comes first there too).
        return status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
    }
    if verb == "watch" {
        return watch_response(shared, kind, ns, &q);
    }
    match hold_if_next(&shared, &method, &uri) {
        Some((index, delay)) => {
            let (ns, name) = (ns.to_owned(), name.map(str::to_owned));
            serve_late(shared, index, delay, kind, ns, name, verb, q, headers, body).await
        }
        None => serve(
            &shared,
            &Request {
                kind,
                ns,
                name,
                verb,
                q: &q,
                headers: &headers,
                body: &body,
            },
        ),
    }
}

/// The discovery document of `coordination.k8s.io/v1beta1` (LeaseCandidates), which
/// every authenticated client may read (the `system:discovery` ClusterRole), or 404
/// when that group version is not served; `None` for every other path.
fn discovery(shared: &Shared, method: &Method, uri: &Uri) -> Option<Response> {
    if uri.path().trim_end_matches('/') != "/apis/coordination.k8s.io/v1beta1" {
        return None;
    }
    let mut store = shared.store.lock().expect("store");
    *store
        .requests
        .entry("get discovery".to_owned())
        .or_default() += 1;
    drop(store);
    if method != Method::GET {
        return Some(status(405, "MethodNotAllowed", "method not allowed"));
    }
    if !shared
        .lease_candidates_served
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        return Some(status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ));
    }
    let verbs = [
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ];
    let body = json!({
        "kind": "APIResourceList", "apiVersion": "v1",
        "groupVersion": "coordination.k8s.io/v1beta1",
        "resources": [{
            "name": "leasecandidates", "singularName": "leasecandidate", "namespaced": true,
            "kind": "LeaseCandidate", "verbs": verbs,
        }],
    });
    Some(ok(&body, StatusCode::OK))
}

/// (kind, namespace, name) of a path this fake serves.
fn route(uri: &Uri) -> Option<(&'static str, &str, Option<&str>)> {
    let segments: Vec<&str> = uri.path().trim_matches('/').split('/').collect();
    Some(match segments.as_slice() {
        ["api", "v1", "pods"] => ("pods", "", None),
        ["api", "v1", "namespaces"] => ("namespaces", "", None),
        ["api", "v1", "namespaces", name] => ("namespaces", "", Some(name)),
        ["apis", "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations"] => {
            ("mutatingwebhookconfigurations", "", None)
        }
        ["apis", "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", name] => {
            ("mutatingwebhookconfigurations", "", Some(name))
        }
        ["api", "v1", "namespaces", ns, "pods"] => ("pods", ns, None),
        ["api", "v1", "namespaces", ns, "pods", name] => ("pods", ns, Some(name)),
        ["api", "v1", "namespaces", ns, "events"] => ("events", ns, None),
        ["api", "v1", "namespaces", ns, "events", name] => ("events", ns, Some(name)),
        ["apis", "coordination.k8s.io", "v1", "namespaces", ns, "leases"] => ("leases", ns, None),
        ["apis", "coordination.k8s.io", "v1", "namespaces", ns, "leases", name] => {
            ("leases", ns, Some(name))
        }
        ["apis", "coordination.k8s.io", "v1beta1", "namespaces", ns, "leasecandidates"] => {
            ("leasecandidates", ns, None)
        }
        ["apis", "coordination.k8s.io", "v1beta1", "namespaces", ns, "leasecandidates", name] => {
            ("leasecandidates", ns, Some(name))
        }
        _ => return None,
    })
}

/// The RBAC verb of a request, if this fake takes its method there.
fn verb_of(method: &Method, name: Option<&str>, watching: bool) -> Option<&'static str> {
    Some(match (method, name, watching) {
        (&Method::GET, Some(_), _) => "get",
        (&Method::GET, None, true) => "watch",
        (&Method::GET, None, false) => "list",
        (&Method::POST, None, _) => "create",
        (&Method::PUT, Some(_), _) => "update",
        (&Method::PATCH, Some(_), _) => "patch",
        (&Method::DELETE, Some(_), _) => "delete",
        (&Method::DELETE, None, _) => "deletecollection",
        _ => return None,
    })
}

/// Who asks, by bearer token: the sidecars (the chart's Role in the fake's namespace),
/// the injector (its ClusterRole: Pods get, list and watch, Events create, Namespaces
/// get, in every namespace) or the harness's administrator (everything).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum User {
    Sidecar,
    Injector,
    Admin,
}

impl User {
    fn of(headers: &HeaderMap) -> Option<User> {
        let auth = headers.get("authorization")?.to_str().ok()?;
        let token = auth.strip_prefix("Bearer ")?;
        [
            (TOKEN, User::Sidecar),
            (INJECTOR_TOKEN, User::Injector),
            (ADMIN_TOKEN, User::Admin),
        ]
        .into_iter()
        .find(|(t, _)| *t == token)
        .map(|(_, u)| u)
    }

    fn name(self) -> &'static str {
        match self {
            User::Sidecar => "leasekeeper",
            User::Injector => "leasekeeper-injector",
            User::Admin => "admin",
        }
    }

    /// Counts the sidecars' requests; refuses one (403) unless the user's rules allow
    /// it, or with the next injected failure.
    fn refuse_unless_allowed(
        self,
        shared: &Shared,
        verb: &'static str,
        kind: &'static str,
        ns: &str,
    ) -> Option<Response> {
        match self {
            User::Sidecar => count_then_refuse_unless_allowed(shared, verb, kind, ns),
            User::Admin => None,
            User::Injector => {
                let allowed = matches!(
                    (kind, verb),
                    ("pods", "get" | "list" | "watch")
                        | ("events", "create")
                        | ("namespaces", "get")
                );
                (!allowed).then(|| {
                    status(
                        403,
                        "Forbidden",
                        &format!("{verb} {kind} in namespace {ns:?} is not allowed"),
                    )
                })
            }
        }
    }
}

/// Counts the request; refuses it (403) unless the chart's Role, and nothing else,
/// allows it in the fake's namespace, or with the next injected failure.
fn count_then_refuse_unless_allowed(
    shared: &Shared,
    verb: &'static str,
    kind: &'static str,
    ns: &str,
) -> Option<Response> {
    let allowed = ns == shared.namespace
        && shared
            .granted
            .iter()
            .any(|(resource, granted)| resource == kind && granted == verb);
    let mut store = shared.store.lock().expect("store");
    *store.requests.entry(format!("{verb} {kind}")).or_default() += 1;
    if !allowed {
        store.forbidden.push(format!("{verb} {kind} in {ns}"));
        drop(store);
        return Some(status(
            403,
            "Forbidden",
            &format!("{verb} {kind} in namespace {ns} is not allowed"),
        ));
    }
    if !store.fail_next.is_empty() {
        let code = store.fail_next.remove(0);
        return Some(status(code, "InternalError", "injected failure"));
    }
    None
}

/// A Pod to create in `ns`: the namespace must exist (404, the NamespaceLifecycle
/// admission plugin), then the mutating webhooks run ([`admit_pod`]).
async fn admit(shared: &Arc<Shared>, ns: &str, user: User, body: &Bytes) -> Result<Bytes, Refused> {
    let Ok(pod) = serde_json::from_slice::<Value>(body) else {
        return Ok(body.clone());
    };
    let Some(labels) = namespace_labels(shared, ns) else {
        return Err(Box::new(status(
            404,
            "NotFound",
            &format!("namespaces {ns:?} not found"),
        )));
    };
    let pod = admit_pod(shared, ns, &labels, user.name(), pod).await?;
    Ok(Bytes::from(pod.to_string()))
}

/// The labels of namespace `ns`: a stored Namespace's, or the fake's own namespace's
/// (which exists without being stored); `None` when there is no such namespace.
pub(super) fn namespace_labels(
    shared: &Shared,
    ns: &str,
) -> Option<serde_json::Map<String, Value>> {
    let store = shared.store.lock().expect("store");
    match store
        .objects
        .get(&("namespaces", String::new(), ns.to_owned()))
    {
        Some(obj) => Some(
            obj["metadata"]["labels"]
                .as_object()
                .cloned()
                .unwrap_or_default(),
        ),
        None if ns == shared.namespace => {
            let mut labels = serde_json::Map::new();
            labels.insert(NAME_LABEL.to_owned(), Value::String(ns.to_owned()));
            Some(labels)
        }
        None => None,
    }
}

/// `GET /version`, which every client may read (`system:public-info-viewer`).
fn version(shared: &Shared, uri: &Uri) -> Option<Response> {
    if uri.path().trim_end_matches('/') != "/version" {
        return None;
    }
    let (major, minor) = shared.store.lock().expect("store").version_info.clone();
    let body = json!({
        "major": major, "minor": minor, "gitVersion": format!("v{major}.{minor}.0-fake"),
        "gitCommit": "", "gitTreeState": "clean", "buildDate": "2026-11-22T00:00:00Z",
        "goVersion": "go1.24", "compiler": "gc", "platform": "linux/amd64",
    });
    Some(ok(&body, StatusCode::OK))
}

/// Takes the held-request switch when this request matches it: (its index among the
/// held, its delay).
fn hold_if_next(shared: &Shared, method: &Method, uri: &Uri) -> Option<(usize, Duration)> {
    let mut store = shared.store.lock().expect("store");
    let hit = store
        .hold_next
        .as_ref()
        .is_some_and(|(m, suffix, _)| m == method && uri.path().ends_with(suffix.as_str()));
    match store.hold_next.take() {
        Some((_, _, delay)) if hit => {
            store.held.push(None);
            Some((store.held.len() - 1, delay))
        }
        other => {
            store.hold_next = other;
            None
        }
    }
}

/// A held request, served `delay` after it arrived and noted with its status. Acted
/// on even if the client gives up meanwhile: the request is on the wire.
#[allow(clippy::too_many_arguments)]
async fn serve_late(
    shared: Arc<Shared>,
    index: usize,
    delay: Duration,
    kind: &'static str,
    ns: String,
    name: Option<String>,
    verb: &'static str,
    q: BTreeMap<String, String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let task = tokio::spawn(async move {
        // The fault: the delay set on this request.
        tokio::time::sleep(delay).await;
        let response = serve(
            &shared,
            &Request {
                kind,
                ns: &ns,
                name: name.as_deref(),
                verb,
                q: &q,
                headers: &headers,
                body: &body,
            },
        );
        let code = response.status().as_u16();
        shared.store.lock().expect("store").held[index] = Some(code);
        response
    });
    task.await
        .unwrap_or_else(|_| status(500, "InternalError", "held request"))
}

/// Acts on one request that passed the checks.
fn serve(shared: &Shared, r: &Request<'_>) -> Response {
    let parsed: Option<Value> = if r.body.is_empty() {
        None
    } else {
        match serde_json::from_slice(r.body) {
            Ok(v) => Some(v),
            Err(e) => return status(400, "BadRequest", &format!("bad JSON: {e}")),
        }
    };
    let content_type = r
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let mut store = shared.store.lock().expect("store");
    match r.verb {
        "list" => list(&store, r.kind, r.ns, r.q),
        "get" => {
            let name = r.name.unwrap_or_default();
            match store
                .objects
                .get(&(r.kind, r.ns.to_owned(), name.to_owned()))
            {
                Some(obj) => ok(obj, StatusCode::OK),
                None => status(404, "NotFound", &format!("{} {name:?} not found", r.kind)),
            }
        }
        "create" => create(shared, &mut store, r, parsed),
        "update" => update(shared, &mut store, r, parsed),
        "patch" => merge_patch(shared, &mut store, r, parsed, &content_type),
        "delete" => {
            let name = r.name.unwrap_or_default();
            match remove(shared, &mut store, r.kind, r.ns, name) {
                Some(obj) => ok(&obj, StatusCode::OK),
                None => status(404, "NotFound", &format!("{} {name:?} not found", r.kind)),
            }
        }
        _ => status(405, "MethodNotAllowed", "not supported"),
    }
}

/// Create: 409 AlreadyExists when the name is taken.
fn create(shared: &Shared, store: &mut Store, r: &Request<'_>, parsed: Option<Value>) -> Response {
    let (kind, ns) = (r.kind, r.ns);
    let Some(mut obj) = parsed else {
        return status(400, "BadRequest", "no body");
    };
    if obj["metadata"]["name"].is_null() {
        // As the real API: a name from `generateName` and five characters.
        if let Some(prefix) = obj["metadata"]["generateName"].as_str() {
            let name = format!("{prefix}{:05x}", (store.version + 1) % 0xfffff);
            obj["metadata"]["name"] = Value::String(name);
        }
    }
    let Some(name) = obj["metadata"]["name"].as_str().map(str::to_owned) else {
        return status(422, "Invalid", "metadata.name is required");
    };
    if kind == "namespaces" {
        obj["metadata"]["labels"][super::admission::NAME_LABEL] = Value::String(name.clone());
    }
    if kind == "events" && obj["involvedObject"]["namespace"].as_str() != Some(ns) {
        // As the real API: an Event lives in its involved object's namespace.
        return status(
            422,
            "Invalid",
            "involvedObject.namespace does not match the event's",
        );
    }
    if let Some(invalid) = invalid_candidate(kind, &name, &obj, None) {
        return invalid;
    }
    if let Some(invalid) = invalid_lease(shared, kind, &name, None, &mut obj) {
        return invalid;
    }
    if store
        .objects
        .contains_key(&(kind, ns.to_owned(), name.clone()))
    {
        return status(
            409,
            "AlreadyExists",
            &format!("{kind} {name:?} already exists"),
        );
    }
    if dry_run(r) {
        return ok(&obj, StatusCode::CREATED);
    }
    let stored = write(shared, store, kind, ns, &name, obj, "ADDED");
    ok(&stored, StatusCode::CREATED)
}

/// A LeaseCandidate the real API refuses (422): a name that is no DNS subdomain; no
/// `leaseName`, `binaryVersion` or `strategy`; no `emulationVersion` with the strategy
/// `OldestEmulationVersion`; a `leaseName` changed by an update (it is immutable).
fn invalid_candidate(
    kind: &str,
    name: &str,
    obj: &Value,
    current: Option<&Value>,
) -> Option<Response> {
    if kind != "leasecandidates" {
        return None;
    }
    let spec = &obj["spec"];
    let given = |f: &str| spec[f].as_str().is_some_and(|v| !v.is_empty());
    let dns = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        });
    let problem = if !dns {
        "metadata.name: a lowercase RFC 1123 subdomain"
    } else if !given("leaseName") || !given("binaryVersion") || !given("strategy") {
        "spec.leaseName, spec.binaryVersion and spec.strategy are required"
    } else if spec["strategy"] == "OldestEmulationVersion" && !given("emulationVersion") {
        "spec.emulationVersion is required with the strategy OldestEmulationVersion"
    } else if current.is_some_and(|c| c["spec"]["leaseName"] != spec["leaseName"]) {
        "spec.leaseName: field is immutable"
    } else {
        return None;
    };
    Some(status(
        422,
        "Invalid",
        &format!("LeaseCandidate {name:?} is invalid: {problem}"),
    ))
}

/// A Lease write as the API server admits it (fields the feature gate drops, then
/// validation: 422); `None` for other kinds and valid Leases.
fn invalid_lease(
    shared: &Shared,
    kind: &str,
    name: &str,
    old: Option<&Value>,
    obj: &mut Value,
) -> Option<Response> {
    if kind != "leases" {
        return None;
    }
    let coordinated = shared
        .coordinated
        .load(std::sync::atomic::Ordering::Relaxed);
    admit_lease(coordinated, name, old, obj)
        .err()
        .map(|m| status(422, "Invalid", &m))
}

/// `?dryRun=All`: everything but the write.
fn dry_run(r: &Request<'_>) -> bool {
    r.q.get("dryRun").is_some_and(|d| d == "All")
}

/// Update (PUT): 409 Conflict when it names a resourceVersion other than the current
/// one; one that names none is a blind write (counted).
fn update(shared: &Shared, store: &mut Store, r: &Request<'_>, parsed: Option<Value>) -> Response {
    let (kind, ns) = (r.kind, r.ns);
    let name = r.name.unwrap_or_default().to_owned();
    let Some(obj) = parsed else {
        return status(400, "BadRequest", "no body");
    };
    let Some(current) = store
        .objects
        .get(&(kind, ns.to_owned(), name.clone()))
        .cloned()
    else {
        return status(404, "NotFound", &format!("{kind} {name:?} not found"));
    };
    match obj["metadata"]["resourceVersion"].as_str() {
        None | Some("") => store.blind_writes += 1,
        Some(v) if Some(v) != current["metadata"]["resourceVersion"].as_str() => {
            return status(
                409,
                "Conflict",
                &format!(
                    "Operation cannot be fulfilled on {kind} {name:?}: the object has been modified; please apply your changes to the latest version and try again"
                ),
            )
        }
        Some(_) => {}
    }
    if let Some(invalid) = invalid_candidate(kind, &name, &obj, Some(&current)) {
        return invalid;
    }
    let mut obj = obj;
    if let Some(invalid) = invalid_lease(shared, kind, &name, Some(&current), &mut obj) {
        return invalid;
    }
    obj["metadata"]["uid"] = current["metadata"]["uid"].clone();
    obj["metadata"]["creationTimestamp"] = current["metadata"]["creationTimestamp"].clone();
    if dry_run(r) {
        return ok(&obj, StatusCode::OK);
    }
    let stored = write(shared, store, kind, ns, &name, obj, "MODIFIED");
    ok(&stored, StatusCode::OK)
}

/// JSON merge patch only (415 for other patch types): 409 Conflict when the patch
/// names a resourceVersion other than the current one.
fn merge_patch(
    shared: &Shared,
    store: &mut Store,
    r: &Request<'_>,
    parsed: Option<Value>,
    content_type: &str,
) -> Response {
    let (kind, ns) = (r.kind, r.ns);
    let name = r.name.unwrap_or_default().to_owned();
    if !content_type.starts_with("application/merge-patch+json") {
        return status(
            415,
            "UnsupportedMediaType",
            &format!("only merge patches here, not {content_type:?}"),
        );
    }
    let Some(patch) = parsed else {
        return status(400, "BadRequest", "no body");
    };
    let Some(mut current) = store
        .objects
        .get(&(kind, ns.to_owned(), name.clone()))
        .cloned()
    else {
        return status(404, "NotFound", &format!("{kind} {name:?} not found"));
    };
    if let Some(v) = patch["metadata"]["resourceVersion"].as_str() {
        if Some(v) != current["metadata"]["resourceVersion"].as_str() {
            return status(409, "Conflict", "the object has been modified");
        }
    }
    let before = current.clone();
    merge(&mut current, &patch);
    if let Some(invalid) = invalid_lease(shared, kind, &name, Some(&before), &mut current) {
        return invalid;
    }
    if dry_run(r) {
        return ok(&current, StatusCode::OK);
    }
    let stored = write(shared, store, kind, ns, &name, current, "MODIFIED");
    ok(&stored, StatusCode::OK)
}

/// A list: the matching objects, at the current global resourceVersion.
fn list(store: &Store, kind: &'static str, ns: &str, q: &BTreeMap<String, String>) -> Response {
    let labels = match label_selector(q.get("labelSelector").map_or("", String::as_str)) {
        Ok(l) => l,
        Err(e) => return status(400, "BadRequest", &e),
    };
    let mut fields = Vec::new();
    for part in q
        .get("fieldSelector")
        .map_or("", String::as_str)
        .split(',')
        .filter(|p| !p.is_empty())
    {
        match part.split_once('=') {
            Some((f @ ("metadata.name" | "metadata.namespace"), v)) => {
                fields.push((f.to_owned(), v.to_owned()));
            }
            _ => {
                return status(
                    400,
                    "BadRequest",
                    &format!("field label not supported: {part}"),
                )
            }
        }
    }
    let limit = match q.get("limit").map(|l| l.parse::<usize>()) {
        None => usize::MAX,
        Some(Ok(0)) => usize::MAX,
        Some(Ok(l)) => l,
        Some(Err(_)) => return status(400, "BadRequest", "limit is not a number"),
    };
    if q.get("continue").is_some_and(|c| !c.is_empty()) {
        return status(400, "BadRequest", "this fake does not continue lists");
    }
    let matching: Vec<Value> = store
        .objects
        .iter()
        .filter(|((k, n, _), _)| *k == kind && (ns.is_empty() || n == ns))
        .map(|(_, obj)| obj)
        .filter(|obj| labels_match(obj, &labels))
        .filter(|obj| {
            fields
                .iter()
                .all(|(f, v)| obj["metadata"][&f["metadata.".len()..]].as_str() == Some(v.as_str()))
        })
        .cloned()
        .collect();
    let more = matching.len() > limit;
    let items: Vec<Value> = matching.into_iter().take(limit).collect();
    let (api_version, list_kind) = match kind {
        "pods" => ("v1", "PodList"),
        "events" => ("v1", "EventList"),
        "leasecandidates" => ("coordination.k8s.io/v1beta1", "LeaseCandidateList"),
        "namespaces" => ("v1", "NamespaceList"),
        "mutatingwebhookconfigurations" => (
            "admissionregistration.k8s.io/v1",
            "MutatingWebhookConfigurationList",
        ),
        _ => ("coordination.k8s.io/v1", "LeaseList"),
    };
    let mut metadata = json!({"resourceVersion": store.version.to_string()});
    if more {
        metadata["continue"] = Value::String(format!("fake-continue-{}", store.version));
    }
    ok(
        &json!({"apiVersion": api_version, "kind": list_kind, "metadata": metadata, "items": items}),
        StatusCode::OK,
    )
}
