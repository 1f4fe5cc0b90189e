//! `leasekeeper inject`, the mutating admission webhook, as an API server calls it:
//! the real kube-apiserver when `LK_KUBE_APISERVER` names one (it calls the webhook
//! over TLS on loopback, trusting the configuration's caBundle), else the in-process
//! fake, which calls it the same way (tests/common/servers/fake_kube/admission.rs). Every
//! Pod here is created through the API, as a user or a ReplicaSet creates one.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::eventually;
use common::harness::injector::{
    self, create_pod, namespace, pod, put_configuration, webhook_configuration, Certs, Injector,
};
use common::servers::fake_kube::FakeKube;
use common::servers::kube_server::{self, Flavor, KubeApi};
use serde_json::{json, Value};

const NS: &str = "team";
const CONFIG: &str = "leasekeeper-injector";

/// An API server with the namespace `team` open to injection, an injector serving it,
/// and the chart's webhook configuration (failurePolicy `policy`).
struct Setup {
    api: Box<dyn KubeApi>,
    certs: Certs,
    dir: tempfile::TempDir,
    injector: Option<Injector>,
}

impl Setup {
    fn start(policy: &str, extra: &[&str]) -> Setup {
        Setup::on(kube_server::start(NS, Flavor::GateOff), policy, extra)
    }

    fn on(api: Box<dyn KubeApi>, policy: &str, extra: &[&str]) -> Setup {
        let certs = Certs::new();
        let dir = tempfile::tempdir().expect("dir");
        namespace(
            api.as_ref(),
            NS,
            json!({"leasekeeper.io/injection": "enabled"}),
        );
        let injector = Injector::start(&certs, &api.injector_kubeconfig(), dir.path(), extra);
        let config = webhook_configuration(CONFIG, &injector.url(), &certs.ca_pem(), policy);
        put_configuration(api.as_ref(), &config);
        Setup {
            api,
            certs,
            dir,
            injector: Some(injector),
        }
    }

    fn injector(&self) -> &Injector {
        self.injector.as_ref().expect("the injector runs")
    }

    fn create(&self, name: &str, annotations: Value) -> (u16, Value) {
        create_pod(self.api.as_ref(), NS, &pod(name, annotations))
    }
}

fn asking(extra: &[(&str, &str)]) -> Value {
    let mut a = json!({"leasekeeper.io/inject": "true", "leasekeeper.io/election": "web"});
    for (k, v) in extra {
        a[*k] = json!(v);
    }
    a
}

fn env_value(container: &Value, name: &str) -> Option<String> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)?["value"]
        .as_str()
        .map(str::to_owned)
}

fn named<'a>(list: &'a Value, name: &str) -> Option<&'a Value> {
    list.as_array()?.iter().find(|c| c["name"] == name)
}

