//! The stores, one row each: the cargo feature that brings it, its `--backend` names,
//! its flags' field and its [`Store`]. Everything the settings and the wiring know of
//! a store comes from here: its flags ([`Args`]), its settings ([`BackendSettings`]),
//! its capabilities and how its backends are built. A new store is its own module,
//! its feature, and one row.

use super::store::{BuildContext, BuildError, Capabilities, Serve, SettingsContext, Store};
use crate::settings::{bad, ConfigError};

macro_rules! stores {
    ($($feature:literal [$($name:literal),+] $field:ident: $store:ty => $variant:ident,)+) => {
        /// Every store's own flags.
        #[derive(clap::Args, Debug, Default, Clone)]
        #[group(skip)]
        pub struct Args {
            $(
                #[cfg(feature = $feature)]
                #[command(flatten)]
                pub $field: <$store as Store>::Args,
            )+
        }

        /// Which store holds the lease, with what it needs to reach it.
        #[derive(Clone, Debug)]
        pub enum BackendSettings {
            $(
                #[cfg(feature = $feature)]
                $variant(<$store as Store>::Settings),
            )+
        }

        /// Every `--backend` name, the feature that brings it, and whether this build
        /// has it.
        pub const NAMES: &[(&str, &str, bool)] = &[
            $($(($name, $feature, cfg!(feature = $feature)),)+)+
        ];

        /// What the built-in store named `name` can do.
        pub fn capabilities_of(name: &str) -> Option<Capabilities> {
            $(
                #[cfg(feature = $feature)]
                if [$($name),+].contains(&name) {
                    return Some(<$store as Store>::CAPABILITIES);
                }
            )+
            None
        }

        impl BackendSettings {
            /// The settings of the built-in store named `name`; `None` when no store
            /// of this build has the name.
            fn of(
                args: &Args,
                name: &str,
                cx: &mut SettingsContext,
            ) -> Result<Option<BackendSettings>, ConfigError> {
                $(
                    #[cfg(feature = $feature)]
                    if [$($name),+].contains(&name) {
                        let settings = <$store as Store>::settings(&args.$field, name, cx)?;
                        return Ok(Some(BackendSettings::$variant(settings)));
                    }
                )+
                Ok(None)
            }

            /// The `--backend` name.
            pub fn name(&self) -> &'static str {
                match self {
                    $(
                        #[cfg(feature = $feature)]
                        BackendSettings::$variant(s) => <$store as Store>::name(s),
                    )+
                }
            }

            pub fn capabilities(&self) -> Capabilities {
                match self {
                    $(
                        #[cfg(feature = $feature)]
                        BackendSettings::$variant(_) => <$store as Store>::CAPABILITIES,
                    )+
                }
            }

            /// The store's own refusals of `holders` slots with these settings.
            fn check(&self, holders: u32) -> Result<(), ConfigError> {
                match self {
                    $(
                        #[cfg(feature = $feature)]
                        BackendSettings::$variant(s) => <$store as Store>::check(s, holders),
                    )+
                }
            }

            /// The namespace of the Kubernetes object named after the election that
            /// holds the lease, for a store that keeps it there.
            pub fn lease_namespace(&self) -> Option<&str> {
                match self {
                    $(
                        #[cfg(feature = $feature)]
                        BackendSettings::$variant(s) => <$store as Store>::lease_namespace(s),
                    )+
                }
            }

            /// Builds one backend per slot and hands them to `serve`.
            pub async fn build_and<S: Serve>(
                &self,
                cx: BuildContext,
                serve: S,
            ) -> Result<S::Output, BuildError> {
                match self {
                    $(
                        #[cfg(feature = $feature)]
                        BackendSettings::$variant(s) => <$store as Store>::build_and(s, cx, serve).await,
                    )+
                }
            }
        }
    };
}

