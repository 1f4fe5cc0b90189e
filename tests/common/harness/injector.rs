//! The injector under test (`leasekeeper inject` as a process) and what it needs: a CA
//! and serving certificates for 127.0.0.1 made with the openssl CLI, the sidecar
//! template as the chart renders it, the MutatingWebhookConfiguration the chart makes
//! (its default selectors), and namespaces with labels, on either API server.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::servers::kube_server::KubeApi;
use crate::common::servers::server::{wait_serving, ServerProcess};

/// The webhook's name in the configuration.
pub const WEBHOOK: &str = "inject.leasekeeper.io";
/// The namespace the injector runs in (the chart's release namespace), which the
/// chart's default namespaceSelector leaves out.
pub const OWN_NAMESPACE: &str = "lk-system";

/// The chart's sidecar container as it renders it with default values (an election
/// of its own, the kubernetes backend, the Pod label, probes, resources, the `tmp`
/// mount), as `--sidecar-template` reads it.
pub const TEMPLATE: &str = r#"name: leasekeeper
image: "ghcr.io/leasekeeper/leasekeeper:0.1.0"
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
    value: "kubernetes"
  - name: LEASEKEEPER_ELECTION
    value: "leasekeeper"
  - name: LEASEKEEPER_HTTP_ADDR
    value: "0.0.0.0:4040"
  - name: LEASEKEEPER_TTL
    value: "15s"
  - name: LEASEKEEPER_LOG_FORMAT
    value: "json"
  - name: LEASEKEEPER_POD_LABEL
    value: "true"
  - name: LEASEKEEPER_EVENTS
    value: "true"
readinessProbe:
  httpGet:
    path: /healthz
    port: http
  periodSeconds: 2
livenessProbe:
  httpGet:
    path: /livez
    port: http
resources:
  requests:
    cpu: 10m
    memory: 16Mi
  limits:
    memory: 64Mi
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  readOnlyRootFilesystem: true
  allowPrivilegeEscalation: false
  capabilities:
    drop: [ALL]
volumeMounts:
  - name: tmp
    mountPath: /tmp
"#;

/// A CA, and serving certificates for 127.0.0.1 that it signs.
pub struct Certs {
    pub dir: tempfile::TempDir,
}

impl Certs {
    pub fn new() -> Certs {
        let dir = tempfile::tempdir().expect("cert dir");
        openssl(
            dir.path(),
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "1",
                "-subj",
                "/CN=leasekeeper-injector-ca",
            ],
        );
        std::fs::write(dir.path().join("san.ext"), "subjectAltName=IP:127.0.0.1\n").expect("ext");
        let certs = Certs { dir };
        certs.leaf("serving");
        certs
    }

    /// A new key and certificate `<name>.pem`/`<name>.key`, signed by the CA.
    pub fn leaf(&self, name: &str) -> (PathBuf, PathBuf) {
        let d = self.dir.path();
        let (key, csr, pem) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
        );
        openssl(
            d,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                "/CN=127.0.0.1",
            ],
        );
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "1",
                "-extfile",
                "san.ext",
            ],
        );
        (d.join(pem), d.join(key))
    }

    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.dir.path().join("ca.pem")).expect("ca.pem")
    }

    /// The files the injector serves from (`serving.pem`, `serving.key`).
    pub fn serving(&self) -> (PathBuf, PathBuf) {
        (
            self.dir.path().join("serving.pem"),
            self.dir.path().join("serving.key"),
        )
    }

    /// Puts leaf `name` in place of the serving pair, as the kubelet updates a Secret
    /// volume: each file replaced whole (a rename), never written in place.
    pub fn rotate_to(&self, name: &str) {
        let (pem, key) = self.leaf(name);
        let (serving_pem, serving_key) = self.serving();
        for (from, to) in [(key, serving_key), (pem, serving_pem)] {
            let staged = to.with_extension("staged");
            std::fs::copy(from, &staged).expect("stage");
            std::fs::rename(staged, to).expect("swap");
        }
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A running `leasekeeper inject`.
pub struct Injector {
    pub port: u16,
    pub metrics_port: u16,
    pub log: PathBuf,
    process: ServerProcess,
}

impl Injector {
    /// Starts one on free loopback ports; `extra` are more flags (`--native-sidecars
    /// false`, say). Returns once its `/healthz` answers.
    pub fn start(certs: &Certs, kubeconfig: &str, dir: &Path, extra: &[&str]) -> Injector {
        let port = crate::common::free_port();
        Injector::start_on(port, certs, kubeconfig, dir, extra)
    }

    /// As [`Injector::start`], on the webhook port `port` (a restart keeps it).
    pub fn start_on(
        port: u16,
        certs: &Certs,
        kubeconfig: &str,
        dir: &Path,
        extra: &[&str],
    ) -> Injector {
        let metrics_port = crate::common::free_port();
        let template = dir.join("sidecar.yaml");
        std::fs::write(&template, TEMPLATE).expect("template");
        let (cert, key) = certs.serving();
        let log = dir.join(format!("injector-{port}-{metrics_port}.log"));
        let mut cmd = Command::new(crate::common::leasekeeper_bin());
        cmd.arg("inject")
            .arg(format!("--listen-addr=127.0.0.1:{port}"))
            .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
            .arg("--tls-cert-file")
            .arg(&cert)
            .arg("--tls-key-file")
            .arg(&key)
            .arg("--sidecar-template")
            .arg(&template)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(extra)
            .env("RUST_LOG", "info");
        let process = ServerProcess::start(&mut cmd, Some(&log), "leasekeeper inject");
        let injector = Injector {
            port,
            metrics_port,
            log,
            process,
        };
        wait_serving(
            Duration::from_secs(20),
            || super::http::get(metrics_port, "/healthz").is_some_and(|(c, _)| c == 200),
            || format!("the injector never served: {}", injector.log_text()),
        );
        injector
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The value of an unlabelled metric on `/metrics`.
    pub fn metric(&self, name: &str) -> Option<f64> {
        let (_, text) = super::http::get(self.metrics_port, "/metrics")?;
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    }

    pub fn stop(mut self) {
        self.process.kill();
    }

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}/mutate", self.port)
    }
}

