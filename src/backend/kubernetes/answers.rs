//! The API server's answers as plain values, for the cores to decide on: a refused
//! request ([`Refusal`]: its status code, when the API server answered one) and what a
//! watch on the Lease brought ([`Heard`]). The transport ([`super::requests`],
//! [`super::watches`]) turns kube's answers into these.

use k8s_openapi::api::coordination::v1::Lease;

use super::super::BackendError;

/// A request the API server refused (or that did not reach it).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(super) struct Refusal {
    /// The status code of the API server's answer; `None` when it gave none.
    pub(super) code: Option<u16>,
    pub(super) message: String,
}

impl Refusal {
    /// 409: somebody wrote since the resourceVersion we sent (or created it first).
    pub(super) fn conflict(&self) -> bool {
        self.code == Some(409)
    }

    /// 404: the Lease is gone.
    pub(super) fn not_found(&self) -> bool {
        self.code == Some(404)
    }

    /// The store error of the request `op`.
    pub(super) fn into_error(self, op: &'static str) -> BackendError {
        BackendError::Store {
            op,
            message: self.message,
        }
    }
}

/// What a watch on the Lease brought.
#[derive(Clone, Debug, PartialEq)]
pub enum Heard {
    /// Added or modified: the Lease as written.
    Written(Box<Lease>),
    /// Deleted, at this version.
    Deleted(Option<String>),
    /// A bookmark: the watch stands at this version.
    Bookmark(String),
    /// An error event with this status code (410: too old to follow).
    Error(u16),
    /// The stream broke, for this reason.
    Broke(String),
    /// The stream ended (the API server closed it at its timeout, say).
    Ended,
}