stores! {
    "file" ["file"] file: super::file::entry::File => File,
    "redis" ["redis", "redlock"] redis: super::redis::entry::Redis => Redis,
    "etcd" ["etcd"] etcd: super::etcd::entry::Etcd => Etcd,
    "zookeeper" ["zookeeper"] zookeeper: super::zookeeper::entry::Zookeeper => Zookeeper,
    "sql" ["postgres", "mysql"] sql: super::sql::entry::Sql => Sql,
    "kubernetes" ["kubernetes"] lease: super::kubernetes::entry::Kubernetes => Kubernetes,
}

impl Args {
    /// The settings of store `name` (`--backend`), with the store's own checks of
    /// `holders` slots.
    pub fn settings(
        &self,
        name: &str,
        holders: u32,
        cx: &mut SettingsContext,
    ) -> Result<BackendSettings, ConfigError> {
        if let Some(feature) = missing_feature(name) {
            return Err(bad(format!(
                "--backend {name}: this leasekeeper was built without it; build with `cargo build --features {feature}` (the default features have every backend)"
            )));
        }
        let settings = BackendSettings::of(self, name, cx)?.ok_or_else(|| {
            let names: Vec<&str> = NAMES.iter().map(|(n, _, _)| *n).collect();
            bad(format!(
                "--backend {name:?} is unknown; choose one of {}",
                names.join(", ")
            ))
        })?;
        settings.check(holders)?;
        Ok(settings)
    }
}

/// The cargo feature that brings backend `name`, when this build lacks it (`None`
/// for a backend that is built in, and for a name that is no backend).
pub fn missing_feature(name: &str) -> Option<&'static str> {
    missing_feature_in(NAMES, name)
}

/// [`missing_feature`] for a build whose stores `names` lists.
fn missing_feature_in(names: &[(&str, &'static str, bool)], name: &str) -> Option<&'static str> {
    names
        .iter()
        .find(|(n, _, built)| *n == name && !built)
        .map(|(_, feature, _)| *feature)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_has_its_feature() {
        let features: Vec<(&str, &str)> = NAMES.iter().map(|(n, f, _)| (*n, *f)).collect();
        assert_eq!(
            features,
            [
                ("file", "file"),
                ("redis", "redis"),
                ("redlock", "redis"),
                ("etcd", "etcd"),
                ("zookeeper", "zookeeper"),
                ("postgres", "sql"),
                ("mysql", "sql"),
                ("kubernetes", "kubernetes"),
            ]
        );
        // The default build has every backend.
        for (name, _, built) in NAMES {
            assert!(built, "{name}");
            assert_eq!(missing_feature(name), None, "{name}");
        }
        assert_eq!(missing_feature("consul"), None);
    }

    #[test]
    fn a_backend_not_built_in_names_its_feature() {
        let only_file: Vec<_> = NAMES.iter().map(|&(n, f, _)| (n, f, f == "file")).collect();
        for &(name, feature, _) in NAMES {
            let missing = (feature != "file").then_some(feature);
            assert_eq!(missing_feature_in(&only_file, name), missing, "{name}");
        }
        assert_eq!(missing_feature_in(&only_file, "consul"), None);
    }

    /// The table of docs/backends.md says what each store declares.
    #[test]
    fn the_backends_page_shows_what_each_store_declares() {
        let page = include_str!("../../docs/backends.md");
        let yes = |cell: &str| cell.trim().starts_with("yes");
        for (name, _, _) in NAMES {
            let row = format!("| `{name}` | ");
            let line = page
                .lines()
                .find(|l| l.starts_with(&row))
                .unwrap_or_else(|| panic!("docs/backends.md has no row for {name}"));
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").skip(1).collect();
            let c = capabilities_of(name).expect("built in");
            let declared = [c.slots, c.switchover, c.read_write_lock.is_ok(), c.watch];
            let shown: Vec<bool> = cells.iter().map(|cell| yes(cell)).collect();
            assert_eq!(shown, declared, "{name}: {line}");
        }
    }
}
