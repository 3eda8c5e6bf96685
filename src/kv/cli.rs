//! `gatehouse kv …`: a tenant's key-value store from the command line.

use clap::Subcommand;

use crate::{admin_log::Audit, cli::Outcome, db::Db, error::Error, tenants::cli::TenantArg};

#[derive(Subcommand)]
pub enum Command {
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

fn json_arg(field: &'static str, raw: &str) -> Result<super::BoundedValue, Error> {
    let value = serde_json::from_str(raw)
        .map_err(|e| Error::invalid("invalid_json", Some(field), format!("{field} is not JSON: {e}")))?;
    super::BoundedValue::parse(value)
}

/// Runs a `gatehouse kv` command.
pub async fn run(db: &Db, audit: &Audit, cmd: Command) -> anyhow::Result<Outcome> {
    use super::{Expect, Key, Next, validate_ttl};
    match cmd {
        Command::Get { t, key } => match super::get(db, t.resolve(db).await?, &Key::parse(&key)?).await? {
            Some(entry) => println!("{}", entry.value),
            None => return Ok(Outcome::Absent),
        },
        Command::Set { t, key, value, ttl_ms } => {
            let tenant = t.resolve(db).await?;
            let (key, value, ttl) = (Key::parse(&key)?, json_arg("value", &value)?, validate_ttl(ttl_ms)?);
            super::set(db, tenant, audit, &key, &value, ttl).await?;
        }
        Command::Delete { t, key } => {
            let tenant = t.resolve(db).await?;
            if !super::delete(db, tenant, audit, &Key::parse(&key)?).await? {
                return Ok(Outcome::Absent);
            }
        }
        Command::List { t, prefix, after, limit } => {
            let page = super::list(db, t.resolve(db).await?, &prefix, after.as_deref(), limit).await?;
            for e in page.entries {
                println!("{}\t{}", e.key, e.value);
            }
        }
        Command::Cas { t, key, expect_absent, expect, next, delete, ttl_ms } => {
            let tenant = t.resolve(db).await?;
            let key = Key::parse(&key)?;
            let expect = match (expect_absent, expect) {
                (true, _) => Expect::Absent,
                (false, Some(raw)) => Expect::Value(json_arg("expect", &raw)?),
                (false, None) => unreachable!("clap requires one of them"),
            };
            let next = match (delete, next) {
                (true, _) => Next::Delete,
                (false, Some(raw)) => Next::Value(json_arg("next", &raw)?),
                (false, None) => unreachable!("clap requires one of them"),
            };
            let swapped = super::compare_and_set(db, tenant, audit, &key, &expect, &next, validate_ttl(ttl_ms)?).await?;
            println!("{}", if swapped { "swapped" } else { "refused" });
            if !swapped {
                return Ok(Outcome::Refused);
            }
        }
    }
    Ok(Outcome::Ok)
}
