//! `gatehouse workspace create | list | configure` and `gatehouse connector …`. The other
//! `workspace` commands belong to their own nouns (lifecycle, erasure, reap, peers, forks);
//! the binary puts them under one command.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::{admin_log::Audit, cli::Outcome, config::Config, db::Db, tenants::cli::TenantArg};

/// `--tenant SLUG --workspace SLUG`.
#[derive(Args, Clone, Debug)]
#[command(about = None, long_about = None)]
pub struct WorkspaceArg {
    #[command(flatten)]
    pub t: TenantArg,
    #[arg(long)]
    pub workspace: String,
}

#[derive(Subcommand)]
pub enum Command {
    /// Create a workspace; prints slug and id.
    Create {
        #[command(flatten)]
        t: TenantArg,
        slug: String,
        #[arg(long)]
        name: Option<String>,
    },
    /// One workspace per line: slug, status, bound version, id.
    List {
        #[command(flatten)]
        t: TenantArg,
    },
    /// Replace classification overrides and/or grants from a JSON file
    /// (`{"classification": {...}, "grants": [...]}`); prints the new version.
    Configure {
        #[command(flatten)]
        w: WorkspaceArg,
        #[arg(long)]
        file: PathBuf,
        #[arg(long)]
        expected_version: Option<i32>,
    },
}

/// Runs `gatehouse workspace create | list | configure`.
pub async fn run(db: &Db, audit: &Audit, cmd: Command) -> anyhow::Result<Outcome> {
    match cmd {
        Command::Create { t, slug, name } => {
            let ws = super::create(db, t.resolve(db).await?, audit, &slug, name.as_deref()).await?;
            println!("{}\t{}", ws.slug, ws.id.0);
        }
        Command::List { t } => {
            for ws in super::list(db, t.resolve(db).await?).await? {
                println!("{}\t{}\t{}\t{}", ws.slug, ws.status, ws.bound_version, ws.id.0);
            }
        }
        Command::Configure { w, file, expected_version } => {
            let tenant = w.t.resolve(db).await?;
            let patch = crate::cli::json_file("file", &file)?;
            let bound = super::configure(db, tenant, audit, &w.workspace, expected_version, &patch).await?;
            println!("{}", bound.workspace.bound_version);
        }
    }
    Ok(Outcome::Ok)
}

#[derive(Subcommand)]
pub enum ConnectorCommand {
    /// Add a connector; prints the new configuration version.
    Add {
        #[command(flatten)]
        w: WorkspaceArg,
        #[arg(long)]
        id: String,
        /// `remote_mcp` (an MCP server over streamable HTTP or legacy HTTP+SSE), `http_api`, or
        /// `peer` (another workspace of the tenant, found by `--blueprint`).
        #[arg(long)]
        kind: String,
        /// For `peer`: the slug of the blueprint the target workspace runs.
        #[arg(long, required_if_eq("kind", "peer"))]
        blueprint: Option<String>,
        #[arg(long, required_if_eq("kind", "remote_mcp"))]
        url: Option<String>,
        /// How to reach a `remote_mcp` server: `streamable_http` (the default) or `sse` (the
        /// legacy HTTP+SSE transport; `--url` is then the event stream's URL).
        #[arg(long, value_parser = ["streamable_http", "sse"])]
        transport: Option<String>,
        /// A JSON file with the connector's configuration (for `http_api`).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Fail with exit 1 (binding_changed) unless the workspace still runs this version.
        #[arg(long)]
        expected_version: Option<i32>,
    },
    /// One connector per line: id, kind, url.
    List {
        #[command(flatten)]
        w: WorkspaceArg,
    },
    /// Remove a connector; prints the new configuration version.
    Remove {
        #[command(flatten)]
        w: WorkspaceArg,
        id: String,
    },
}

/// Runs a `gatehouse connector` command (each change is a new configuration version).
pub async fn run_connector(db: &Db, audit: &Audit, settings: &Config, cmd: ConnectorCommand) -> anyhow::Result<Outcome> {
    match cmd {
        ConnectorCommand::Add { w, id, kind, url, transport, config, expected_version, blueprint } => {
            let tenant = w.t.resolve(db).await?;
            let mut value = match config {
                Some(path) => crate::cli::json_file("config", &path)?,
                None => serde_json::json!({}),
            };
            if let serde_json::Value::Object(map) = &mut value {
                map.insert("kind".into(), kind.into());
                if let Some(url) = url {
                    map.insert("url".into(), url.into());
                }
                if let Some(transport) = transport {
                    map.insert("transport".into(), transport.into());
                }
                if let Some(blueprint) = blueprint {
                    map.insert("blueprint".into(), blueprint.into());
                }
            }
            let connector = super::http::parse_connector(&id, value)?;
            crate::vault::slots::check_connector(settings.vault_keys.as_ref(), &connector)?;
            let bound = super::add_connector(db, tenant, audit, &w.workspace, expected_version, &id, connector).await?;
            println!("{}", bound.workspace.bound_version);
        }
        ConnectorCommand::List { w } => {
            let tenant = w.t.resolve(db).await?;
            for (id, connector) in super::bound(db, tenant, &w.workspace).await?.document.connectors {
                println!("{id}\t{}\t{}", connector.kind(), connector.url());
            }
        }
        ConnectorCommand::Remove { w, id } => {
            let bound = super::remove_connector(db, w.t.resolve(db).await?, audit, &w.workspace, None, &id).await?;
            println!("{}", bound.workspace.bound_version);
        }
    }
    Ok(Outcome::Ok)
}
