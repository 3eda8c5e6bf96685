//! `gatehouse connect-link …` and `gatehouse outbox …`: mailed connect links, and the mail
//! waiting for the operator when SMTP is not configured.

use clap::Subcommand;
use uuid::Uuid;

use crate::{admin_log::Audit, cli::Outcome, config::Config, db::Db, ops, tenants::cli::TenantArg};

#[derive(Subcommand)]
pub enum Command {
    /// Mint a link for a connector and an email address, mailed by SMTP when configured, else
    /// left in the outbox. Prints the link's id, its mail's id, and `sent` or `outbox`.
    Create {
        #[command(flatten)]
        t: TenantArg,
        #[arg(long)]
        workspace: String,
        #[arg(long)]
        connector: String,
        #[arg(long)]
        email: String,
        /// Days the link stays valid (default 7, at most 30).
        #[arg(long)]
        ttl_days: Option<i64>,
    },
    /// Outstanding links (or, with --history, every link), one per line: id, status,
    /// connector, email, expires at, used at, account label.
    List {
        #[command(flatten)]
        t: TenantArg,
        #[arg(long)]
        history: bool,
    },
    /// Revoke an outstanding link (idempotent; a used link stays used). Prints its status.
    Revoke {
        #[command(flatten)]
        t: TenantArg,
        id: Uuid,
    },
}

/// Runs a `gatehouse connect-link` command.
pub async fn run(db: &Db, audit: &Audit, config: &Config, cmd: Command) -> anyhow::Result<Outcome> {
    match cmd {
        Command::Create { t, workspace, connector, email, ttl_days } => {
            let tenant = t.load(db).await?;
            let public = config.public_origin();
            // A writer of its own for this one command, flushed before it exits, so an
            // undelivered mail is recorded like the server's.
            let (ops, _writer) = ops::Recorder::start(db.clone());
            let mailer = super::mail::Mailer::from_config(config)?.map(|m| m.with_ops(ops.clone()));
            let params = super::MintParams {
                tenant_slug: &tenant.slug,
                public_url: public,
                workspace: &workspace,
                connector: &connector,
                email: &email,
                ttl_days,
            };
            let ring = crate::vault::slots::require(config.vault_keys.as_ref())?;
            let m = super::mint(db, tenant.id, ring, audit, params, mailer.as_ref()).await?;
            ops.flush().await;
            println!("{}\n{}\n{}", m.link.id, m.mail_id, if m.delivered { "sent" } else { "outbox" });
        }
        Command::List { t, history } => {
            for l in super::list(db, t.resolve(db).await?, history).await? {
                let used = l.used_at.map(|u| u.to_rfc3339()).unwrap_or_else(|| "-".into());
                let label = l.account_label.as_deref().unwrap_or("-");
                println!("{}\t{}\t{}\t{}\t{}\t{used}\t{label}", l.id, l.status, l.connector, l.email, l.expires_at.to_rfc3339());
            }
        }
        Command::Revoke { t, id } => {
            println!("{}", super::revoke(db, t.resolve(db).await?, audit, id).await?.status);
        }
    }
    Ok(Outcome::Ok)
}

#[derive(Subcommand)]
pub enum OutboxCommand {
    /// Undelivered mail (or, with --all, every mail) as JSON lines.
    List {
        #[command(flatten)]
        t: TenantArg,
        #[arg(long)]
        all: bool,
    },
    /// Mark a mail delivered by hand.
    Sent {
        #[command(flatten)]
        t: TenantArg,
        id: Uuid,
    },
}

/// Runs a `gatehouse outbox` command (`sent` exits 3 when no undelivered mail has the id).
pub async fn run_outbox(db: &Db, audit: &Audit, config: &Config, cmd: OutboxCommand) -> anyhow::Result<Outcome> {
    match cmd {
        OutboxCommand::List { t, all } => {
            let ring = crate::vault::slots::require(config.vault_keys.as_ref())?;
            for mail in super::outbox(db, ring, t.resolve(db).await?, all).await? {
                println!("{}", serde_json::to_string(&mail)?);
            }
        }
        OutboxCommand::Sent { t, id } => {
            if !super::mark_sent(db, t.resolve(db).await?, audit, id).await? {
                return Ok(Outcome::Refused);
            }
            println!("sent");
        }
    }
    Ok(Outcome::Ok)
}
