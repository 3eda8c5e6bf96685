//! The `gatehouse` command line: parse, build the configuration, call into the library.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use gatehouse::{
    admin_log::Audit,
    config::Config,
    db::Db,
    error::Error,
    kv, members, server,
    tenants::{self, Status},
    workspaces,
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
    Tenant(TenantCommand),
    /// Read and write a tenant's key-value store.
    #[command(subcommand)]
    Kv(KvCommand),
    /// Manage a tenant's access tokens (`gth_…`).
    #[command(subcommand)]
    Token(TokenCommand),
    /// Manage a tenant's service credentials (`gsc_…` + secret).
    #[command(subcommand, name = "service-credential")]
    ServiceCredential(CredentialCommand),
    /// Manage a tenant's workspaces.
    #[command(subcommand)]
    Workspace(WorkspaceCommand),
    /// The copy ledger: every copy of a workspace's state a move made (forks, snapshots).
    #[command(subcommand)]
    Copies(CopiesCommand),
    /// Snapshot files of workspaces (sealed per subject): export and restore.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// Manage a workspace's connectors (each change is a new configuration version).
    #[command(subcommand)]
    Connector(ConnectorCommand),
    /// Manage connectors' credential slots. Values never come from the command line (it shows
    /// in process lists): each `--field NAME` reads `GATEHOUSE_FIELD_<NAME>` from the
    /// environment, else one line of stdin.
    #[command(subcommand)]
    Credential(SlotCommand),
    /// The vault's key ring.
    #[command(subcommand)]
    Vault(VaultCommand),
    /// Mailed connect links that authorize a connector's shared OAuth grant.
    #[command(subcommand, name = "connect-link")]
    ConnectLink(LinkCommand),
    /// Mail waiting for the operator (connect links when SMTP is not configured).
    #[command(subcommand)]
    Outbox(OutboxCommand),
    /// Platform operations: issues grouped from recorded failures, and their verdicts.
    #[command(subcommand)]
    Ops(OpsCommand),
    /// MCP clients authorized by members through OAuth, and their grants.
    #[command(subcommand, name = "mcp-auth")]
    McpAuth(gatehouse::mcp_auth::control::Command),
    /// SQL reports (the views of the `report` schema): `--list`, or run one by name.
    Report(ReportArgs),
    /// Blueprints: named, versioned workspace configurations, admitted before use.
    #[command(subcommand)]
    Blueprint(gatehouse::blueprints::control::Command),
}

#[derive(Args)]
struct ReportArgs {
    /// List the reports, one per line: name, then what it shows.
    #[arg(long, conflicts_with_all = ["name", "tenant"])]
    list: bool,
    /// The report to run.
    #[arg(required_unless_present = "list")]
    name: Option<String>,
    /// Only this tenant's rows (slug); without it, every tenant's.
    #[arg(long)]
    tenant: Option<String>,
    /// table, csv or json (one object per line).
    #[arg(long, default_value = "table")]
    format: String,
}

#[derive(Subcommand)]
enum LinkCommand {
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
        id: uuid::Uuid,
    },
}

#[derive(Subcommand)]
enum OutboxCommand {
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
        id: uuid::Uuid,
    },
}

#[derive(Subcommand)]
enum OpsCommand {
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

#[derive(Args)]
struct SlotArg {
    #[arg(long)]
    tenant: String,
    #[arg(long)]
    workspace: String,
    #[arg(long)]
    connector: String,
    /// The personal slot of this member (by id) instead of the shared one.
    #[arg(long, conflicts_with = "oauth_client")]
    personal_for: Option<uuid::Uuid>,
    /// The secret of the connector's static confidential OAuth client (one field, `client_secret`).
    #[arg(long)]
    oauth_client: bool,
}

#[derive(Subcommand)]
enum SlotCommand {
    /// Set or replace a slot's credential; prints its metadata.
    Set {
        #[command(flatten)]
        s: SlotArg,
        /// A field's name (repeat); its value is `GATEHOUSE_FIELD_<NAME>` or the next stdin line.
        #[arg(long = "field", required = true)]
        fields: Vec<String>,
    },
    /// Remove a slot's credential (exit 4 when it was not set).
    Remove {
        #[command(flatten)]
        s: SlotArg,
    },
    /// Print a slot's metadata (never a value): one header line, then one line per field.
    Show {
        #[command(flatten)]
        s: SlotArg,
    },
}

#[derive(Subcommand)]
enum VaultCommand {
    /// Re-seal every credential under the active (first) key, in batches; prints counts. Run it
    /// with the new key first and the old one after it; then the old key can be removed.
    Rotate {
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(i64).range(1..=10_000))]
        batch: i64,
    },
}