/// The chart's MutatingWebhookConfiguration for a webhook at `url`: Pods created in
/// namespaces labelled `leasekeeper.io/injection: enabled`, never the injector's own
/// nor kube-system, with `failurePolicy` `policy` and a timeout of 5 s.
pub fn webhook_configuration(name: &str, url: &str, ca_pem: &[u8], policy: &str) -> Value {
    let ca_bundle = serde_json::to_value(k8s_openapi::ByteString(ca_pem.to_vec())).expect("base64");
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": WEBHOOK,
            "clientConfig": {"url": url, "caBundle": ca_bundle},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods"], "scope": "Namespaced"}],
            "namespaceSelector": {
                "matchLabels": {"leasekeeper.io/injection": "enabled"},
                "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                      "values": [OWN_NAMESPACE, "kube-system"]}],
            },
            "objectSelector": {},
            "failurePolicy": policy,
            "timeoutSeconds": 5,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "reinvocationPolicy": "Never",
        }],
    })
}

/// Creates (or replaces) a MutatingWebhookConfiguration.
pub fn put_configuration(api: &dyn KubeApi, config: &Value) {
    let base = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations";
    let name = config["metadata"]["name"].as_str().expect("name");
    let _ = api.admin("DELETE", &format!("{base}/{name}"), None);
    let (code, answer) = api.admin("POST", base, Some(config.clone()));
    assert!(
        code < 300,
        "create the webhook configuration: {code} {answer}"
    );
    if api.is_real() {
        // kube-apiserver takes a new configuration in through its informer: well
        // within this on loopback; the fake applies it at once.
        std::thread::sleep(Duration::from_millis(1500));
    }
}

/// Makes namespace `name` exist with these labels (with its `default` ServiceAccount,
/// which the real API server's admission wants for a Pod).
pub fn namespace(api: &dyn KubeApi, name: &str, labels: Value) {
    let (code, answer) = api.admin(
        "POST",
        "/api/v1/namespaces",
        Some(json!({"metadata": {"name": name, "labels": labels}})),
    );
    if code == 409 {
        let patch = json!({"metadata": {"labels": labels}});
        let (code, answer) = api.admin("PATCH", &format!("/api/v1/namespaces/{name}"), Some(patch));
        assert!(code < 300, "label namespace {name}: {code} {answer}");
    } else {
        assert!(code < 300, "create namespace {name}: {code} {answer}");
    }
    if api.is_real() {
        let sa = json!({"metadata": {"name": "default"}});
        let _ = api.admin(
            "POST",
            &format!("/api/v1/namespaces/{name}/serviceaccounts"),
            Some(sa),
        );
    }
}

/// A Pod named `name` in `ns` with these annotations: one container `app` running
/// `/app --serve`.
pub fn pod(name: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web"}, "annotations": annotations},
        "spec": {
            "automountServiceAccountToken": false,
            "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9",
                            "command": ["/app"], "args": ["--serve"]}],
        },
    })
}

/// Creates a Pod as the administrator: (status, the stored Pod or the refusal).
pub fn create_pod(api: &dyn KubeApi, ns: &str, pod: &Value) -> (u16, Value) {
    let (code, answer) = api.admin(
        "POST",
        &format!("/api/v1/namespaces/{ns}/pods"),
        Some(pod.clone()),
    );
    // kube's client answers 200 for any success; the fake says 201.
    (if code < 300 { 201 } else { code }, answer)
}
