//! The registry of tenant-owned tables for a move between deployments: every table with a
//! `tenant_id` column (and `tenants` itself) is either exported, in the order an import
//! inserts it (parents before children), or excluded with the reason why. `tests/moves.rs`
//! checks this list against the database catalog, so a table added later that names a tenant
//! fails the suite until it is placed here. Why each table has its place: docs/decisions.md,
//! "Tenant export".

/// What a move does with one table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Every row of the tenant travels in the export.
    Export,
    /// Deliberately left behind, for the reason given.
    Excluded(&'static str),
}

/// One tenant-owned table.
#[derive(Clone, Copy, Debug)]
pub struct Table {
    pub name: &'static str,
    pub part: Part,
    /// Columns holding vault envelopes under the source's key ring: opened at export,
    /// carried as plaintext inside the sealed file only, sealed anew under the destination's
    /// ring at import.
    pub sealed: &'static [&'static str],
    /// Columns that differ between two faithful copies (a re-sealed envelope's key id, a
    /// last-used time that every authentication touches, the tenant's own status and epoch,
    /// which the seal and the import's own inserts move): left out of the digests.
    pub volatile: &'static [&'static str],
}

const fn export(name: &'static str) -> Table {
    Table { name, part: Part::Export, sealed: &[], volatile: &[] }
}

const fn exclude(name: &'static str, why: &'static str) -> Table {
    Table { name, part: Part::Excluded(why), sealed: &[], volatile: &[] }
}

/// Admin-log actions that a move itself writes after the export's snapshot, on one side only:
/// left out of the admin log's digest so both sides can be compared (their rows still travel).
pub const MOVE_ACTIONS: &[&str] = &["tenant.import", "tenant.verify", "tenant.seal", "tenant.unseal"];

/// Every tenant-owned table, exported ones in import order.
pub const TABLES: &[Table] = &[
    Table { volatile: &["status", "epoch", "updated_at"], ..export("tenants") },
    export("members"),
    export("invitations"),
    Table { volatile: &["last_used_at"], ..export("service_credentials") },
    Table { volatile: &["last_used_at"], ..export("access_tokens") },
    export("token_quotas"),
    export("permission_overrides"),
    Table { volatile: &["last_used_at"], ..export("scim_tokens") },
    export("scim_users"),
    export("scim_groups"),
    export("scim_group_members"),
    export("impersonation_settings"),
    export("kv_entries"),
    export("member_fences"),
    export("blueprints"),
    export("blueprint_versions"),
    export("workspaces"),
    export("workspace_versions"),
    export("connector_catalogs"),
    export("tool_pins"),
    Table { sealed: &["envelope"], volatile: &["key_id", "envelope"], ..export("credentials") },
    export("oauth_grants"),
    export("oauth_clients"),
    export("connect_links"),
    export("oauth_revocations"),
    export("mcp_clients"),
    export("mcp_grants"),
    export("mcp_codes"),
    export("mcp_tokens"),
    export("peer_bindings"),
    export("copies"),
    Table { sealed: &["envelope"], volatile: &["key_id", "envelope"], ..export("subject_keys") },
    export("erasure_receipts"),
    export("workspace_tombstones"),
    export("activity"),
    export("ops_failures"),
    export("ops_findings"),
    export("ops_suppress_rules"),
    export("quota_limits"),
    export("admin_log"),
    exclude("result_stash", "pages of results, kept minutes; an agent asks again"),
    exclude(
        "approvals",
        "calls held back for a decision, valid minutes and bound to the source's configuration versions; the admin log keeps their history",
    ),
    exclude("oauth_flows", "sign-ins to downstream providers in flight, kept minutes; their callback names the source"),
    exclude(
        "mail_outbox",
        "mails whose links name the source's base URL and carry its key ring's signature; links are issued again",
    ),
    exclude("report_viewers", "names database roles of the source's own PostgreSQL; granted again at the destination"),
    exclude("replica_acks", "the source's replicas' acknowledgements"),
    exclude("idempotency_keys", "answers to retried requests of the source deployment, kept a day"),
    exclude("agent_subscriptions", "connected agents' sessions on the source deployment, kept a day; agents subscribe again"),
    exclude("agent_log_levels", "connected agents' sessions on the source deployment, kept a day; agents set their level again"),
    exclude("tenant_moves", "each deployment's own record of the moves it took part in"),
    exclude(
        "sso_connections",
        "a tenant's OpenID clients are registered at its providers with the source's callback URL; registered again at the destination",
    ),
    exclude("sso_domains", "the email domains of the sso_connections left behind"),
    exclude("quota_windows", "budget leased by the source's replicas; windows start afresh at the destination"),
    exclude("quota_slots", "concurrency slots held by the source's replicas, which lapse in seconds"),
    exclude("impersonations", "grants to the source deployment's staff, at most an hour long; the admin log keeps their history"),
];

/// The registered table called `name`.
pub fn find(name: &str) -> Option<&'static Table> {
    TABLES.iter().find(|t| t.name == name)
}

/// The exported tables, in import order.
pub fn exported() -> impl Iterator<Item = &'static Table> {
    TABLES.iter().filter(|t| t.part == Part::Export)
}
