//! etcd as a store of `backend::stores`.

use super::{Args, EtcdBackend, EtcdSettings};
use crate::backend::store::{
    BuildContext, BuildError, Capabilities, Serve, SettingsContext, Store,
};
use crate::settings::ConfigError;

pub struct Etcd;

impl Store for Etcd {
    type Args = Args;
    type Settings = Box<EtcdSettings>;

    fn settings(
        args: &Args,
        _name: &str,
        _: &mut SettingsContext,
    ) -> Result<Self::Settings, ConfigError> {
        Ok(Box::new(args.settings()?))
    }

    fn name(_: &Self::Settings) -> &'static str {
        "etcd"
    }

    const CAPABILITIES: Capabilities = Capabilities::ALL;

    async fn build_and<S: Serve>(
        settings: &Self::Settings,
        cx: BuildContext,
        serve: S,
    ) -> Result<S::Output, BuildError> {
        let slots = cx.slots(|lease, _| EtcdBackend::new(settings, lease));
        Ok(serve.serve(slots).await)
    }
}