#[test]
fn a_pod_that_asks_gets_the_native_sidecar() {
    // `--native-sidecars auto` (the default) reads /version: 1.33, both servers.
    let s = Setup::start("Fail", &[]);
    let (code, stored) = s.create("web-1", asking(&[("leasekeeper.io/ttl", "20s")]));
    assert_eq!(code, 201, "{stored}");
    let sidecar = &stored["spec"]["initContainers"][0];
    assert_eq!(sidecar["name"], "leasekeeper", "{stored}");
    assert_eq!(sidecar["restartPolicy"], "Always");
    assert_eq!(
        env_value(sidecar, "LEASEKEEPER_TTL").as_deref(),
        Some("20s")
    );
    assert_eq!(
        env_value(sidecar, "LEASEKEEPER_ELECTION").as_deref(),
        Some("web")
    );
    assert_eq!(
        env_value(sidecar, "LEASEKEEPER_BACKEND").as_deref(),
        Some("kubernetes")
    );
    assert_eq!(sidecar["readinessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(sidecar["securityContext"]["readOnlyRootFilesystem"], true);
    assert!(
        named(&stored["spec"]["volumes"], "leasekeeper-tmp").is_some(),
        "{stored}"
    );
    assert_eq!(
        stored["metadata"]["labels"]["leasekeeper.io/election"],
        "web"
    );
    assert_eq!(stored["metadata"]["labels"]["app"], "web");
    assert_eq!(
        stored["metadata"]["annotations"]["leasekeeper.io/status"],
        "injected"
    );
    let app = named(&stored["spec"]["containers"], "app").expect("app");
    assert_eq!(app["command"], json!(["/app"]));
    let reviews = "leasekeeper_injector_admission_reviews_total{result=\"injected\"}";
    assert_eq!(s.injector().metric(reviews), Some(1.0));
}

#[test]
fn a_bad_annotation_is_refused_and_the_client_reads_why() {
    let s = Setup::start("Fail", &[]);
    let denied = format!(
        "admission webhook \"{}\" denied the request: ",
        injector::WEBHOOK
    );
    for (name, extra, want) in [
        (
            "bad-ttl",
            &[("leasekeeper.io/ttl", "fast")][..],
            "leasekeeper.io/ttl: --ttl \"fast\" is not a duration",
        ),
        (
            "typo",
            &[("leasekeeper.io/tll", "15s")][..],
            "leasekeeper.io/tll is no setting of leasekeeper",
        ),
        (
            "no-cmd",
            &[("leasekeeper.io/run", "nope")][..],
            "leasekeeper.io/run: this Pod has no container named \"nope\"",
        ),
    ] {
        let (code, answer) = s.create(name, asking(extra));
        assert_eq!(code, 400, "{name}: {answer}");
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(&format!("{denied}{want}")),
            "{name}: {message}"
        );
        let (code, _) = s
            .api
            .admin("GET", &format!("/api/v1/namespaces/{NS}/pods/{name}"), None);
        assert_eq!(code, 404, "{name} was created");
    }
    let (code, answer) = s.create("no-election", json!({"leasekeeper.io/inject": "true"}));
    assert_eq!(code, 400, "{answer}");
    assert!(answer["message"]
        .as_str()
        .is_some_and(|m| m.contains("leasekeeper.io/election is required")));
}

#[test]
fn a_second_pass_changes_nothing() {
    let s = Setup::start("Fail", &[]);
    let (code, first) = s.create("once", asking(&[]));
    assert_eq!(code, 201, "{first}");
    // The same Pod again (as a controller copying an injected Pod would send it).
    let mut again = first.clone();
    again["metadata"] = json!({
        "name": "twice",
        "labels": first["metadata"]["labels"],
        "annotations": first["metadata"]["annotations"],
    });
    again.as_object_mut().expect("pod").remove("status");
    let (code, second) = create_pod(s.api.as_ref(), NS, &again);
    assert_eq!(code, 201, "{second}");
    for field in ["initContainers", "containers", "volumes"] {
        assert_eq!(first["spec"][field], second["spec"][field], "{field}");
    }
    assert_eq!(first["metadata"]["labels"], second["metadata"]["labels"]);
    let unchanged = "leasekeeper_injector_admission_reviews_total{result=\"unchanged\"}";
    assert_eq!(s.injector().metric(unchanged), Some(1.0));
}

#[test]
fn exec_mode_wraps_the_named_container() {
    let s = Setup::start("Fail", &[]);
    let (code, stored) = s.create(
        "exec",
        asking(&[
            ("leasekeeper.io/run", "app"),
            ("leasekeeper.io/kill-grace", "5s"),
        ]),
    );
    assert_eq!(code, 201, "{stored}");
    let app = named(&stored["spec"]["containers"], "app").expect("app");
    assert_eq!(
        app["command"],
        json!([
            "/leasekeeper/bin/leasekeeper",
            "run",
            "--",
            "/app",
            "--serve"
        ])
    );
    assert!(app["args"].is_null(), "{app}");
    assert_eq!(
        env_value(app, "LEASEKEEPER_KILL_GRACE").as_deref(),
        Some("5s")
    );
    assert!(
        named(&app["volumeMounts"], "leasekeeper-bin").is_some(),
        "{app}"
    );
    let copy = &stored["spec"]["initContainers"][0];
    assert_eq!(copy["name"], "leasekeeper-copy");
    assert_eq!(
        copy["args"],
        json!(["inject", "--copy-binary-to", "/leasekeeper/bin"])
    );
    assert!(named(&stored["spec"]["containers"], "leasekeeper").is_none());
    assert!(named(&stored["spec"]["initContainers"], "leasekeeper").is_none());
    // A container without a command in the Pod spec cannot be wrapped.
    let mut bare = pod("bare", asking(&[("leasekeeper.io/run", "app")]));
    bare["spec"]["containers"][0]
        .as_object_mut()
        .expect("app")
        .remove("command");
    let (code, answer) = create_pod(s.api.as_ref(), NS, &bare);
    assert_eq!(code, 400, "{answer}");
    assert!(answer["message"]
        .as_str()
        .is_some_and(|m| m.contains("leasekeeper.io/run: the container \"app\" has no command")));
}

#[test]
fn the_copy_step_copies_the_binary() {
    let dir = tempfile::tempdir().expect("dir");
    let out = std::process::Command::new(common::leasekeeper_bin())
        .args(["inject", "--copy-binary-to"])
        .arg(dir.path())
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let copied = dir.path().join("leasekeeper");
    let version = std::process::Command::new(&copied)
        .arg("--version")
        .output()
        .expect("copied binary");
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("leasekeeper "));
}

