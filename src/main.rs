//! The `gatehouse` command line: parse, build the configuration, dispatch to the noun that owns
//! the command (each noun's commands and their output live in its `cli.rs`).
#![forbid(unsafe_code)]

use std::process::ExitCode;

/// mimalloc instead of glibc's malloc (feature "mimalloc", on by default): less CPU per
/// `call_tool`; its compile-time defaults are in .cargo/config.toml (docs/decisions.md, "The
/// allocator").
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};
use gatehouse::{
    admin_log::Audit, blueprints, cli::Outcome, config::Config, connect_links, copies, db::Db, erasure, error::Error, forks,
    gateway::pins, impersonation, kv, mcp_auth, ops, peers, quotas, reap, reports, scim, server, service_credentials, snapshots,
    sso, tenants, tokens, vault, workspaces,
};

#[derive(Parser)]
#[command(name = "gatehouse", version, about = "Multi-tenant gateway between AI agents and their tools")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP server (embedded PostgreSQL when DATABASE_URL is unset).
    Serve,
    /// Apply pending database migrations and exit.
    Migrate,
    /// Check a running deployment end to end (credentials from GATEHOUSE_CLIENT_ID,
    /// GATEHOUSE_CLIENT_SECRET and GATEHOUSE_TOKEN). Prints one verdict line.
    Doctor {
        /// The workspace's MCP endpoint, e.g. https://gw.example.com/t/acme/w/main/mcp
        #[arg(long)]
        url: String,
    },
    /// Provision tenants.
    #[command(subcommand)]
    Tenant(tenants::cli::Command),
    /// Read and write a tenant's key-value store.
    #[command(subcommand)]
    Kv(kv::cli::Command),
    /// Manage a tenant's access tokens (`gth_…`).
    #[command(subcommand)]
    Token(tokens::cli::Command),
    /// SCIM provisioning: a tenant's SCIM tokens (`gsm_…`), for its directory.
    #[command(subcommand)]
    Scim(scim::cli::Command),
    /// A tenant's own sign-in: its OpenID connections and whether it requires them.
    #[command(subcommand)]
    Sso(sso::cli::Command),
    /// A tenant's quotas and rate limits, and their usage.
    #[command(subcommand)]
    Quota(quotas::cli::Command),
    /// Staff impersonation grants of a tenant: list, approve, revoke; the approval setting.
    #[command(subcommand)]
    Impersonation(impersonation::cli::Command),
    /// Manage a tenant's service credentials (`gsc_…` + secret).
    #[command(subcommand, name = "service-credential")]
    ServiceCredential(service_credentials::cli::Command),
    /// Manage a tenant's workspaces.
    #[command(subcommand)]
    Workspace(WorkspaceCommand),
    /// The copy ledger: every copy of a workspace's state a move made (forks, snapshots).
    #[command(subcommand)]
    Copies(copies::cli::Command),
    /// Snapshot files of workspaces (sealed per subject): export and restore.
    #[command(subcommand)]
    Snapshot(snapshots::cli::Command),
    /// Manage a workspace's connectors (each change is a new configuration version).
    #[command(subcommand)]
    Connector(workspaces::cli::ConnectorCommand),
    /// Manage connectors' credential slots. Values never come from the command line (it shows
    /// in process lists): each `--field NAME` reads `GATEHOUSE_FIELD_<NAME>` from the
    /// environment, else one line of stdin.
    #[command(subcommand)]
    Credential(vault::cli::SlotCommand),
    /// The vault's key ring.
    #[command(subcommand)]
    Vault(vault::cli::Command),
    /// Mailed connect links that authorize a connector's shared OAuth grant.
    #[command(subcommand, name = "connect-link")]
    ConnectLink(connect_links::cli::Command),
    /// Mail waiting for the operator (connect links when SMTP is not configured).
    #[command(subcommand)]
    Outbox(connect_links::cli::OutboxCommand),
    /// Platform operations: issues grouped from recorded failures, and their verdicts.
    #[command(subcommand)]
    Ops(ops::cli::Command),
    /// MCP clients authorized by members through OAuth, and their grants.
    #[command(subcommand, name = "mcp-auth")]
    McpAuth(mcp_auth::cli::Command),
    /// SQL reports (the views of the `report` schema): `--list`, or run one by name.
    Report(reports::cli::ReportArgs),
    /// Blueprints: named, versioned workspace configurations, admitted before use.
    #[command(subcommand)]
    Blueprint(blueprints::cli::Command),
    /// Pinned tool definitions of a workspace, and approving a quarantined change.
    #[command(subcommand, name = "tool-pin")]
    ToolPin(pins::cli::Command),
}

/// `gatehouse workspace …`: one command over the nouns that act on a workspace.
#[derive(Subcommand)]
enum WorkspaceCommand {
    #[command(flatten)]
    Own(workspaces::cli::Command),
    #[command(flatten)]
    Lifecycle(workspaces::lifecycle::cli::Command),
    #[command(flatten)]
    Erase(erasure::cli::Command),
    #[command(flatten)]
    Reap(reap::cli::Command),
    /// A workspace's peer connectors: bind, unbind, list (issue 7 §7).
    #[command(subcommand)]
    Peer(peers::cli::Command),
    #[command(flatten)]
    Fork(forks::cli::Command),
}

