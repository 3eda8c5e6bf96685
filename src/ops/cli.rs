//! `gatehouse ops …`: platform issues grouped from recorded failures, and their verdicts.

use clap::Subcommand;

use super::Verdict;
use crate::{admin_log::Audit, cli::Outcome, db::Db};

#[derive(Subcommand)]
pub enum Command {
    /// List issues, most recently seen first: status, seen, last seen, fingerprint,
    /// operation/stage/code, last tenant, last message.
    Issues {
        /// new, resolved, ignored or regressed
        #[arg(long)]
        status: Option<String>,
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(i64).range(1..=10_000))]
        limit: i64,
    },
    /// Mark an issue fixed (a later occurrence makes it `regressed`).
    Resolve {
        fingerprint: String,
        /// The version that fixes it.
        #[arg(long)]
        version: Option<String>,
    },
    /// Stop paying attention to an issue (occurrences are still counted).
    Ignore { fingerprint: String },
    /// Put an issue back to `new`.
    Reopen { fingerprint: String },
}

/// Runs a `gatehouse ops` command.
pub async fn run(db: &Db, audit: &Audit, cmd: Command) -> anyhow::Result<Outcome> {
    let (fingerprint, verdict, version) = match cmd {
        Command::Issues { status, limit } => {
            for i in super::issues(db, status.as_deref(), limit).await? {
                let tenant = i.last_tenant_id.map_or_else(|| "-".to_owned(), |t| t.to_string());
                println!(
                    "{}\t{}\t{}\t{}\t{}/{}/{}\t{}\t{}",
                    i.status,
                    i.seen,
                    i.last_seen.to_rfc3339(),
                    i.fingerprint,
                    i.operation,
                    i.stage,
                    i.code,
                    tenant,
                    i.last_message.replace(['\n', '\t'], " ")
                );
            }
            return Ok(Outcome::Ok);
        }
        Command::Resolve { fingerprint, version } => (fingerprint, Verdict::Resolve, version),
        Command::Ignore { fingerprint } => (fingerprint, Verdict::Ignore, None),
        Command::Reopen { fingerprint } => (fingerprint, Verdict::Reopen, None),
    };
    let issue = super::set_verdict(db, audit, &fingerprint, verdict, version.as_deref()).await?;
    println!("{}\t{}\t{}", issue.fingerprint, issue.status, issue.resolved_version.unwrap_or_default());
    Ok(Outcome::Ok)
}
