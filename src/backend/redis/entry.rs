//! Redis on one server and Redlock over several as a store of `backend::stores`: the
//! same flags (`--redis-url`, repeated for Redlock), two names. On one server every
//! candidate, with a `--mode` or not, is a [`RedisBackend`].

use super::{Args, RedisBackend, RedisSettings};
use crate::backend::redlock::{self, RedlockBackend};
use crate::backend::store::{
    BuildContext, BuildError, Capabilities, Serve, SettingsContext, Store,
};
use crate::settings::ConfigError;

pub struct Redis;

/// One Redis server, or the Redlock nodes.
#[derive(Clone, Debug)]
pub enum RedisStore {
    Single(Box<RedisSettings>),
    Redlock(Vec<RedisSettings>),
}

impl Store for Redis {
    type Args = Args;
    type Settings = RedisStore;

    fn settings(
        args: &Args,
        name: &str,
        cx: &mut SettingsContext,
    ) -> Result<RedisStore, ConfigError> {
        if name == "redlock" {
            let (nodes, warnings) = redlock::node_settings(args)?;
            cx.warnings.extend(warnings);
            return Ok(RedisStore::Redlock(nodes));
        }
        Ok(RedisStore::Single(Box::new(args.single()?)))
    }

    fn name(settings: &RedisStore) -> &'static str {
        match settings {
            RedisStore::Single(_) => "redis",
            RedisStore::Redlock(_) => "redlock",
        }
    }

    const CAPABILITIES: Capabilities = Capabilities::ALL;

    async fn build_and<S: Serve>(
        settings: &RedisStore,
        cx: BuildContext,
        serve: S,
    ) -> Result<S::Output, BuildError> {
        const URL: &str = "--redis-url";
        Ok(match settings {
            RedisStore::Single(redis) => {
                let slots = cx.try_slots(URL, |lease| RedisBackend::new(redis, lease))?;
                serve.serve(slots).await
            }
            RedisStore::Redlock(nodes) => {
                let slots = cx.try_slots(URL, |lease| RedlockBackend::new(nodes, lease))?;
                serve.serve(slots).await
            }
        })
    }
}
