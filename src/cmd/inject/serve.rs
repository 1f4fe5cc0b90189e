//! The two listeners: the webhook (`POST /mutate`, `GET /healthz`) over TLS, and
//! `/metrics`, `/healthz`, `/readyz` in plain HTTP; both until SIGTERM or SIGINT.

use std::future::IntoFuture;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::DynamicObject;
use serde_json::Value;

use super::tls::{Serving, TlsListener};
use crate::inject::metrics::{InjectorMetrics, Review, CONTENT_TYPE};
use crate::inject::mutate::Injector;
use crate::inject::Decision;

/// What the handlers share.
#[derive(Clone)]
struct App {
    injector: Arc<Injector>,
    metrics: Arc<InjectorMetrics>,
}

/// Serves both listeners until a stop signal.
pub async fn serve(
    webhook: tokio::net::TcpListener,
    metrics_listener: tokio::net::TcpListener,
    serving: Arc<Serving>,
    injector: Arc<Injector>,
    metrics: Arc<InjectorMetrics>,
) -> anyhow::Result<()> {
    let app = App { injector, metrics };
    let hooks = Router::new()
        .route("/mutate", post(mutate))
        .route("/healthz", get(ok))
        .with_state(app.clone());
    let status = Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(ok))
        .route("/readyz", get(ok))
        .with_state(app);
    let tls = TlsListener::new(webhook, serving.server_config()?)?;
    let webhook = axum::serve(tls, hooks).with_graceful_shutdown(stop_signal());
    let plain = axum::serve(metrics_listener, status).with_graceful_shutdown(stop_signal());
    tokio::select! {
        served = webhook.into_future() => served?,
        served = plain.into_future() => served?,
    }
    tracing::info!("leasekeeper injector stopped");
    Ok(())
}

/// SIGTERM or SIGINT.
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

async fn ok() -> &'static str {
    "ok\n"
}

async fn render_metrics(State(app): State<App>) -> Response {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], app.metrics.render()).into_response()
}

/// `POST /mutate`: one AdmissionReview in, one out.
async fn mutate(State(app): State<App>, body: Bytes) -> Response {
    let (review, result) = answer(&app.injector, &body);
    app.metrics.review(result);
    match review {
        Ok(review) => axum::Json(review).into_response(),
        Err(why) => {
            tracing::warn!("not an AdmissionReview: {why}");
            (
                StatusCode::BAD_REQUEST,
                axum::Json(AdmissionResponse::invalid(why).into_review()),
            )
                .into_response()
        }
    }
}

/// The answer to a request body, and how it ended.
fn answer(
    injector: &Injector,
    body: &[u8],
) -> (Result<AdmissionReview<DynamicObject>, String>, Review) {
    let parsed = serde_json::from_slice::<AdmissionReview<DynamicObject>>(body)
        .map_err(|e| e.to_string())
        .and_then(|r| {
            let request: Result<AdmissionRequest<DynamicObject>, _> = r.try_into();
            request.map_err(|e| e.to_string())
        });
    let request = match parsed {
        Ok(request) => request,
        Err(why) => return (Err(why), Review::Invalid),
    };
    // The object as sent: what this build's types do not know must stay as it is.
    let raw: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let mut pod = raw["request"]["object"].clone();
    let response = AdmissionResponse::from(&request);
    if request.operation != Operation::Create || request.kind.kind != "Pod" || !pod.is_object() {
        return (Ok(response.into_review()), Review::Unchanged);
    }
    // The API server sets the namespace before admission; the request names it too.
    if let (true, Some(ns)) = (pod["metadata"]["namespace"].is_null(), &request.namespace) {
        pod["metadata"]["namespace"] = Value::String(ns.clone());
    }
    let (response, result) = respond(response, injector.decide(&pod), &request);
    (Ok(response.into_review()), result)
}

