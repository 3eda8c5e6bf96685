//! `gatehouse report`: the SQL reports (views of the `report` schema) from the command line.

use clap::Args;

use crate::{
    cli::Outcome,
    db::{Db, Scope},
    tenants::cli::TenantArg,
};

#[derive(Args)]
pub struct ReportArgs {
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

/// Runs `gatehouse report` (`--list`, or one report by name).
pub async fn run(db: &Db, args: ReportArgs) -> anyhow::Result<Outcome> {
    if args.list {
        for r in super::list(db).await? {
            println!("{}\t{}", r.name, r.description);
        }
        return Ok(Outcome::Ok);
    }
    let format = super::Format::parse(&args.format)?;
    let scope = match args.tenant {
        Some(tenant) => Scope::Tenant(TenantArg { tenant }.resolve(db).await?),
        None => Scope::Platform { reason: "report from the command line" },
    };
    let out = super::run(db, scope, args.name.as_deref().unwrap_or_default()).await?;
    print!("{}", super::render(&out, format));
    if out.truncated {
        eprintln!("truncated at {} rows", super::ROW_CAP);
    }
    Ok(Outcome::Ok)
}