#[derive(Subcommand)]
enum WorkspaceCommand {
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
        file: std::path::PathBuf,
        #[arg(long)]
        expected_version: Option<i32>,
    },
    #[command(flatten)]
    Lifecycle(workspaces::lifecycle::control::Command),
    /// Erase a subject (a member's id or email, or an external subject id) across a workspace
    /// and every copy of it; prints the receipt as JSON.
    Erase {
        #[command(flatten)]
        t: TenantArg,
        workspace: String,
        #[arg(long)]
        subject: String,
    },
    /// Reap an archived workspace (terminal: its state is deleted, its slug released); prints
    /// the tombstone as JSON.
    Reap {
        #[command(flatten)]
        t: TenantArg,
        workspace: String,
    },
    /// A workspace's peer connectors: bind, unbind, list (issue 7 §7).
    #[command(subcommand)]
    Peer(gatehouse::peers::cli::Command),
    /// Fork a workspace into a preview workspace that expires; prints slug, id and move.
    Fork {
        #[command(flatten)]
        t: TenantArg,
        /// The workspace to fork.
        workspace: String,
        #[arg(long)]
        slug: String,
        /// Hours until the fork expires (default 72, at most 720).
        #[arg(long)]
        ttl_hours: Option<i64>,
    },
    /// Extend a fork's life by some hours; prints its expiry and pin.
    ForkExtend {
        #[command(flatten)]
        t: TenantArg,
        workspace: String,
        #[arg(long)]
        hours: i64,
    },
    /// Pin a fork (it never expires while pinned), or unpin it with --unpin.
    ForkPin {
        #[command(flatten)]
        t: TenantArg,
        workspace: String,
        #[arg(long)]
        unpin: bool,
    },
}

#[derive(Subcommand)]
enum CopiesCommand {
    /// One ledger row per line: move, kind, role, copy, state, lease until, claimant, created at.
    List {
        #[command(flatten)]
        t: TenantArg,
        /// Only the rows of this workspace (as the copied workspace or as a copy).
        #[arg(long)]
        workspace: Option<String>,
    },
}

#[derive(Subcommand)]
enum SnapshotCommand {
    /// Export a workspace to a new file in GATEHOUSE_SNAPSHOT_DIR; prints the file and the move.
    Export {
        #[command(flatten)]
        t: TenantArg,
        workspace: String,
    },
    /// Restore a snapshot file into a new workspace; prints slug, id, and subjects restored and unreadable.
    Restore {
        #[command(flatten)]
        t: TenantArg,
        file: String,
        #[arg(long)]
        slug: String,
    },
}

#[derive(Args)]
struct WorkspaceArg {
    #[arg(long)]
    tenant: String,
    #[arg(long)]
    workspace: String,
}