fn respond(
    response: AdmissionResponse,
    decision: Decision,
    request: &AdmissionRequest<DynamicObject>,
) -> (AdmissionResponse, Review) {
    let pod = format!(
        "{}/{}",
        request.namespace.as_deref().unwrap_or(""),
        pod_name(request)
    );
    match decision {
        Decision::Unchanged { warnings } => {
            let mut response = response;
            if !warnings.is_empty() {
                response.warnings = Some(warnings);
            }
            (response, Review::Unchanged)
        }
        Decision::Patch { ops } => {
            let patched = serde_json::from_value::<json_patch::Patch>(Value::Array(ops))
                .map_err(|e| e.to_string())
                .and_then(|p| response.clone().with_patch(p).map_err(|e| e.to_string()));
            match patched {
                Ok(r) => {
                    tracing::info!(%pod, "sidecar injected");
                    (r, Review::Injected)
                }
                Err(why) => refused(
                    response,
                    &format!("the injector could not write its patch: {why}"),
                ),
            }
        }
        Decision::Refused(refusal) => {
            tracing::info!(%pod, "refused: {refusal}");
            refused(response, &refusal.0)
        }
    }
}

/// A refusal as the API server passes it on: status 400 with this message.
fn refused(response: AdmissionResponse, message: &str) -> (AdmissionResponse, Review) {
    let mut response = response.deny(message);
    response.result.code = 400;
    response.result.reason = "BadRequest".to_owned();
    (response, Review::Refused)
}

/// The Pod's name, or its `generateName` prefix (a Deployment's Pods have no name yet).
fn pod_name(request: &AdmissionRequest<DynamicObject>) -> String {
    let meta = request.object.as_ref().map(|o| &o.metadata);
    meta.and_then(|m| m.name.clone())
        .or_else(|| meta.and_then(|m| m.generate_name.clone()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::inject::Template;

    fn injector() -> Injector {
        // The sidecar in a Pod labels it: it needs the Pod's name from the downward API.
        let yaml = "name: leasekeeper\nimage: lk:1\nenv:\n- name: POD_NAME\n  valueFrom:\n    fieldRef:\n      fieldPath: metadata.name\n";
        let t = Template::from_yaml("--t", yaml).expect("template");
        Injector::new(t, true)
    }

    fn review(annotations: Value) -> Vec<u8> {
        json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u-1", "operation": "CREATE", "namespace": "team", "name": "",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "userInfo": {"username": "admin"},
                "object": {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"generateName": "web-", "annotations": annotations},
                           "spec": {"containers": [{"name": "app", "image": "web"}]}},
            }
        })
        .to_string()
        .into_bytes()
    }

    fn answered(body: &[u8]) -> (Value, Review) {
        let (review, result) = answer(&injector(), body);
        (
            serde_json::to_value(review.expect("a review")).expect("json"),
            result,
        )
    }

    #[test]
    fn an_injection_answers_a_json_patch() {
        let (out, result) = answered(&review(
            json!({"leasekeeper.io/inject": "true", "leasekeeper.io/election": "web"}),
        ));
        assert_eq!(result, Review::Injected);
        let r = &out["response"];
        assert_eq!(
            (r["uid"].as_str(), r["allowed"].as_bool()),
            (Some("u-1"), Some(true))
        );
        assert_eq!(r["patchType"], "JSONPatch");
        assert_eq!(out["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(out["kind"], "AdmissionReview");
    }

    #[test]
    fn a_refusal_is_400_with_the_message() {
        let (out, result) = answered(&review(json!({
            "leasekeeper.io/inject": "true", "leasekeeper.io/election": "web", "leasekeeper.io/ttl": "fast"
        })));
        assert_eq!(result, Review::Refused);
        let r = &out["response"];
        assert_eq!(r["allowed"], false);
        assert_eq!(r["status"]["code"], 400);
        assert!(
            r["status"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("leasekeeper.io/ttl: ")),
            "{r}"
        );
        assert!(r.get("patch").is_none());
    }

    #[test]
    fn other_pods_pass_unchanged_and_garbage_is_invalid() {
        let (out, result) = answered(&review(json!({})));
        assert_eq!(result, Review::Unchanged);
        assert_eq!(out["response"]["allowed"], true);
        assert!(out["response"].get("patch").is_none());
        let (answer, result) = answer(&injector(), b"{}");
        assert!(answer.is_err());
        assert_eq!(result, Review::Invalid);
    }
}
