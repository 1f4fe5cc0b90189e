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
                check_table(slots[0].store_mut().prepare(), &cx).await?;
                serve.serve(slots).await
            }
            Dialect::Mysql => {
                let url = "--mysql-url";
                let mut slots = cx.try_slots(url, |lease| MysqlBackend::new(settings, lease))?;
                check_table(slots[0].store_mut().prepare(), &cx).await?;
                serve.serve(slots).await
            }
        })
    }
}

/// The lease table at start (see [`table_checked`]). A stop (SIGTERM) ends the wait
/// at once.
async fn check_table(
    prepared: impl Future<Output = Result<(), TableError>>,
    cx: &BuildContext,
) -> Result<(), BuildError> {
    let mut stop = cx.stop.clone();
    let checked = tokio::time::timeout(cx.timing.backend_timeout, prepared);
    tokio::select! {
        checked = checked => table_checked(checked.ok()),
        _ = stop.wait_for(|stopped| *stopped) => Ok(()),
    }
}

/// What the lease table's check at start (`None`: the database did not answer in
/// time) means: a user who may not create a missing table is bad input; a database
/// that cannot be reached yet is not (the elector retries, and tries to create the
/// table again then).
fn table_checked(checked: Option<Result<(), TableError>>) -> Result<(), BuildError> {
    match checked {
        Some(Ok(())) => Ok(()),
        Some(Err(e @ TableError::NotAllowed { .. })) => Err(BuildError::Input(e.to_string())),
        Some(Err(e)) => {
            tracing::warn!(error = %e, "could not reach the database or prepare the lease table yet; retrying");
            Ok(())
        }
        None => {
            tracing::warn!("the database did not answer in time; retrying");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendError;

    /// Only a user who may not create the table stops the start; an unreachable or
    /// slow database is retried.
    #[test]
    fn only_a_refused_table_stops_the_start() {
        let refused = TableError::NotAllowed {
            table: "t".to_owned(),
            user: "u".to_owned(),
            detail: "denied".to_owned(),
        };
        let down = TableError::Backend(BackendError::Store {
            op: "prepare",
            message: "refused".to_owned(),
        });
        assert!(matches!(
            table_checked(Some(Err(refused))),
            Err(BuildError::Input(_))
        ));
        assert!(table_checked(Some(Err(down))).is_ok());
        assert!(table_checked(None).is_ok());
        assert!(table_checked(Some(Ok(()))).is_ok());
    }
}
