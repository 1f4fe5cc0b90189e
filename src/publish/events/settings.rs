//! The Events' flags and what the Events are about (no API client here: the flags
//! stay and are refused by name in a build without the `kubernetes` feature).

use crate::settings::{parse_bool, ConfigError};

/// The Events' flags.
#[derive(clap::Args, Debug, Default, Clone)]
#[group(skip)]
#[command(next_help_heading = "Kubernetes Events")]
pub struct Args {
    /// Record Events on leadership changes [default: on for a Lease or in a Pod].
    #[arg(long, value_name = "BOOL", env = "LEASEKEEPER_EVENTS", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub events: Option<String>,
}

impl Args {
    /// `Some(choice)` when set, `None` for the default.
    pub fn wanted(&self) -> Result<Option<bool>, ConfigError> {
        self.events
            .as_deref()
            .map(|raw| parse_bool("--events", Some(raw)))
            .transpose()
    }
}

/// What the Events are about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    Lease { name: String, namespace: String },
    Pod { name: String, namespace: String },
}

impl Subject {
    pub(crate) fn namespace(&self) -> &str {
        match self {
            Subject::Lease { namespace, .. } | Subject::Pod { namespace, .. } => namespace,
        }
    }

    pub(crate) fn name(&self) -> &str {
        match self {
            Subject::Lease { name, .. } | Subject::Pod { name, .. } => name,
        }
    }
}