#[derive(Subcommand)]
enum ConnectorCommand {
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
        config: Option<std::path::PathBuf>,
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

#[derive(Subcommand)]
enum TokenCommand {
    /// Create a token; prints its id, then the secret (shown this once only).
    Create {
        #[command(flatten)]
        t: TenantArg,
        #[arg(long)]
        name: String,
    },
    /// One token per line: id, prefix, name, state, last used.
    List {
        #[command(flatten)]
        t: TenantArg,
    },
    Rename {
        #[command(flatten)]
        t: TenantArg,
        id: uuid::Uuid,
        name: String,
    },
    Revoke {
        #[command(flatten)]
        t: TenantArg,
        id: uuid::Uuid,
    },
}

#[derive(Subcommand)]
enum CredentialCommand {
    /// Create a credential; prints its id, client id, then the secret (shown this once only).
    Create {
        #[command(flatten)]
        t: TenantArg,
        #[arg(long)]
        name: String,
    },
    /// One credential per line: id, client id, name, state, last used.
    List {
        #[command(flatten)]
        t: TenantArg,
    },
    Revoke {
        #[command(flatten)]
        t: TenantArg,
        id: uuid::Uuid,
    },
}

#[derive(Subcommand)]
enum TenantCommand {
    /// Create a tenant.
    Create {
        slug: String,
        #[arg(long)]
        name: String,
        /// Invite this address as the tenant's first owner (accepted at their first sign-in).
        #[arg(long)]
        owner_email: Option<String>,
    },
    /// List tenants, one per line: slug, status, id, name.
    List,
    /// Suspend a tenant.
    Suspend { slug: String },
    /// Re-activate a suspended tenant.
    Activate { slug: String },
    /// Override what a role grants in this tenant: allow, deny, or default (remove the override).
    Permission {
        slug: String,
        #[arg(long)]
        role: String,
        #[arg(long)]
        permission: String,
        #[arg(value_parser = ["allow", "deny", "default"])]
        setting: String,
    },
}

#[derive(Args)]
struct TenantArg {
    /// The tenant's slug.
    #[arg(long)]
    tenant: String,
}

#[derive(Subcommand)]
enum KvCommand {
    /// Print a key's value as JSON (exit 4 when absent).
    Get {
        #[command(flatten)]
        t: TenantArg,
        key: String,
    },
    /// Set a key to a JSON value.
    Set {
        #[command(flatten)]
        t: TenantArg,
        key: String,
        value: String,
        #[arg(long)]
        ttl_ms: Option<u64>,
    },
    /// Delete a key (exit 4 when it was absent).
    Delete {
        #[command(flatten)]
        t: TenantArg,
        key: String,
    },
    /// List keys with a prefix, one `key<TAB>value` per line.
    List {
        #[command(flatten)]
        t: TenantArg,
        #[arg(long, default_value = "")]
        prefix: String,
        #[arg(long)]
        after: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Compare-and-set: prints `swapped` (exit 0) or `refused` (exit 3).
    Cas {
        #[command(flatten)]
        t: TenantArg,
        key: String,
        /// Succeed only when the key is absent.
        #[arg(long, conflicts_with = "expect")]
        expect_absent: bool,
        /// Succeed only when the key holds this JSON value.
        #[arg(long, required_unless_present = "expect_absent")]
        expect: Option<String>,
        /// The JSON value to leave behind.
        #[arg(long, conflicts_with = "delete")]
        next: Option<String>,
        /// Delete the key instead.
        #[arg(long, required_unless_present = "next")]
        delete: bool,
        #[arg(long)]
        ttl_ms: Option<u64>,
    },
}

/// A command's outcome that is not an error but still a non-zero exit.
enum Outcome {
    Ok,
    Refused,
    Absent,
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
        Command::Doctor { url } => doctor(&url).await,
        command => run_command(config, command).await,
    };
    match result {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::Refused) => ExitCode::from(3),
        Ok(Outcome::Absent) => ExitCode::from(4),
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

async fn doctor(url: &str) -> anyhow::Result<Outcome> {
    let var = |k: &str| std::env::var(k).map_err(|_| anyhow::anyhow!("{k} is not set"));
    let verdict =
        gatehouse::doctor::run(url, &var("GATEHOUSE_CLIENT_ID")?, &var("GATEHOUSE_CLIENT_SECRET")?, &var("GATEHOUSE_TOKEN")?)
            .await
            .map_err(|e| anyhow::anyhow!("doctor: {e:#}"))?;
    println!("{verdict}");
    Ok(Outcome::Ok)
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
        let db = Db::connect(&database.owner_url, 2).await?;
        let outcome = dispatch(&db, &config, command).await;
        db.pool().close().await;
        outcome
    }
    .await;
    database.close().await?;
    result
}

async fn dispatch(db: &Db, config: &Config, command: Command) -> anyhow::Result<Outcome> {
    let token_cap = config.token_cap;
    let audit = Audit::cli();
    match command {
        Command::Serve | Command::Migrate | Command::Doctor { .. } => unreachable!("handled by the caller"),
        Command::Tenant(TenantCommand::Create { slug, name, owner_email }) => {
            let t = tenants::create(db, &audit, &slug, &name).await?;
            if let Some(email) = owner_email {
                members::invite(db, t.id, &audit, &email, members::Role::Owner).await?;
            }
            println!("{}\t{}", t.slug, t.id.0);
        }
        Command::Tenant(TenantCommand::List) => {
            for t in tenants::list(db).await? {
                println!("{}\t{}\t{}\t{}", t.slug, t.status.as_str(), t.id.0, t.name);
            }
        }
        Command::Tenant(TenantCommand::Suspend { slug }) => {
            let t = tenants::set_status(db, &audit, &slug, Status::Suspended).await?;
            println!("{}\t{}", t.slug, t.status.as_str());
        }
        Command::Tenant(TenantCommand::Permission { slug, role, permission, setting }) => {
            let tenant = tenants::by_slug(db, &slug).await?.id;
            let allowed = match setting.as_str() {
                "allow" => Some(true),
                "deny" => Some(false),
                _ => None,
            };
            let (role, permission) = (members::Role::parse(&role)?, members::Permission::parse(&permission)?);
            members::set_override(db, tenant, &audit, role, permission, allowed).await?;
            println!("{}\t{}\t{}", role.as_str(), permission.as_str(), setting);
        }
        Command::Tenant(TenantCommand::Activate { slug }) => {
            let t = tenants::set_status(db, &audit, &slug, Status::Active).await?;
            println!("{}\t{}", t.slug, t.status.as_str());
        }
        Command::Kv(cmd) => return kv_command(db, &audit, cmd).await,
        Command::Token(cmd) => token_command(db, &audit, token_cap, cmd).await?,
        Command::McpAuth(cmd) => gatehouse::mcp_auth::control::run(db, &audit, cmd).await?,
        Command::ServiceCredential(cmd) => credential_command(db, &audit, cmd).await?,
        Command::Workspace(cmd) => workspace_command(db, &audit, config, cmd).await?,
        Command::Snapshot(SnapshotCommand::Export { t, workspace }) => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            let e = gatehouse::snapshots::export(db, config, tenant, &audit, &workspace).await?;
            println!("{}\t{}", e.file, e.move_id);
        }
        Command::Snapshot(SnapshotCommand::Restore { t, file, slug }) => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            let r = gatehouse::snapshots::restore(db, config, tenant, &audit, &file, &slug).await?;
            println!("{}\t{}\t{}\t{}", r.workspace, r.workspace_id, r.subjects_restored, r.subjects_unreadable);
        }
        Command::Copies(CopiesCommand::List { t, workspace }) => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            let workspace = match workspace {
                Some(slug) => Some(workspaces::bound(db, tenant, &slug).await?.workspace.id.0),
                None => None,
            };
            for c in gatehouse::copies::list(db, tenant, workspace).await? {
                let owner = c.lease_owner.unwrap_or_else(|| "-".into());
                let (lease, created) = (c.lease_until.to_rfc3339(), c.created_at.to_rfc3339());
                println!("{}\t{}\t{}\t{}\t{}\t{lease}\t{owner}\t{created}", c.move_id, c.kind, c.role, c.copy_ref, c.state);
            }
        }
        Command::Connector(cmd) => connector_command(db, &audit, config, cmd).await?,
        Command::Credential(cmd) => return slot_command(db, &audit, config, cmd).await,
        Command::ConnectLink(cmd) => link_command(db, &audit, config, cmd).await?,
        Command::Outbox(OutboxCommand::List { t, all }) => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            for mail in gatehouse::connect_links::outbox(db, tenant, all).await? {
                println!("{}", serde_json::to_string(&mail)?);
            }
        }
        Command::Outbox(OutboxCommand::Sent { t, id }) => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            if !gatehouse::connect_links::mark_sent(db, tenant, &audit, id).await? {
                return Ok(Outcome::Refused);
            }
            println!("sent");
        }
        Command::Ops(cmd) => ops_command(db, &audit, cmd).await?,
        Command::Report(args) => report_command(db, args).await?,
        Command::Blueprint(cmd) => gatehouse::blueprints::control::run(db, &audit, config, cmd).await?,
        Command::Vault(VaultCommand::Rotate { batch }) => {
            let ring = gatehouse::vault::slots::require(config.vault_keys.as_ref())?;
            let done = gatehouse::vault::slots::rotate(db, ring, batch).await?;
            println!("resealed\t{}\nalready_current\t{}\nunreadable\t{}", done.resealed, done.already_current, done.unreadable);
        }
    }
    Ok(Outcome::Ok)
}

