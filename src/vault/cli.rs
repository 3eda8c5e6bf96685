//! `gatehouse credential …` (connectors' credential slots) and `gatehouse vault rotate`.
//! Values never come from the command line, which shows in process lists: each `--field NAME`
//! reads `GATEHOUSE_FIELD_<NAME>` from the environment, else one line of stdin.

use clap::{Args, Subcommand};

use super::{
    Owner,
    slots::{self, Fields, Slot},
};
use crate::{
    admin_log::Audit,
    cli::Outcome,
    config::Config,
    db::Db,
    error::Error,
    oauth::client_auth,
    workspaces::{cli::WorkspaceArg, config::SlotKind},
};

#[derive(Subcommand)]
pub enum Command {
    /// Re-seal every credential under the active (first) key, in batches; prints counts. Run it
    /// with the new key first and the old one after it; then the old key can be removed.
    Rotate {
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(i64).range(1..=10_000))]
        batch: i64,
    },
}

/// Runs a `gatehouse vault` command.
pub async fn run(db: &Db, config: &Config, cmd: Command) -> anyhow::Result<Outcome> {
    let Command::Rotate { batch } = cmd;
    let ring = slots::require(config.vault_keys.as_ref())?;
    let done = slots::rotate(db, ring, batch).await?;
    println!("resealed\t{}\nalready_current\t{}\nunreadable\t{}", done.resealed, done.already_current, done.unreadable);
    Ok(Outcome::Ok)
}

/// Which slot: `--tenant --workspace --connector`, and whose.
#[derive(Args)]
#[command(about = None, long_about = None)]
pub struct SlotArg {
    #[command(flatten)]
    w: WorkspaceArg,
    #[arg(long)]
    connector: String,
    /// The personal slot of this member (by id) instead of the shared one.
    #[arg(long, conflicts_with = "oauth_client")]
    personal_for: Option<uuid::Uuid>,
    /// The connector's static confidential OAuth client's slot (one field: `client_secret`, or
    /// `private_key`, a PKCS#8 PEM for `private_key_jwt`).
    #[arg(long)]
    oauth_client: bool,
}

#[derive(Subcommand)]
pub enum SlotCommand {
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

/// Field values from `GATEHOUSE_FIELD_<NAME>`, else one stdin line each, in order.
fn field_values(names: &[String]) -> anyhow::Result<Fields> {
    let mut fields = Fields(Default::default());
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

/// Runs a `gatehouse credential` command.
pub async fn run_slot(db: &Db, audit: &Audit, config: &Config, cmd: SlotCommand) -> anyhow::Result<Outcome> {
    let (SlotCommand::Set { s, .. } | SlotCommand::Remove { s } | SlotCommand::Show { s }) = &cmd;
    let tenant = s.w.t.resolve(db).await?;
    let (kind, owner) = match (s.personal_for, s.oauth_client) {
        (_, true) => (SlotKind::Shared, Owner::OauthClient),
        (None, false) => (SlotKind::Shared, Owner::Shared),
        (Some(member), false) => (SlotKind::Personal, Owner::Member(member)),
    };
    let (workspace, connector) = if s.oauth_client {
        (client_auth::confidential_connector(db, tenant, &s.w.workspace, &s.connector).await?, None)
    } else {
        let (w, c) = slots::resolve(db, tenant, &s.w.workspace, &s.connector, kind).await?;
        (w, Some(c))
    };
    let slot = Slot { tenant, workspace, connector: &s.connector, owner };
    let meta = match &cmd {
        SlotCommand::Set { fields, .. } => {
            let ring = slots::require(config.vault_keys.as_ref())?;
            let values = field_values(fields)?;
            match &connector {
                Some(connector) => slots::check_fields(connector, &values.0)?,
                None => client_auth::check_client_fields(&values.0)?,
            }
            slots::set(db, ring, audit, slot, kind, values).await?
        }
        SlotCommand::Remove { .. } => {
            slots::require(config.vault_keys.as_ref())?;
            return match slots::remove(db, audit, slot).await {
                Ok(()) => Ok(Outcome::Ok),
                Err(Error::NotFound { .. }) => Ok(Outcome::Absent),
                Err(e) => Err(e.into()),
            };
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
