//! `gatehouse quota …`: a tenant's limits and their usage.

use clap::Subcommand;
use uuid::Uuid;

use super::{Calls, LimitInput, Per};
use crate::{admin_log::Audit, cli::Outcome, db::Db, tenants::cli::TenantArg};

#[derive(Subcommand)]
pub enum Command {
    /// Add a limit; prints its id.
    Add(Box<AddArgs>),
    /// One limit per line: id, name, per, scope, class, budgets, fail-open.
    List {
        #[command(flatten)]
        t: TenantArg,
    },
    Remove {
        #[command(flatten)]
        t: TenantArg,
        id: Uuid,
    },
    /// The newest ledger windows: limit, subject, kind, start, budget, granted, used, refused.
    Usage {
        #[command(flatten)]
        t: TenantArg,
    },
}

#[derive(clap::Args)]
pub struct AddArgs {
    #[command(flatten)]
    t: TenantArg,
    #[arg(long)]
    name: String,
    /// tenant, token or member.
    #[arg(long, value_parser = ["tenant", "token", "member"])]
    per: String,
    #[arg(long)]
    connector: Option<String>,
    #[arg(long)]
    tool: Option<String>,
    /// read, write or any (default).
    #[arg(long, value_parser = ["read", "write", "any"])]
    class: Option<String>,
    /// Calls per window (with --window-seconds).
    #[arg(long)]
    requests: Option<i32>,
    #[arg(long)]
    window_seconds: Option<i32>,
    #[arg(long)]
    concurrency: Option<i32>,
    #[arg(long)]
    daily: Option<i32>,
    /// Admit calls uncounted when the database cannot lease budget (default: refuse them).
    #[arg(long)]
    fail_open: bool,
}

fn dash(v: Option<impl std::fmt::Display>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

pub async fn run(db: &Db, audit: &Audit, cmd: Command) -> anyhow::Result<Outcome> {
    match cmd {
        Command::Add(args) => {
            let AddArgs { t, name, per, connector, tool, class, requests, window_seconds, concurrency, daily, fail_open } = *args;
            let input = LimitInput {
                name,
                per: Some(Per::parse(&per)?),
                connector,
                tool,
                class: class.as_deref().map(Calls::parse).transpose()?,
                requests,
                window_seconds,
                concurrency,
                daily,
                fail_open,
                version: None,
            };
            let l = super::create(db, t.resolve(db).await?, audit, &input).await?;
            println!("{}", l.id);
        }
        Command::List { t } => {
            for l in super::list(db, t.resolve(db).await?).await? {
                let scope = match (&l.connector, &l.tool) {
                    (Some(c), Some(tool)) => format!("{c}.{tool}"),
                    (Some(c), None) => c.clone(),
                    _ => "*".into(),
                };
                let rate = l.requests.zip(l.window_seconds).map(|(r, w)| format!("{r}/{w}s"));
                println!(
                    "{}\t{}\t{}\t{scope}\t{}\trate={}\tconcurrency={}\tdaily={}\tfail_open={}",
                    l.id,
                    l.name,
                    l.per.as_str(),
                    l.class.as_str(),
                    dash(rate),
                    dash(l.concurrency),
                    dash(l.daily),
                    l.fail_open
                );
            }
        }
        Command::Remove { t, id } => {
            super::delete(db, t.resolve(db).await?, audit, id).await?;
            println!("{id}\tremoved");
        }
        Command::Usage { t } => {
            for u in super::usage(db, t.resolve(db).await?, 100).await? {
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                    u.limit,
                    u.subject,
                    u.kind,
                    u.window_start.to_rfc3339(),
                    u.budget,
                    u.granted,
                    u.used,
                    u.refused
                );
            }
        }
    }
    Ok(Outcome::Ok)
}