async fn link_command(db: &Db, audit: &Audit, config: &Config, cmd: LinkCommand) -> anyhow::Result<()> {
    use gatehouse::connect_links;
    match cmd {
        LinkCommand::Create { t, workspace, connector, email, ttl_days } => {
            let tenant = tenants::by_slug(db, &t.tenant).await?;
            let public = config.public_origin();
            // A writer of its own for this one command, flushed before it exits, so an
            // undelivered mail is recorded like the server's.
            let (ops, _writer) = gatehouse::ops::Recorder::start(db.clone());
            let mailer = connect_links::mail::Mailer::from_config(config)?.map(|m| m.with_ops(ops.clone()));
            let (ws, c) = (workspace.as_str(), connector.as_str());
            let m =
                connect_links::mint(db, tenant.id, &tenant.slug, public, audit, ws, c, &email, ttl_days, mailer.as_ref()).await?;
            ops.flush().await;
            println!("{}\n{}\n{}", m.link.id, m.mail_id, if m.delivered { "sent" } else { "outbox" });
        }
        LinkCommand::List { t, history } => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            for l in connect_links::list(db, tenant, history).await? {
                let used = l.used_at.map(|u| u.to_rfc3339()).unwrap_or_else(|| "-".into());
                let label = l.account_label.as_deref().unwrap_or("-");
                println!("{}\t{}\t{}\t{}\t{}\t{used}\t{label}", l.id, l.status, l.connector, l.email, l.expires_at.to_rfc3339());
            }
        }
        LinkCommand::Revoke { t, id } => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            println!("{}", connect_links::revoke(db, tenant, audit, id).await?.status);
        }
    }
    Ok(())
}

