//! `gatehouse tool-pin list | approve`: a workspace's pinned tool definitions, and approving a
//! quarantined change by the digest reviewed.

use clap::Subcommand;

use crate::{admin_log::Audit, cli::Outcome, db::Db, workspaces::cli::WorkspaceArg};

#[derive(Subcommand)]
pub enum Command {
    /// One pin per line: connector, tool, status, digest, pending digest; `--quarantined`
    /// also prints each pending change's diff as JSON on the next line.
    List {
        #[command(flatten)]
        w: WorkspaceArg,
        #[arg(long)]
        quarantined: bool,
    },
    /// Approve the pending definition of a tool (`--digest`: its pending digest, as listed).
    Approve {
        #[command(flatten)]
        w: WorkspaceArg,
        #[arg(long)]
        connector: String,
        #[arg(long)]
        tool: String,
        #[arg(long)]
        digest: String,
    },
}

pub async fn run(db: &Db, audit: &Audit, cmd: Command) -> anyhow::Result<Outcome> {
    match cmd {
        Command::List { w, quarantined } => {
            let tenant = w.t.resolve(db).await?;
            for pin in super::list(db, tenant, &w.workspace, quarantined).await? {
                let dash = |d: &Option<String>| d.clone().unwrap_or_else(|| "-".into());
                println!("{}\t{}\t{}\t{}\t{}", pin.connector, pin.tool, pin.status, dash(&pin.digest), dash(&pin.pending_digest));
                if quarantined {
                    println!("{}", serde_json::Value::Array(pin.changes));
                }
            }
        }
        Command::Approve { w, connector, tool, digest } => {
            let tenant = w.t.resolve(db).await?;
            let pin = super::approve(db, tenant, audit, &w.workspace, &connector, &tool, &digest).await?;
            println!("{}\t{}\t{}", pin.connector, pin.tool, pin.digest.unwrap_or_default());
        }
    }
    Ok(Outcome::Ok)
}
