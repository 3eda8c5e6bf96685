//! How a database error names the operation that failed. Every way into the database
//! ([`Db::serializable`](super::Db::serializable) and its siblings, [`Db::read`](super::Db::read),
//! [`Db::probe`](super::Db::probe), [`Db::on_lane`](super::Db::on_lane)) is `#[track_caller]`:
//! it notes the `file:line` that asked for the work, and when the work ends with a database
//! error it logs that error once, there, inside the caller's spans (tenant, workspace,
//! connector, tool), with the operation, the SQLSTATE and the violated constraint.

use std::{fmt, panic::Location};

use crate::error::Error;

/// Where a transaction or read was asked for: the caller of the database entry point.
#[derive(Clone, Copy, Debug)]
pub(super) struct Operation(&'static Location<'static>);

impl Operation {
    /// The caller of the `#[track_caller]` function this is called in.
    #[track_caller]
    pub(super) fn caller() -> Self {
        Operation(Location::caller())
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.0.file(), self.0.line())
    }
}

/// Logs the database error `operation` ended with, once. A lost connection or a read-only
/// node is the database's state, not the statement's: it is logged at DEBUG here and answered
/// (and logged at WARN) as 503 by [`Error`]'s response, as before. Anything else is a bug or
/// a broken invariant: ERROR, here, where the operation and the spans are known, and nowhere
/// else (the response logs it at DEBUG only). Errors that are not the database's (a client
/// error the work returned, a constraint violation it mapped) are the caller's to report.
pub(super) fn ended(operation: Operation, e: &Error) {
    let Error::Database(db) = e else { return };
    let sqlstate = e.sqlstate();
    let sqlstate = sqlstate.as_deref().unwrap_or("");
    let constraint = e.constraint().unwrap_or("");
    if e.is_database_unavailable() {
        tracing::debug!(%operation, sqlstate, error = %db, "database unavailable");
    } else {
        tracing::error!(%operation, sqlstate, constraint, error = %db, "database operation failed");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Everything a subscriber writes, kept for the test to read.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn capture(work: impl FnOnce()) -> String {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, work);
        let bytes = out.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[track_caller]
    fn entry_point() -> Operation {
        Operation::caller()
    }

    #[test]
    fn the_operation_is_the_entry_points_caller() {
        let line = line!() + 1;
        let at = entry_point();
        assert_eq!(at.to_string(), format!("src/db/report.rs:{line}"));
    }

    #[test]
    fn a_database_error_is_logged_at_error_with_its_operation() {
        let line = line!() + 1;
        let at = entry_point();
        let e = Error::Database(sqlx::Error::RowNotFound);
        let logged = capture(|| {
            let span = tracing::info_span!("call_tool", tenant = "acme", tool = "search");
            let _in = span.enter();
            ended(at, &e);
        });
        assert!(logged.contains("ERROR"), "{logged}");
        assert!(logged.contains(&format!("operation=src/db/report.rs:{line}")), "{logged}");
        assert!(logged.contains("call_tool{tenant=\"acme\" tool=\"search\"}"), "{logged}");
    }

    #[test]
    fn a_lost_connection_is_not_an_error_here_and_other_errors_are_not_logged() {
        let at = entry_point();
        let logged = capture(|| {
            ended(at, &Error::Database(sqlx::Error::PoolTimedOut));
            ended(at, &Error::NotFound { what: "workspace" });
        });
        assert!(!logged.contains("ERROR"), "{logged}");
        assert_eq!(logged.matches("database unavailable").count(), 1, "{logged}");
    }
}