async fn ops_command(db: &Db, audit: &Audit, cmd: OpsCommand) -> anyhow::Result<()> {
    use gatehouse::ops::{self, Verdict};
    let (fingerprint, verdict, version) = match cmd {
        OpsCommand::Issues { status, limit } => {
            for i in ops::issues(db, status.as_deref(), limit).await? {
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
            return Ok(());
        }
        OpsCommand::Resolve { fingerprint, version } => (fingerprint, Verdict::Resolve, version),
        OpsCommand::Ignore { fingerprint } => (fingerprint, Verdict::Ignore, None),
        OpsCommand::Reopen { fingerprint } => (fingerprint, Verdict::Reopen, None),
    };
    let issue = ops::set_verdict(db, audit, &fingerprint, verdict, version.as_deref()).await?;
    println!("{}\t{}\t{}", issue.fingerprint, issue.status, issue.resolved_version.unwrap_or_default());
    Ok(())
}

async fn report_command(db: &Db, args: ReportArgs) -> anyhow::Result<()> {
    use gatehouse::reports;
    if args.list {
        for r in reports::list(db).await? {
            println!("{}\t{}", r.name, r.description);
        }
        return Ok(());
    }
    let format = reports::Format::parse(&args.format)?;
    let scope = match &args.tenant {
        Some(slug) => gatehouse::db::Scope::Tenant(tenants::by_slug(db, slug).await?.id),
        None => gatehouse::db::Scope::Platform { reason: "report from the command line" },
    };
    let out = reports::run(db, scope, args.name.as_deref().unwrap_or_default()).await?;
    print!("{}", reports::render(&out, format));
    if out.truncated {
        eprintln!("truncated at {} rows", reports::ROW_CAP);
    }
    Ok(())
}

/// Field values from `GATEHOUSE_FIELD_<NAME>`, else one stdin line each, in order.
fn field_values(names: &[String]) -> anyhow::Result<gatehouse::vault::slots::Fields> {
    let mut fields = gatehouse::vault::slots::Fields(Default::default());
    let mut stdin = std::io::stdin().lines();
    for name in names {
        if name.contains('=') {
            return Err(Error::invalid(
                "value_on_command_line",
                Some("field"),
                "pass only the field's name: values are read from GATEHOUSE_FIELD_<NAME> or stdin, never the command line",
            )
            .into());
        }
        let value = match std::env::var(format!("GATEHOUSE_FIELD_{}", name.to_ascii_uppercase())) {
            Ok(v) => v,
            Err(_) => stdin
                .next()
                .transpose()?
                .ok_or_else(|| Error::invalid("missing_value", Some("field"), format!("no value for field `{name}` on stdin")))?,
        };
        fields.0.insert(name.clone(), value.trim_end_matches(['\r', '\n']).to_owned());
    }
    Ok(fields)
}

async fn slot_command(db: &Db, audit: &Audit, config: &Config, cmd: SlotCommand) -> anyhow::Result<Outcome> {
    use gatehouse::vault::{
        Owner,
        slots::{self, Slot},
    };
    use gatehouse::workspaces::config::SlotKind;
    let s = match &cmd {
        SlotCommand::Set { s, .. } | SlotCommand::Remove { s } | SlotCommand::Show { s } => s,
    };
    let tenant = tenants::by_slug(db, &s.tenant).await?.id;
    let (kind, owner) = match (s.personal_for, s.oauth_client) {
        (_, true) => (SlotKind::Shared, Owner::OauthClient),
        (None, false) => (SlotKind::Shared, Owner::Shared),
        (Some(member), false) => (SlotKind::Personal, Owner::Member(member)),
    };
    let (workspace, connector) = if s.oauth_client {
        (gatehouse::oauth::client_auth::confidential_connector(db, tenant, &s.workspace, &s.connector).await?, None)
    } else {
        let (w, c) = slots::resolve(db, tenant, &s.workspace, &s.connector, kind).await?;
        (w, Some(c))
    };
    let slot = Slot { tenant, workspace, connector: &s.connector, owner };
    let meta = match &cmd {
        SlotCommand::Set { fields, .. } => {
            let ring = slots::require(config.vault_keys.as_ref())?;
            let values = field_values(fields)?;
            match &connector {
                Some(connector) => slots::check_fields(connector, &values.0)?,
                None => {
                    let secret = gatehouse::oauth::client_auth::SECRET_FIELD;
                    if values.0.len() != 1 || !values.0.contains_key(secret) {
                        anyhow::bail!("an OAuth client's slot has exactly one field: --field {secret}");
                    }
                    gatehouse::oauth::client_auth::check_secret(&values.0[secret])?;
                }
            }
            slots::set(db, ring, audit, slot, kind, values).await?
        }
        SlotCommand::Remove { .. } => {
            slots::require(config.vault_keys.as_ref())?;
            match slots::remove(db, audit, slot).await {
                Ok(()) => return Ok(Outcome::Ok),
                Err(Error::NotFound { .. }) => return Ok(Outcome::Absent),
                Err(e) => return Err(e.into()),
            }
        }
        SlotCommand::Show { .. } => slots::show(db, slot, kind).await?,
    };
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    println!(
        "{}\t{}\t{}\t{}\t{}\t{}\t{}",
        meta.connector,
        meta.owner,
        meta.state,
        or_dash(meta.version.map(|v| v.to_string())),
        or_dash(meta.key_id),
        or_dash(meta.updated_at.map(|t| t.to_rfc3339())),
        or_dash(meta.updated_by)
    );
    for f in meta.fields {
        println!("field\t{}\t{}", f.name, or_dash(f.last4));
    }
    Ok(Outcome::Ok)
}

fn used(at: Option<chrono::DateTime<chrono::Utc>>) -> String {
    at.map_or_else(|| "never".to_owned(), |t| t.to_rfc3339())
}

fn state(revoked: Option<chrono::DateTime<chrono::Utc>>) -> &'static str {
    if revoked.is_some() { "revoked" } else { "live" }
}