#[test]
fn only_the_selected_namespaces_are_injected_and_never_the_injectors_own() {
    let s = Setup::start("Fail", &[]);
    let api = s.api.as_ref();
    // Labelled for injection, but the injector's own: left out, so that a `Fail`
    // policy cannot keep the injector's own Pods from starting.
    namespace(
        api,
        injector::OWN_NAMESPACE,
        json!({"leasekeeper.io/injection": "enabled"}),
    );
    namespace(api, "plain", json!({}));
    for ns in [injector::OWN_NAMESPACE, "plain"] {
        let (code, stored) = create_pod(api, ns, &pod("p", asking(&[])));
        assert_eq!(code, 201, "{ns}: {stored}");
        assert!(stored["spec"]["initContainers"].is_null(), "{ns}: {stored}");
        assert!(stored["metadata"]["annotations"]["leasekeeper.io/status"].is_null());
    }
    let (code, stored) = s.create("p", asking(&[]));
    assert_eq!(code, 201, "{stored}");
    assert_eq!(stored["spec"]["initContainers"][0]["name"], "leasekeeper");
}

#[test]
fn with_the_injector_down_ignore_admits_and_the_watch_tells() {
    let mut s = Setup::start("Ignore", &[]);
    let port = s.injector().port;
    s.injector.take().expect("injector").stop();
    let (code, stored) = s.create("missed", asking(&[]));
    assert_eq!(code, 201, "Ignore admits: {stored}");
    assert!(stored["spec"]["initContainers"].is_null());
    let uid = stored["metadata"]["uid"].as_str().expect("uid").to_owned();
    // The injector comes back: its list of Pods finds the one it missed.
    let kubeconfig = s.api.injector_kubeconfig();
    for round in 0..2 {
        let injector = Injector::start_on(port, &s.certs, &kubeconfig, s.dir.path(), &[]);
        let counted = eventually(Duration::from_secs(20), || {
            (injector.metric("leasekeeper_injector_pods_without_sidecar") == Some(1.0))
                .then_some(())
        });
        assert!(counted.is_some(), "round {round}: {}", injector.log_text());
        assert_eq!(
            injector.metric("leasekeeper_injector_pods_missed_total"),
            Some(1.0)
        );
        let warnings = eventually(Duration::from_secs(10), || {
            let found = missed_events(s.api.as_ref(), &uid);
            (!found.is_empty()).then_some(found)
        })
        .unwrap_or_default();
        assert_eq!(
            warnings.len(),
            1,
            "round {round}: one Event per Pod: {warnings:?}"
        );
        assert_eq!(warnings[0]["type"], "Warning");
        s.injector = Some(injector);
        if round == 0 {
            s.injector.take().expect("injector").stop();
        }
    }
    // The Pod deleted: the gauge falls, the counter stays.
    let (code, _) = s.api.admin(
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/pods/missed"),
        None,
    );
    assert!(code < 300);
    let gone = eventually(Duration::from_secs(10), || {
        (s.injector()
            .metric("leasekeeper_injector_pods_without_sidecar")
            == Some(0.0))
        .then_some(())
    });
    assert!(gone.is_some());
    assert_eq!(
        s.injector()
            .metric("leasekeeper_injector_pods_missed_total"),
        Some(1.0)
    );
}

fn missed_events(api: &dyn KubeApi, uid: &str) -> Vec<Value> {
    let (_, list) = api.admin("GET", &format!("/api/v1/namespaces/{NS}/events"), None);
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["reason"] == "LeasekeeperNotInjected" && e["involvedObject"]["uid"] == uid)
        .cloned()
        .collect()
}

