use serde_json::{json, Value};

use super::*;

/// The chart's sidecar as it renders it (the parts that matter here).
const TEMPLATE: &str = r#"
name: leasekeeper
image: ghcr.io/leasekeeper/leasekeeper:0.1.0
imagePullPolicy: IfNotPresent
restartPolicy: Always
ports:
- name: http
  containerPort: 4040
  protocol: TCP
env:
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: LEASEKEEPER_BACKEND
  value: kubernetes
- name: LEASEKEEPER_ELECTION
  value: chart-election
- name: LEASEKEEPER_TTL
  value: 15s
readinessProbe:
  httpGet:
    path: /healthz
    port: http
resources:
  requests:
    cpu: 10m
    memory: 16Mi
securityContext:
  runAsNonRoot: true
  readOnlyRootFilesystem: true
volumeMounts:
- name: tmp
  mountPath: /tmp
"#;

fn injector(native: bool) -> Injector {
    Injector::new(
        Template::from_yaml("--sidecar-template", TEMPLATE).expect("template"),
        native,
    )
}

fn pod(annotations: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "team", "annotations": annotations,
                     "labels": {"app": "web"}},
        "spec": {
            "containers": [{"name": "app", "image": "web:1", "command": ["/web"], "args": ["--port", "8080"],
                            "unknownFutureField": {"kept": true}}],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
    })
}

fn asking(extra: &[(&str, &str)]) -> Value {
    let mut a = json!({"leasekeeper.io/inject": "true", "leasekeeper.io/election": "web"});
    for (k, v) in extra {
        a[*k] = json!(v);
    }
    pod(a)
}

/// The Pod after the decision's patch.
fn patched(pod: &Value, decision: &Decision) -> Value {
    let mut out = pod.clone();
    if let Decision::Patch { ops } = decision {
        let patch: json_patch::Patch = serde_json::from_value(json!(ops)).expect("a JSONPatch");
        json_patch::patch(&mut out, &patch).expect("the patch applies");
    }
    out
}

fn env_of(container: &Value, name: &str) -> Option<Value> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .cloned()
}

#[test]
fn a_native_sidecar_is_the_first_init_container() {
    let pod = asking(&[("leasekeeper.io/ttl", "20s")]);
    let decision = injector(true).decide(&pod);
    let out = patched(&pod, &decision);
    let sidecar = &out["spec"]["initContainers"][0];
    assert_eq!(sidecar["name"], "leasekeeper");
    assert_eq!(sidecar["restartPolicy"], "Always");
    assert_eq!(
        env_of(sidecar, "LEASEKEEPER_TTL").expect("ttl")["value"],
        "20s"
    );
    assert_eq!(
        env_of(sidecar, "LEASEKEEPER_ELECTION").expect("election")["value"],
        "web"
    );
    assert!(env_of(sidecar, "POD_NAME").expect("POD_NAME")["valueFrom"].is_object());
    assert_eq!(sidecar["readinessProbe"]["httpGet"]["port"], "http");
    assert_eq!(sidecar["resources"]["requests"]["cpu"], "10m");
    assert_eq!(sidecar["volumeMounts"][0]["name"], TMP_VOLUME);
    assert_eq!(
        out["spec"]["volumes"][1],
        json!({"name": TMP_VOLUME, "emptyDir": {}})
    );
    assert_eq!(out["metadata"]["labels"]["leasekeeper.io/election"], "web");
    assert_eq!(out["metadata"]["labels"]["app"], "web");
    assert_eq!(
        out["metadata"]["annotations"]["leasekeeper.io/status"],
        "injected"
    );
    // The app is as it was, with the fields this build does not know.
    assert_eq!(out["spec"]["containers"], pod["spec"]["containers"]);
}

#[test]
fn without_native_sidecars_it_is_the_last_container() {
    let pod = asking(&[]);
    let out = patched(&pod, &injector(false).decide(&pod));
    assert!(out["spec"]["initContainers"].is_null());
    let sidecar = &out["spec"]["containers"][1];
    assert_eq!(sidecar["name"], "leasekeeper");
    assert!(sidecar.get("restartPolicy").is_none());
}

#[test]
fn a_second_pass_changes_nothing() {
    for native in [true, false] {
        for extra in [&[][..], &[("leasekeeper.io/run", "app")][..]] {
            let pod = asking(extra);
            let once = patched(&pod, &injector(native).decide(&pod));
            assert_ne!(once, pod);
            let again = injector(native).decide(&once);
            assert_eq!(
                again,
                Decision::Unchanged {
                    warnings: Vec::new()
                },
                "{extra:?}"
            );
        }
    }
}

#[test]
fn a_pod_that_carries_the_sidecar_is_left_alone() {
    let mut pod = asking(&[]);
    pod["spec"]["containers"]
        .as_array_mut()
        .expect("containers")
        .push(json!({"name": "leasekeeper", "image": "mine"}));
    assert_eq!(
        injector(true).decide(&pod),
        Decision::Unchanged {
            warnings: Vec::new()
        }
    );
}