async fn token_command(db: &Db, audit: &Audit, cap: i32, cmd: TokenCommand) -> anyhow::Result<()> {
    match cmd {
        TokenCommand::Create { t, name } => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            let created = gatehouse::tokens::create(db, tenant, audit, &name, None, cap).await?;
            println!("{}\n{}", created.token.id, created.secret);
        }
        TokenCommand::List { t } => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            for k in gatehouse::tokens::list(db, tenant).await? {
                println!("{}\t{}\t{}\t{}\t{}", k.id, k.prefix, k.name, state(k.revoked_at), used(k.last_used_at));
            }
        }
        TokenCommand::Rename { t, id, name } => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            let k = gatehouse::tokens::rename(db, tenant, audit, id, &name).await?;
            println!("{}\t{}", k.id, k.name);
        }
        TokenCommand::Revoke { t, id } => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            let k = gatehouse::tokens::revoke(db, tenant, audit, id).await?;
            println!("{}\t{}", k.id, state(k.revoked_at));
        }
    }
    Ok(())
}

async fn credential_command(db: &Db, audit: &Audit, cmd: CredentialCommand) -> anyhow::Result<()> {
    use gatehouse::service_credentials as sc;
    match cmd {
        CredentialCommand::Create { t, name } => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            let created = sc::create(db, tenant, audit, &name).await?;
            println!("{}\n{}\n{}", created.credential.id, created.credential.client_id, created.client_secret);
        }
        CredentialCommand::List { t } => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            for c in sc::list(db, tenant).await? {
                println!("{}\t{}\t{}\t{}\t{}", c.id, c.client_id, c.name, state(c.revoked_at), used(c.last_used_at));
            }
        }
        CredentialCommand::Revoke { t, id } => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            let c = sc::revoke(db, tenant, audit, id).await?;
            println!("{}\t{}", c.id, state(c.revoked_at));
        }
    }
    Ok(())
}

