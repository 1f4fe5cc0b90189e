//! The sidecar template: ONE container object, the chart's sidecar exactly as the
//! chart renders it for its own Deployment (image, pull policy, ports, the downward-API
//! and `LEASEKEEPER_*` environment, probes, resources, security context, the `tmp`
//! mount). The injector adds to it and never invents probes or resources.

use k8s_openapi::api::core::v1::Container;
use serde_json::Value;

use crate::settings::{bad, first_line, ConfigError};

/// The name of the injected container (and of the template's).
pub const CONTAINER: &str = "leasekeeper";

/// A checked sidecar template.
#[derive(Clone, Debug)]
pub struct Template {
    /// The container as JSON, as it goes into a Pod (less `restartPolicy`, which the
    /// injector sets or drops itself).
    pub container: Value,
    /// Its image, for exec mode's copy step.
    pub image: String,
}

impl Template {
    /// Reads `--sidecar-template`'s YAML.
    pub fn from_yaml(setting: &str, text: &str) -> Result<Template, ConfigError> {
        let container: Container = serde_yaml_ng::from_str(text).map_err(|e| {
            bad(format!(
                "{setting}: not a container: {}",
                first_line(&e.to_string())
            ))
        })?;
        if container.name != CONTAINER {
            return Err(bad(format!(
                "{setting}: the container is named {:?}; the injected sidecar must be named {CONTAINER:?}",
                container.name
            )));
        }
        let image = container
            .image
            .clone()
            .filter(|i| !i.trim().is_empty())
            .ok_or_else(|| bad(format!("{setting}: the container has no image")))?;
        let mut container =
            serde_json::to_value(&container).map_err(|e| bad(format!("{setting}: {e}")))?;
        if let Some(fields) = container.as_object_mut() {
            fields.remove("restartPolicy");
        }
        Ok(Template { container, image })
    }

    /// Reads `--sidecar-template` from its file.
    pub fn read(setting: &str, path: &std::path::Path) -> Result<Template, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| bad(format!("{setting} {}: cannot read it: {e}", path.display())))?;
        Template::from_yaml(&format!("{setting} {}", path.display()), &text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_is_one_container_named_leasekeeper() {
        let t = Template::from_yaml(
            "--t",
            "name: leasekeeper\nimage: lk:1\nrestartPolicy: Always\nenv:\n- name: LEASEKEEPER_TTL\n  value: 15s\n- name: POD_NAME\n  valueFrom:\n    fieldRef:\n      fieldPath: metadata.name\n",
        )
        .expect("valid");
        assert_eq!(t.image, "lk:1");
        assert_eq!(t.container["env"].as_array().map(Vec::len), Some(2));
        assert!(t.container.get("restartPolicy").is_none());
        for (yaml, want) in [
            ("name: other\nimage: x\n", "must be named \"leasekeeper\""),
            ("name: leasekeeper\n", "no image"),
            ("- a\n", "--t: not a container"),
        ] {
            let err = Template::from_yaml("--t", yaml)
                .expect_err(yaml)
                .to_string();
            assert!(err.contains(want), "{yaml:?}: {err}");
        }
    }
}
