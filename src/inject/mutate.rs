//! The decision for one Pod: unchanged, a JSONPatch that adds the sidecar, or a
//! refusal. The Pod is the JSON the API server sent (fields this build does not know
//! stay as they are: the patch names only what it adds or replaces).
//!
//! The sidecar is the template's container with the annotations' settings in its
//! environment: a native sidecar (first init container, `restartPolicy: Always`) or,
//! without native sidecars, the last container. In exec mode (`leasekeeper.io/run`)
//! there is no sidecar container: an init container copies the binary into an
//! emptyDir, and the named container's command becomes
//! `leasekeeper run -- <command> <args>`.

use std::ffi::OsString;

use serde_json::{json, Value};

use super::annotations::{self, Ask, Flag, Refusal, Wish, ELECTION, INJECTED, RUN, STATUS};
use super::check::{container_env, set_annotated, sidecar_settings};
use super::template::{Template, CONTAINER};
use crate::config::Settings;

/// Exec mode's init container, which copies the binary.
pub const COPY_CONTAINER: &str = "leasekeeper-copy";
/// Exec mode's volume for the binary, and where it is mounted.
pub const BIN_VOLUME: &str = "leasekeeper-bin";
pub const BIN_DIR: &str = "/leasekeeper/bin";
/// The sidecar's scratch volume (the template's `tmp` mount).
pub const TMP_VOLUME: &str = "leasekeeper-tmp";
/// The copy step's arguments to the image's entrypoint (the leasekeeper binary).
pub const COPY_FLAG: &str = "--copy-binary-to";

/// What to answer for one Pod.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Allowed as it is, with warnings for the client.
    Unchanged { warnings: Vec<String> },
    /// Allowed with these RFC 6902 operations, applied to the Pod as sent.
    Patch { ops: Vec<Value> },
    /// Refused (status 400) with this message.
    Refused(Refusal),
}

/// The injector's fixed inputs: the template, the native-sidecar switch and the
/// sidecar's flags.
#[derive(Clone, Debug)]
pub struct Injector {
    template: Template,
    native: bool,
    flags: Vec<Flag>,
}

/// The decision for `pod` (an object of kind Pod, as JSON).
pub fn decide(pod: &Value, injector: &Injector) -> Decision {
    injector.decide(pod)
}

impl Injector {
    pub fn new(template: Template, native: bool) -> Injector {
        Injector {
            template,
            native,
            flags: annotations::sidecar_flags(),
        }
    }

    pub fn native(&self) -> bool {
        self.native
    }

    pub fn decide(&self, pod: &Value) -> Decision {
        let asked = annotations::read(&string_map(&pod["metadata"]["annotations"]), &self.flags);
        let wish = match asked {
            Ok(Ask::Nothing { warnings }) => return Decision::Unchanged { warnings },
            Ok(Ask::Inject(wish)) => wish,
            Err(refusal) => return Decision::Refused(refusal),
        };
        if carries_sidecar(pod) {
            return Decision::Unchanged {
                warnings: Vec::new(),
            };
        }
        match self.plan(pod, &wish) {
            Ok(ops) => Decision::Patch { ops },
            Err(refusal) => Decision::Refused(refusal),
        }
    }

    /// The operations that add the sidecar, once its settings passed.
    fn plan(&self, pod: &Value, wish: &Wish) -> Result<Vec<Value>, Refusal> {
        let mut ops = Vec::new();
        let settings = match &wish.run {
            Some(name) => {
                let (index, app) = self.wrapped(pod, name, wish)?;
                let settings = self.settings_of(pod, &app, wish)?;
                ops.push(json!({"op": "replace", "path": format!("/spec/containers/{index}"), "value": app}));
                ops.push(add_first(pod, "initContainers", self.copy_container()));
                ops.extend(add_volumes(pod, &[empty_dir(BIN_VOLUME)]));
                settings
            }
            None => {
                let (sidecar, volumes) = self.sidecar(pod, wish)?;
                let settings = self.settings_of(pod, &sidecar, wish)?;
                let sidecar = with_http_port(sidecar, &settings);
                ops.push(match self.native {
                    true => add_first(pod, "initContainers", sidecar),
                    false => add_last(pod, "containers", sidecar),
                });
                ops.extend(add_volumes(pod, &volumes));
                settings
            }
        };
        ops.extend(election_label(pod, &settings.election)?);
        ops.push(add_entry(pod, "annotations", STATUS, INJECTED));
        Ok(ops)
    }