async fn workspace_command(db: &Db, audit: &Audit, config: &Config, cmd: WorkspaceCommand) -> anyhow::Result<()> {
    use gatehouse::forks;
    match cmd {
        WorkspaceCommand::Fork { t, workspace, slug, ttl_hours } => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            let f = forks::fork(db, config, tenant, audit, &workspace, &slug, ttl_hours).await?;
            println!("{}\t{}\t{}", f.workspace.slug, f.workspace.id.0, f.move_id);
        }
        WorkspaceCommand::ForkExtend { t, workspace, hours } => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            let e = forks::extend(db, tenant, audit, &workspace, hours).await?;
            println!("{}\t{}\t{}", e.workspace, e.expires_at.to_rfc3339(), if e.pinned { "pinned" } else { "unpinned" });
        }
        WorkspaceCommand::ForkPin { t, workspace, unpin } => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            let e = forks::pin(db, tenant, audit, &workspace, !unpin).await?;
            println!("{}\t{}\t{}", e.workspace, e.expires_at.to_rfc3339(), if e.pinned { "pinned" } else { "unpinned" });
        }
        WorkspaceCommand::Create { t, slug, name } => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            let ws = workspaces::create(db, tenant, audit, &slug, name.as_deref()).await?;
            println!("{}\t{}", ws.slug, ws.id.0);
        }
        WorkspaceCommand::Configure { w, file, expected_version } => {
            let tenant = tenants::by_slug(db, &w.tenant).await?.id;
            let patch: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file)?)
                .map_err(|e| Error::invalid("invalid_json", Some("file"), format!("{} is not JSON: {e}", file.display())))?;
            let bound = workspaces::configure(db, tenant, audit, &w.workspace, expected_version, &patch).await?;
            println!("{}", bound.workspace.bound_version);
        }
        WorkspaceCommand::Lifecycle(cmd) => workspaces::lifecycle::control::run(db, audit, cmd).await?,
        WorkspaceCommand::List { t } => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            for ws in workspaces::list(db, tenant).await? {
                println!("{}\t{}\t{}\t{}", ws.slug, ws.status, ws.bound_version, ws.id.0);
            }
        }
        WorkspaceCommand::Erase { t, workspace, subject } => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            let outcome = gatehouse::erasure::erase(db, tenant, audit, &workspace, &subject).await?;
            println!("{}", serde_json::to_string(&outcome)?);
        }
        WorkspaceCommand::Reap { t, workspace } => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            let tombstone = gatehouse::reap::reap(db, &config.copies.snapshot_dir, tenant, audit, &workspace).await?;
            println!("{}", serde_json::to_string(&tombstone)?);
        }
        WorkspaceCommand::Peer(cmd) => gatehouse::peers::cli::run(db, audit, cmd).await?,
    }
    Ok(())
}