#[tokio::main]
async fn main() -> ExitCode {
    gatehouse::install_crypto();
    let cli = Cli::parse();
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let default_filter = if matches!(cli.command, Command::Serve) { "info" } else { "warn" };
    let _telemetry = match gatehouse::telemetry::init(default_filter, config.otlp_endpoint.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot start telemetry: {e:#}");
            return ExitCode::from(1);
        }
    };
    let result = match cli.command {
        Command::Serve => server::serve(config).await.map(|_| Outcome::Ok),
        Command::Doctor { url } => gatehouse::doctor::run_from_env(&url).await.map(|verdict| {
            println!("{verdict}");
            Outcome::Ok
        }),
        command => run_command(config, command).await,
    };
    match result {
        Ok(outcome) => ExitCode::from(outcome.code()),
        Err(e) => {
            match e.downcast_ref::<Error>() {
                Some(Error::InvalidConfig { issues }) => {
                    for issue in issues {
                        eprintln!("error (invalid_config): {}: {}", issue.field, issue.message);
                    }
                }
                Some(api) if !matches!(api, Error::Database(_) | Error::Internal(_)) => {
                    eprintln!("error ({}): {api}", api.code())
                }
                _ => eprintln!("error: {e:#}"),
            }
            ExitCode::from(1)
        }
    }
}

/// Every CLI command uses the same database as `serve`: `DATABASE_URL`, or the embedded
/// cluster (attached to if a server runs it, else started for the command and stopped after).
async fn run_command(config: Config, command: Command) -> anyhow::Result<Outcome> {
    let database = server::Database::open(&config).await?;
    let result = async {
        if matches!(command, Command::Migrate) {
            println!("migrations applied");
            return Ok(Outcome::Ok);
        }
        let db = database.connect(&config, 2).await?;
        let outcome = dispatch(&db, &config, command).await;
        db.close().await;
        outcome
    }
    .await;
    database.close().await?;
    result
}

async fn dispatch(db: &Db, config: &Config, command: Command) -> anyhow::Result<Outcome> {
    let audit = &Audit::cli();
    match command {
        Command::Serve | Command::Migrate | Command::Doctor { .. } => unreachable!("handled by the caller"),
        Command::Tenant(cmd) => tenants::cli::run(db, audit, config, cmd).await,
        Command::Kv(cmd) => kv::cli::run(db, audit, cmd).await,
        Command::Token(cmd) => tokens::cli::run(db, audit, config.token_cap, cmd).await,
        Command::Scim(cmd) => scim::cli::run(db, audit, cmd).await,
        Command::Sso(cmd) => sso::cli::run(db, audit, config, cmd).await,
        Command::Quota(cmd) => quotas::cli::run(db, audit, cmd).await,
        Command::Impersonation(cmd) => impersonation::cli::run(db, audit, cmd).await,
        Command::ServiceCredential(cmd) => service_credentials::cli::run(db, audit, cmd).await,
        Command::Workspace(WorkspaceCommand::Own(cmd)) => workspaces::cli::run(db, audit, cmd).await,
        Command::Workspace(WorkspaceCommand::Lifecycle(cmd)) => workspaces::lifecycle::cli::run(db, audit, cmd).await,
        Command::Workspace(WorkspaceCommand::Erase(cmd)) => erasure::cli::run(db, audit, cmd).await,
        Command::Workspace(WorkspaceCommand::Reap(cmd)) => reap::cli::run(db, audit, config, cmd).await,
        Command::Workspace(WorkspaceCommand::Peer(cmd)) => peers::cli::run(db, audit, cmd).await,
        Command::Workspace(WorkspaceCommand::Fork(cmd)) => forks::cli::run(db, audit, config, cmd).await,
        Command::Copies(cmd) => copies::cli::run(db, cmd).await,
        Command::Snapshot(cmd) => snapshots::cli::run(db, audit, config, cmd).await,
        Command::Connector(cmd) => workspaces::cli::run_connector(db, audit, config, cmd).await,
        Command::Credential(cmd) => vault::cli::run_slot(db, audit, config, cmd).await,
        Command::Vault(cmd) => vault::cli::run(db, config, cmd).await,
        Command::ConnectLink(cmd) => connect_links::cli::run(db, audit, config, cmd).await,
        Command::Outbox(cmd) => connect_links::cli::run_outbox(db, audit, config, cmd).await,
        Command::Ops(cmd) => ops::cli::run(db, audit, cmd).await,
        Command::McpAuth(cmd) => mcp_auth::cli::run(db, audit, cmd).await,
        Command::Report(args) => reports::cli::run(db, args).await,
        Command::Blueprint(cmd) => blueprints::cli::run(db, audit, config, cmd).await,
        Command::ToolPin(cmd) => pins::cli::run(db, audit, cmd).await,
    }
}