#[test]
fn with_fail_a_webhook_that_does_not_answer_refuses_the_pod() {
    let api = kube_server::start(NS, Flavor::GateOff);
    namespace(
        api.as_ref(),
        NS,
        json!({"leasekeeper.io/injection": "enabled"}),
    );
    let certs = Certs::new();
    // Accepts connections and never says a word: the TLS handshake hangs.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = silent.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in silent.incoming() {
            held.push(conn);
        }
    });
    let url = format!("https://127.0.0.1:{port}/mutate");
    let mut config = webhook_configuration(CONFIG, &url, &certs.ca_pem(), "Fail");
    config["webhooks"][0]["timeoutSeconds"] = json!(2);
    put_configuration(api.as_ref(), &config);
    let started = std::time::Instant::now();
    let (code, answer) = create_pod(api.as_ref(), NS, &pod("slow", asking(&[])));
    assert_eq!(code, 500, "{answer}");
    let message = answer["message"].as_str().unwrap_or_default();
    let want = format!("Internal error occurred: failed calling webhook \"{}\": failed to call webhook: Post \"{url}?timeout=2s\": ", injector::WEBHOOK);
    assert!(message.starts_with(&want), "{message}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    config["webhooks"][0]["failurePolicy"] = json!("Ignore");
    put_configuration(api.as_ref(), &config);
    let (code, answer) = create_pod(api.as_ref(), NS, &pod("slow", asking(&[])));
    assert_eq!(code, 201, "{answer}");
    // Nothing listens at all: refused at once.
    config["webhooks"][0]["clientConfig"]["url"] = json!("https://127.0.0.1:1/mutate");
    config["webhooks"][0]["failurePolicy"] = json!("Fail");
    put_configuration(api.as_ref(), &config);
    let (code, answer) = create_pod(api.as_ref(), NS, &pod("refused", asking(&[])));
    assert_eq!(code, 500, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .is_some_and(|m| m.contains("connect: connection refused")),
        "{answer}"
    );
}

#[test]
fn the_serving_certificate_is_reloaded_without_a_restart() {
    let s = Setup::start("Fail", &[]);
    let port = s.injector().port;
    let before = presented(port, &s.certs.ca_pem());
    assert_eq!(before, Some(der(&s.certs.serving().0)));
    s.certs.rotate_to("rotated");
    let rotated = der(&s.certs.dir.path().join("rotated.pem"));
    let seen = eventually(Duration::from_secs(10), || {
        (presented(port, &s.certs.ca_pem()).as_ref() == Some(&rotated)).then_some(())
    });
    assert!(
        seen.is_some(),
        "the new certificate was never presented: {}",
        s.injector().log_text()
    );
    // The API server still reaches the webhook through the new certificate.
    let (code, stored) = s.create("after-rotation", asking(&[]));
    assert_eq!(code, 201, "{stored}");
    assert_eq!(stored["spec"]["initContainers"][0]["name"], "leasekeeper");
    let ok = "leasekeeper_injector_certificate_reloads_total{result=\"ok\"}";
    assert_eq!(s.injector().metric(ok), Some(1.0));
}

/// The certificate a TLS handshake with 127.0.0.1:`port` presents (DER), trusting `ca`.
fn presented(port: u16, ca: &[u8]) -> Option<Vec<u8>> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(ca).flatten() {
        roots.add(c).ok()?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .ok()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    rt.block_on(async move {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").ok()?;
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .ok()?;
        let (_, session) = tls.get_ref();
        Some(session.peer_certificates()?.first()?.as_ref().to_vec())
    })
}

fn der(pem: &std::path::Path) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::from_pem_file(pem)
        .expect("pem")
        .as_ref()
        .to_vec()
}

#[test]
fn without_native_sidecars_the_sidecar_is_a_container() {
    // The fake's /version says 1.28: `auto` finds no native sidecars.
    let fake = FakeKube::start(NS);
    fake.set_version("1", "28");
    let s = Setup::on(Box::new(fake), "Fail", &[]);
    let (code, stored) = s.create("old", asking(&[]));
    assert_eq!(code, 201, "{stored}");
    assert!(stored["spec"]["initContainers"].is_null(), "{stored}");
    let sidecar = named(&stored["spec"]["containers"], "leasekeeper").expect("sidecar");
    assert!(sidecar["restartPolicy"].is_null());
    // And when told so, on any server.
    let s = Setup::start("Fail", &["--native-sidecars", "false"]);
    let (code, stored) = s.create("told", asking(&[]));
    assert_eq!(code, 201, "{stored}");
    assert!(
        named(&stored["spec"]["containers"], "leasekeeper").is_some(),
        "{stored}"
    );
}