async fn connector_command(db: &Db, audit: &Audit, settings: &Config, cmd: ConnectorCommand) -> anyhow::Result<()> {
    match cmd {
        ConnectorCommand::Add { w, id, kind, url, transport, config, expected_version, blueprint } => {
            let tenant = tenants::by_slug(db, &w.tenant).await?.id;
            let mut value = match config {
                Some(path) => serde_json::from_str(&std::fs::read_to_string(&path)?).map_err(|e| {
                    Error::invalid("invalid_json", Some("config"), format!("{} is not JSON: {e}", path.display()))
                })?,
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
            let connector = workspaces::http::parse_connector(&id, value)?;
            gatehouse::vault::slots::check_connector(settings.vault_keys.as_ref(), &connector)?;
            let bound = workspaces::add_connector(db, tenant, audit, &w.workspace, expected_version, &id, connector).await?;
            println!("{}", bound.workspace.bound_version);
        }
        ConnectorCommand::List { w } => {
            let tenant = tenants::by_slug(db, &w.tenant).await?.id;
            for (id, connector) in workspaces::bound(db, tenant, &w.workspace).await?.document.connectors {
                println!("{id}\t{}\t{}", connector.kind(), connector.url());
            }
        }
        ConnectorCommand::Remove { w, id } => {
            let tenant = tenants::by_slug(db, &w.tenant).await?.id;
            let bound = workspaces::remove_connector(db, tenant, audit, &w.workspace, None, &id).await?;
            println!("{}", bound.workspace.bound_version);
        }
    }
    Ok(())
}

fn json_arg(field: &'static str, raw: &str) -> Result<kv::BoundedValue, Error> {
    let value = serde_json::from_str(raw)
        .map_err(|e| Error::invalid("invalid_json", Some(field), format!("{field} is not JSON: {e}")))?;
    kv::BoundedValue::parse(value)
}

async fn kv_command(db: &Db, audit: &Audit, cmd: KvCommand) -> anyhow::Result<Outcome> {
    match cmd {
        KvCommand::Get { t, key } => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            match kv::get(db, tenant, &kv::Key::parse(&key)?).await? {
                Some(entry) => println!("{}", entry.value),
                None => return Ok(Outcome::Absent),
            }
        }
        KvCommand::Set { t, key, value, ttl_ms } => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            let (key, value, ttl) = (kv::Key::parse(&key)?, json_arg("value", &value)?, kv::validate_ttl(ttl_ms)?);
            kv::set(db, tenant, audit, &key, &value, ttl).await?;
        }
        KvCommand::Delete { t, key } => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            if !kv::delete(db, tenant, audit, &kv::Key::parse(&key)?).await? {
                return Ok(Outcome::Absent);
            }
        }
        KvCommand::List { t, prefix, after, limit } => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            let page = kv::list(db, tenant, &prefix, after.as_deref(), limit).await?;
            for e in page.entries {
                println!("{}\t{}", e.key, e.value);
            }
        }
        KvCommand::Cas { t, key, expect_absent, expect, next, delete, ttl_ms } => {
            let tenant = tenants::by_slug(db, &t.tenant).await?.id;
            let key = kv::Key::parse(&key)?;
            let expect = match (expect_absent, expect) {
                (true, _) => kv::Expect::Absent,
                (false, Some(raw)) => kv::Expect::Value(json_arg("expect", &raw)?),
                (false, None) => unreachable!("clap requires one of them"),
            };
            let next = match (delete, next) {
                (true, _) => kv::Next::Delete,
                (false, Some(raw)) => kv::Next::Value(json_arg("next", &raw)?),
                (false, None) => unreachable!("clap requires one of them"),
            };
            let swapped = kv::compare_and_set(db, tenant, audit, &key, &expect, &next, kv::validate_ttl(ttl_ms)?).await?;
            println!("{}", if swapped { "swapped" } else { "refused" });
            if !swapped {
                return Ok(Outcome::Refused);
            }
        }
    }
    Ok(Outcome::Ok)
}