    /// The settings the container's environment gives the sidecar (with the command
    /// it wraps in exec mode).
    fn settings_of(
        &self,
        pod: &Value,
        container: &Value,
        wish: &Wish,
    ) -> Result<Settings, Refusal> {
        let env = container["env"].as_array().cloned().unwrap_or_default();
        let cmd = container["command"].as_array().map(|c| {
            c.iter()
                .skip_while(|w| w.as_str() != Some("--"))
                .skip(1)
                .filter_map(Value::as_str)
                .map(OsString::from)
                .collect()
        });
        sidecar_settings(&container_env(&env, pod), wish, &self.flags, cmd)
    }

    /// The sidecar container, and the volumes it needs that the Pod lacks.
    fn sidecar(&self, pod: &Value, wish: &Wish) -> Result<(Value, Vec<Value>), Refusal> {
        let mut sidecar = self.template.container.clone();
        let mut env = sidecar["env"].as_array().cloned().unwrap_or_default();
        set_annotated(&mut env, wish, &self.flags);
        sidecar["env"] = Value::Array(env);
        if self.native {
            sidecar["restartPolicy"] = json!("Always");
        }
        let mut volumes = Vec::new();
        for mount in sidecar["volumeMounts"].as_array_mut().into_iter().flatten() {
            let name = mount["name"].as_str().unwrap_or_default().to_owned();
            if name == "tmp" {
                // The sidecar's scratch space, its own: the app's `tmp` is the app's.
                mount["name"] = json!(TMP_VOLUME);
                if !has_volume(pod, TMP_VOLUME) {
                    volumes.push(empty_dir(TMP_VOLUME));
                }
            } else if !has_volume(pod, &name) {
                return Err(Refusal(format!(
                    "{}: the sidecar template mounts the volume {name:?}, which this Pod does not have; add it to the Pod",
                    annotations::INJECT
                )));
            }
        }
        Ok((sidecar, volumes))
    }