#[test]
fn selectors_choose_the_pods_the_webhook_sees() {
    // objectSelector and namespaceSelector with every operator; one webhook whose
    // objectSelector a Pod does not match is not called at all.
    let s = Setup::start("Fail", &[]);
    let api = s.api.as_ref();
    let mut config = webhook_configuration(CONFIG, &s.injector().url(), &s.certs.ca_pem(), "Fail");
    config["webhooks"][0]["objectSelector"] = json!({
        "matchExpressions": [
            {"key": "app", "operator": "In", "values": ["web", "api"]},
            {"key": "skip-injection", "operator": "DoesNotExist"},
        ]
    });
    config["webhooks"][0]["namespaceSelector"]["matchExpressions"]
        .as_array_mut()
        .expect("expressions")
        .push(json!({"key": "leasekeeper.io/injection", "operator": "Exists"}));
    put_configuration(api, &config);
    let (_, injected) = s.create("selected", asking(&[]));
    assert_eq!(
        injected["spec"]["initContainers"][0]["name"], "leasekeeper",
        "{injected}"
    );
    let mut skipped = pod("skipped", asking(&[]));
    skipped["metadata"]["labels"]["skip-injection"] = json!("yes");
    let (code, stored) = create_pod(api, NS, &skipped);
    assert_eq!(code, 201);
    assert!(stored["spec"]["initContainers"].is_null(), "{stored}");
    let mut other = pod("other-app", asking(&[]));
    other["metadata"]["labels"]["app"] = json!("batch");
    let (_, stored) = create_pod(api, NS, &other);
    assert!(stored["spec"]["initContainers"].is_null(), "{stored}");
    assert_eq!(
        s.injector()
            .metric("leasekeeper_injector_admission_reviews_total{result=\"unchanged\"}"),
        Some(0.0),
        "a webhook was called for a Pod its selectors leave out"
    );
}

#[test]
fn bad_flags_of_inject_exit_2_with_one_line() {
    let certs = Certs::new();
    let (cert, key) = certs.serving();
    let dir = tempfile::tempdir().expect("dir");
    let template = dir.path().join("t.yaml");
    std::fs::write(&template, injector::TEMPLATE).expect("template");
    let (c, k, t) = (
        cert.to_str().expect("utf8"),
        key.to_str().expect("utf8"),
        template.to_str().expect("utf8"),
    );
    let ok = [
        "--tls-cert-file",
        c,
        "--tls-key-file",
        k,
        "--sidecar-template",
        t,
    ];
    for (extra, want) in [
        (&[][..], "--tls-cert-file is required"),
        (&["--tls-cert-file", c][..], "--tls-key-file is required"),
        (
            &["--tls-cert-file", c, "--tls-key-file", c][..],
            "--tls-cert-file",
        ),
        (
            &["--tls-cert-file", c, "--tls-key-file", k][..],
            "--sidecar-template is required",
        ),
        (
            &[&ok[..], &["--native-sidecars", "maybe"]].concat()[..],
            "--native-sidecars \"maybe\" is unknown",
        ),
        (
            &[&ok[..], &["--listen-addr", "nowhere"]].concat()[..],
            "--listen-addr \"nowhere\" is not an address",
        ),
        (
            &[&ok[..], &["--watch-missed", "sometimes"]].concat()[..],
            "--watch-missed \"sometimes\" is not true or false",
        ),
        (
            &[&ok[..], &["--no-such-flag"]].concat()[..],
            "--no-such-flag",
        ),
        (
            &[
                "--tls-cert-file",
                c,
                "--tls-key-file",
                k,
                "--sidecar-template",
                c,
            ][..],
            "--sidecar-template",
        ),
    ] {
        let out = std::process::Command::new(common::leasekeeper_bin())
            .arg("inject")
            .args(extra)
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{extra:?}: {err}");
        assert!(err.contains(want), "{extra:?}: {err}");
        assert!(!err.contains("panicked"), "{extra:?}: {err}");
    }
}
