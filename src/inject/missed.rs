//! Pods that asked for the sidecar and run without it: admitted while the webhook was
//! down (`failurePolicy: Ignore`), or left out by its namespace or object selector.
//! A value moved on by what a watch of Pods sees; it tells the I/O around it how many
//! such Pods exist now, how many it has seen in all, and which Pod to record a Warning
//! Event on (once per Pod, by its uid).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::mutate::{asks_for_sidecar, carries_sidecar};

/// The reason of the Warning Event on a missed Pod.
pub const EVENT_REASON: &str = "LeasekeeperNotInjected";
/// Its message.
pub const EVENT_MESSAGE: &str = "this Pod asks for the leasekeeper sidecar (leasekeeper.io/inject: \"true\") and runs without it: it was admitted while the injector's webhook did not answer (failurePolicy Ignore), or the webhook's namespace or object selector leaves it out; delete the Pod to have it made again with the sidecar";

/// The Event's name for the Pod `name` with uid `uid`: the same for the same Pod
/// (so that a second write is refused as existing), a DNS subdomain (at most 253).
pub fn event_name(name: &str, uid: &str) -> String {
    let uid: String = uid
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(16)
        .collect();
    let base: String = name.chars().take(200).collect();
    let base = base.trim_end_matches(['.', '-']);
    format!(
        "{base}.leasekeeper-not-injected.{}",
        uid.to_ascii_lowercase()
    )
}

/// What the watch tells about one Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// Asked for the sidecar, runs without it, and has not finished.
    pub missed: bool,
}

impl PodView {
    /// The view of a Pod object (JSON, as the API serves it).
    pub fn of(pod: &Value) -> PodView {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let finished = matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        );
        PodView {
            namespace: text(&pod["metadata"]["namespace"]),
            name: text(&pod["metadata"]["name"]),
            uid: text(&pod["metadata"]["uid"]),
            missed: asks_for_sidecar(pod) && !carries_sidecar(pod) && !finished,
        }
    }
}

/// A Pod to record the Warning Event on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// The Pods missed so far.
#[derive(Debug, Default)]
pub struct Missed {
    /// (namespace, name) → uid, of the missed Pods that exist now.
    now: BTreeMap<(String, String), String>,
    /// Every missed Pod's uid ever seen (each is counted and noticed once).
    seen: BTreeSet<String>,
}

impl Missed {
    /// A Pod was added or changed: a notice when it is missed and new.
    pub fn observe(&mut self, pod: &PodView) -> Option<Notice> {
        let key = (pod.namespace.clone(), pod.name.clone());
        if !pod.missed {
            self.now.remove(&key);
            return None;
        }
        self.now.insert(key, pod.uid.clone());
        self.seen.insert(pod.uid.clone()).then(|| Notice {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
        })
    }

    /// A Pod was deleted.
    pub fn forget(&mut self, pod: &PodView) {
        self.now.remove(&(pod.namespace.clone(), pod.name.clone()));
    }

    /// A fresh list of every Pod (after a watch ended): Pods gone meanwhile are dropped.
    pub fn relist(&mut self, pods: &[PodView]) -> Vec<Notice> {
        self.now.clear();
        pods.iter().filter_map(|p| self.observe(p)).collect()
    }

    /// Missed Pods that exist now (the gauge).
    pub fn current(&self) -> usize {
        self.now.len()
    }

    /// Missed Pods seen in all (the counter).
    pub fn total(&self) -> usize {
        self.seen.len()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn view(name: &str, uid: &str, annotations: Value, init: Value) -> PodView {
        PodView::of(&json!({
            "metadata": {"namespace": "team", "name": name, "uid": uid, "annotations": annotations},
            "spec": {"containers": [{"name": "app"}], "initContainers": init},
        }))
    }

    fn asked(name: &str, uid: &str) -> PodView {
        view(
            name,
            uid,
            json!({"leasekeeper.io/inject": "true"}),
            json!([]),
        )
    }

    #[test]
    fn the_event_name_is_the_pods_own() {
        let a = event_name("web-7d9f", "0c9a8d74-9cb7-44dd-b98e-09fd62def2f4");
        assert_eq!(a, "web-7d9f.leasekeeper-not-injected.0c9a8d749cb744dd");
        assert_eq!(
            a,
            event_name("web-7d9f", "0c9a8d74-9cb7-44dd-b98e-09fd62def2f4")
        );
        let long = event_name(&"a".repeat(253), "u");
        assert!(long.len() <= 253, "{}", long.len());
    }

    #[test]
    fn a_missed_pod_is_counted_and_noticed_once() {
        let mut m = Missed::default();
        assert!(m.observe(&asked("a", "u1")).is_some());
        assert!(
            m.observe(&asked("a", "u1")).is_none(),
            "a change of the same Pod"
        );
        assert!(m.relist(&[asked("a", "u1")]).is_empty(), "a relist");
        assert_eq!((m.current(), m.total()), (1, 1));
        // Recreated under the same name: a new Pod.
        m.forget(&asked("a", "u1"));
        assert_eq!(m.current(), 0);
        assert!(m.observe(&asked("a", "u2")).is_some());
        assert_eq!((m.current(), m.total()), (1, 2));
        m.relist(&[]);
        assert_eq!((m.current(), m.total()), (0, 2));
    }

    #[test]
    fn only_pods_that_asked_and_lack_the_sidecar_are_missed() {
        let injected = view(
            "b",
            "u3",
            json!({"leasekeeper.io/inject": "true"}),
            json!([{"name": "leasekeeper"}]),
        );
        let not_asked = view("c", "u4", json!({}), json!([]));
        let mut finished = asked("d", "u5");
        assert!(!injected.missed && !not_asked.missed && finished.missed);
        let done = PodView::of(&json!({
            "metadata": {"namespace": "team", "name": "d", "uid": "u5",
                         "annotations": {"leasekeeper.io/inject": "true"}},
            "status": {"phase": "Succeeded"},
        }));
        assert!(!done.missed);
        finished.missed = false;
        let mut m = Missed::default();
        assert!(m.relist(&[injected, not_asked, finished]).is_empty());
        assert_eq!(m.current(), 0);
    }
}
