//! The file backend as a store of `backend::stores`.

use std::path::PathBuf;

use super::{check_lock_path, slot_path, Args, FileBackend};
use crate::backend::store::{
    BuildContext, BuildError, Capabilities, Serve, SettingsContext, Store,
};
use crate::settings::ConfigError;

pub struct File;

impl Store for File {
    type Args = Args;
    /// The lock file of slot 0.
    type Settings = PathBuf;

    fn settings(
        args: &Args,
        _name: &str,
        cx: &mut SettingsContext,
    ) -> Result<PathBuf, ConfigError> {
        Ok(args.path(cx.election))
    }

    fn name(_: &PathBuf) -> &'static str {
        "file"
    }

    const CAPABILITIES: Capabilities = Capabilities::ALL;

    async fn build_and<S: Serve>(
        path: &PathBuf,
        cx: BuildContext,
        serve: S,
    ) -> Result<S::Output, BuildError> {
        for slot in 0..cx.holders {
            check_lock_path(&slot_path(path, slot))
                .map_err(|e| BuildError::Input(e.to_string()))?;
        }
        let slots = cx.slots(|lease, i| FileBackend::new(slot_path(path, i), lease));
        Ok(serve.serve(slots).await)
    }
}
