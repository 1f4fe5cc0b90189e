//! PostgreSQL and MySQL/MariaDB as a store of `backend::stores`: the same flags, two
//! names.

use std::future::Future;

use super::mysql::MysqlBackend;
use super::postgres::PostgresBackend;
use super::{Args, Dialect, SqlSettings, TableError};
use crate::backend::store::{
    BuildContext, BuildError, Capabilities, Serve, SettingsContext, Store,
};
use crate::settings::ConfigError;

pub struct Sql;

impl Store for Sql {
    type Args = Args;
    type Settings = Box<SqlSettings>;

    fn settings(
        args: &Args,
        name: &str,
        _: &mut SettingsContext,
    ) -> Result<Self::Settings, ConfigError> {
        let dialect = match name {
            "mysql" => Dialect::Mysql,
            _ => Dialect::Postgres,
        };
        Ok(Box::new(args.settings(dialect)?))
    }

    fn name(settings: &Self::Settings) -> &'static str {
        settings.dialect().name()
    }

    const CAPABILITIES: Capabilities = Capabilities::ALL;

    async fn build_and<S: Serve>(
        settings: &Self::Settings,
        cx: BuildContext,
        serve: S,
    ) -> Result<S::Output, BuildError> {
        Ok(match settings.dialect() {
            Dialect::Postgres => {
                let url = "--postgres-url";
                let mut slots = cx.try_slots(url, |lease| PostgresBackend::new(settings, lease))?;
                check_table(slots[0].prepare(), &cx).await?;
                serve.serve(slots).await
            }
            Dialect::Mysql => {
                let url = "--mysql-url";
                let mut slots = cx.try_slots(url, |lease| MysqlBackend::new(settings, lease))?;
                check_table(slots[0].prepare(), &cx).await?;
                serve.serve(slots).await
            }
        })
    }
}

/// The lease table at start: a user who may not create a missing table is bad input;
/// a database that cannot be reached yet is not (the elector retries, and tries to
/// create the table again then). A stop (SIGTERM) ends the wait at once.
async fn check_table(
    prepared: impl Future<Output = Result<(), TableError>>,
    cx: &BuildContext,
) -> Result<(), BuildError> {
    let mut stop = cx.stop.clone();
    let checked = tokio::time::timeout(cx.timing.backend_timeout, prepared);
    let checked = tokio::select! {
        checked = checked => checked,
        _ = stop.wait_for(|stopped| *stopped) => return Ok(()),
    };
    match checked {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e @ TableError::NotAllowed { .. })) => Err(BuildError::Input(e.to_string())),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "could not reach the database or prepare the lease table yet; retrying");
            Ok(())
        }
        Err(_) => {
            tracing::warn!("the database did not answer in time; retrying");
            Ok(())
        }
    }
}