    /// Exec mode: the named container with its command wrapped, the template's
    /// environment added, and the binary's volume mounted; with its index.
    fn wrapped(&self, pod: &Value, name: &str, wish: &Wish) -> Result<(usize, Value), Refusal> {
        let containers = pod["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let (index, mut app) = containers
            .into_iter()
            .enumerate()
            .find(|(_, c)| c["name"] == name)
            .ok_or_else(|| Refusal(format!("{RUN}: this Pod has no container named {name:?}")))?;
        let Some(command) = app["command"].as_array().filter(|c| !c.is_empty()).cloned() else {
            return Err(Refusal(format!(
                "{RUN}: the container {name:?} has no command in the Pod spec, and the webhook cannot see its image's entrypoint; give its command (and args) in the Pod spec"
            )));
        };
        let args = app["args"].as_array().cloned().unwrap_or_default();
        let mut line = vec![
            json!(format!("{BIN_DIR}/leasekeeper")),
            json!("run"),
            json!("--"),
        ];
        line.extend(command);
        line.extend(args);
        let fields = app
            .as_object_mut()
            .ok_or_else(|| Refusal(format!("{RUN}: {name:?} is not a container")))?;
        fields.insert("command".to_owned(), Value::Array(line));
        fields.remove("args");
        let mut env = app["env"].as_array().cloned().unwrap_or_default();
        for var in self.template.container["env"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if !env.iter().any(|e| e["name"] == var["name"]) {
                env.push(var.clone());
            }
        }
        set_annotated(&mut env, wish, &self.flags);
        app["env"] = Value::Array(env);
        let mut mounts = app["volumeMounts"].as_array().cloned().unwrap_or_default();
        mounts.push(json!({"name": BIN_VOLUME, "mountPath": BIN_DIR, "readOnly": true}));
        app["volumeMounts"] = Value::Array(mounts);
        Ok((index, app))
    }

    /// Exec mode's init container: the template's image copies its own binary into
    /// the shared emptyDir (the image has no shell and no `cp`).
    fn copy_container(&self) -> Value {
        let t = &self.template.container;
        let mut copy = json!({
            "name": COPY_CONTAINER,
            "image": self.template.image,
            "args": ["inject", COPY_FLAG, BIN_DIR],
            "volumeMounts": [{"name": BIN_VOLUME, "mountPath": BIN_DIR}],
        });
        for field in ["command", "imagePullPolicy", "resources", "securityContext"] {
            if let Some(v) = t.get(field) {
                copy[field] = v.clone();
            }
        }
        copy
    }
}

/// Whether the Pod carries the sidecar already (or was injected before).
pub fn carries_sidecar(pod: &Value) -> bool {
    let named = |list: &str, name: &str| {
        pod["spec"][list]
            .as_array()
            .is_some_and(|l| l.iter().any(|c| c["name"] == name))
    };
    pod["metadata"]["annotations"][STATUS].is_string()
        || named("containers", CONTAINER)
        || named("initContainers", CONTAINER)
        || named("initContainers", COPY_CONTAINER)
}

/// Whether the Pod asks for the sidecar (`leasekeeper.io/inject: "true"`).
pub fn asks_for_sidecar(pod: &Value) -> bool {
    pod["metadata"]["annotations"][annotations::INJECT] == "true"
}

/// The port named `http` follows `--http-addr` (the probes name the port).
fn with_http_port(mut sidecar: Value, settings: &Settings) -> Value {
    let Some(addr) = settings.http.addr else {
        return sidecar;
    };
    for port in sidecar["ports"].as_array_mut().into_iter().flatten() {
        if port["name"] == "http" {
            port["containerPort"] = json!(addr.port());
        }
    }
    sidecar
}

/// The label `leasekeeper.io/election: <election>` (DESIGN §4), unless the Pod has it.
fn election_label(pod: &Value, election: &str) -> Result<Option<Value>, Refusal> {
    if election.len() > 63 {
        return Err(Refusal(format!(
            "{ELECTION}: {election:?} is longer than 63 characters, the most a label value holds; every candidate Pod carries it as the label {ELECTION}"
        )));
    }
    match pod["metadata"]["labels"][ELECTION].as_str() {
        Some(label) if label == election => Ok(None),
        Some(label) => Err(Refusal(format!(
            "{ELECTION}: the Pod's label {ELECTION} is {label:?} and its settings name the election {election:?}; make them the same, or leave the label out"
        ))),
        None => Ok(Some(add_entry(pod, "labels", ELECTION, election))),
    }
}

/// Adds `key: value` to `metadata.<map>` (the map itself when the Pod has none).
fn add_entry(pod: &Value, map: &str, key: &str, value: &str) -> Value {
    if pod["metadata"][map].is_object() {
        json!({"op": "add", "path": format!("/metadata/{map}/{}", escape(key)), "value": value})
    } else {
        json!({"op": "add", "path": format!("/metadata/{map}"), "value": {key: value}})
    }
}

/// Inserts `item` first into `spec.<list>` (the list itself when the Pod has none).
fn add_first(pod: &Value, list: &str, item: Value) -> Value {
    if pod["spec"][list].is_array() {
        json!({"op": "add", "path": format!("/spec/{list}/0"), "value": item})
    } else {
        json!({"op": "add", "path": format!("/spec/{list}"), "value": [item]})
    }
}

/// Appends `item` to `spec.<list>` (the list itself when the Pod has none).
fn add_last(pod: &Value, list: &str, item: Value) -> Value {
    if pod["spec"][list].is_array() {
        json!({"op": "add", "path": format!("/spec/{list}/-"), "value": item})
    } else {
        json!({"op": "add", "path": format!("/spec/{list}"), "value": [item]})
    }
}

fn add_volumes(pod: &Value, volumes: &[Value]) -> Vec<Value> {
    if volumes.is_empty() {
        return Vec::new();
    }
    if pod["spec"]["volumes"].is_array() {
        volumes
            .iter()
            .map(|v| json!({"op": "add", "path": "/spec/volumes/-", "value": v}))
            .collect()
    } else {
        vec![json!({"op": "add", "path": "/spec/volumes", "value": volumes})]
    }
}

fn has_volume(pod: &Value, name: &str) -> bool {
    pod["spec"]["volumes"]
        .as_array()
        .is_some_and(|v| v.iter().any(|v| v["name"] == name))
}

fn empty_dir(name: &str) -> Value {
    json!({"name": name, "emptyDir": {}})
}

/// A JSON Pointer token (RFC 6901): `~` as `~0`, `/` as `~1`.
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// A JSON object of strings as a map (other values left out).
fn string_map(v: &Value) -> std::collections::BTreeMap<String, String> {
    v.as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect()
}

#[cfg(test)]
mod tests;