#[test]
fn exec_mode_wraps_the_command() {
    let pod = asking(&[
        ("leasekeeper.io/run", "app"),
        ("leasekeeper.io/kill-grace", "5s"),
    ]);
    let out = patched(&pod, &injector(true).decide(&pod));
    let app = &out["spec"]["containers"][0];
    assert_eq!(
        app["command"],
        json!([
            "/leasekeeper/bin/leasekeeper",
            "run",
            "--",
            "/web",
            "--port",
            "8080"
        ])
    );
    assert!(app.get("args").is_none());
    assert_eq!(app["unknownFutureField"]["kept"], true);
    assert_eq!(
        env_of(app, "LEASEKEEPER_KILL_GRACE").expect("grace")["value"],
        "5s"
    );
    assert_eq!(
        env_of(app, "LEASEKEEPER_BACKEND").expect("backend")["value"],
        "kubernetes"
    );
    assert!(env_of(app, "POD_NAME").is_some());
    assert_eq!(app["volumeMounts"][0]["mountPath"], "/leasekeeper/bin");
    let copy = &out["spec"]["initContainers"][0];
    assert_eq!(copy["name"], COPY_CONTAINER);
    assert_eq!(copy["image"], "ghcr.io/leasekeeper/leasekeeper:0.1.0");
    assert_eq!(copy["args"], json!(["inject", COPY_FLAG, BIN_DIR]));
    assert!(copy.get("restartPolicy").is_none());
    assert_eq!(out["spec"]["containers"].as_array().map(Vec::len), Some(1));
}

#[test]
fn refusals_name_the_annotation() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("leasekeeper.io/ttl", "fast")],
            "leasekeeper.io/ttl: --ttl \"fast\" is not a duration",
        ),
        (
            &[("leasekeeper.io/tll", "15s")],
            "leasekeeper.io/tll is no setting",
        ),
        (
            &[("leasekeeper.io/run", "nope")],
            "leasekeeper.io/run: this Pod has no container named \"nope\"",
        ),
        (
            &[("leasekeeper.io/backend", "redis")],
            "leasekeeper.io/backend: --redis-url is required",
        ),
        (
            &[("leasekeeper.io/kill-grace", "5s")],
            "leasekeeper.io/kill-grace:",
        ),
    ];
    for (extra, want) in cases {
        let pod = asking(extra);
        match injector(true).decide(&pod) {
            Decision::Refused(r) => assert!(r.0.starts_with(want), "{extra:?}: {r}"),
            other => panic!("{extra:?}: {other:?}"),
        }
    }
}

#[test]
fn a_container_without_command_cannot_be_wrapped() {
    let mut pod = asking(&[("leasekeeper.io/run", "app")]);
    pod["spec"]["containers"][0]
        .as_object_mut()
        .expect("container")
        .remove("command");
    let Decision::Refused(r) = injector(true).decide(&pod) else {
        panic!("must be refused")
    };
    assert!(
        r.0.starts_with("leasekeeper.io/run: the container \"app\" has no command"),
        "{r}"
    );
}

#[test]
fn the_election_label_must_agree() {
    let mut pod = asking(&[]);
    pod["metadata"]["labels"]["leasekeeper.io/election"] = json!("other");
    let Decision::Refused(r) = injector(true).decide(&pod) else {
        panic!("must be refused")
    };
    assert!(
        r.0.starts_with("leasekeeper.io/election: the Pod's label"),
        "{r}"
    );
    pod["metadata"]["labels"]["leasekeeper.io/election"] = json!("web");
    let out = patched(&pod, &injector(true).decide(&pod));
    assert_eq!(out["metadata"]["labels"]["leasekeeper.io/election"], "web");
}

#[test]
fn a_bare_pod_gets_its_maps_and_lists() {
    let pod = json!({
        "metadata": {"annotations": {"leasekeeper.io/inject": "true", "leasekeeper.io/election": "web"}},
        "spec": {"containers": [{"name": "app", "image": "web:1"}]},
    });
    let out = patched(&pod, &injector(true).decide(&pod));
    assert_eq!(out["metadata"]["labels"]["leasekeeper.io/election"], "web");
    assert_eq!(out["spec"]["initContainers"][0]["name"], "leasekeeper");
    assert_eq!(out["spec"]["volumes"][0]["name"], TMP_VOLUME);
}

#[test]
fn the_http_port_follows_the_http_address() {
    let pod = asking(&[("leasekeeper.io/http-addr", "0.0.0.0:4999")]);
    let out = patched(&pod, &injector(true).decide(&pod));
    assert_eq!(
        out["spec"]["initContainers"][0]["ports"][0]["containerPort"],
        4999
    );
}

#[test]
fn a_pod_that_did_not_ask_is_unchanged() {
    let pod = pod(json!({"leasekeeper.io/inject": "false"}));
    assert_eq!(
        injector(true).decide(&pod),
        Decision::Unchanged {
            warnings: Vec::new()
        }
    );
    let pod = pod_without_annotations();
    assert_eq!(
        injector(true).decide(&pod),
        Decision::Unchanged {
            warnings: Vec::new()
        }
    );
}

fn pod_without_annotations() -> Value {
    json!({"metadata": {"name": "x"}, "spec": {"containers": [{"name": "app", "image": "a"}]}})
}
