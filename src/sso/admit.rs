//! Admission at sign-in through a tenant's own connection: who may join, and with which role.

use chrono::{DateTime, Utc};

use super::{Connection, Jit, domain_of};
use crate::{
    admin_log::Audit,
    error::{Error, Result},
    ids::TenantId,
    members::{self, Role},
    sessions::Principal,
};

/// Who a connection's provider says signed in (from the verified ID token).
pub struct SignIn<'a> {
    pub principal: &'a Principal,
    pub email: Option<&'a str>,
    pub email_verified: bool,
    pub name: Option<&'a str>,
    /// Every claim of the ID token (the groups claim among them).
    pub claims: &'a serde_json::Map<String, serde_json::Value>,
}

/// The role the connection maps the ID token's groups to: the highest mapped value present,
/// else the default role.
pub fn mapped_role(connection: &Connection, claims: &serde_json::Map<String, serde_json::Value>) -> Role {
    let values: Vec<&str> = match claims.get(&connection.groups_claim) {
        Some(serde_json::Value::String(s)) => vec![s.as_str()],
        Some(serde_json::Value::Array(items)) => items.iter().filter_map(|v| v.as_str()).collect(),
        _ => Vec::new(),
    };
    values
        .iter()
        .filter_map(|v| connection.role_mapping.get(*v).copied())
        .max_by_key(|r| rank(*r))
        .unwrap_or(connection.default_role)
}

fn rank(role: Role) -> u8 {
    match role {
        Role::Member => 0,
        Role::Operator => 1,
        Role::Admin => 2,
        Role::Owner => 3,
    }
}

/// Admits `identity` into the connection's tenant inside the sign-in transaction (platform
/// context): the email must be verified and of one of the connection's domains; the tenant's
/// own invitations for it are accepted; a person still not a member joins when the connection
/// creates members (`jit: create`), else is refused `sso_not_provisioned`; when the connection
/// maps groups, the member's role follows the groups claim (owners keep theirs). Every change
/// is admin-logged.
pub async fn admit(
    conn: &mut sqlx::PgConnection,
    audit: &Audit,
    tenant: TenantId,
    c: &Connection,
    who: &SignIn<'_>,
    started_at: DateTime<Utc>,
) -> Result<()> {
    let email = who.email.and_then(|e| members::normalize_email(e).ok());
    let Some(email) = email.filter(|e| who.email_verified && domain_of(e).is_some_and(|d| c.email_domains.contains(&d))) else {
        return Err(Error::Forbidden {
            code: "sso_email_not_allowed",
            message: "this connection signs in verified email addresses of its domains only".into(),
        });
    };
    let (p, name) = (who.principal, who.name);
    members::accept_invitations_in(&mut *conn, audit, p, &email, name, started_at, Some(tenant)).await?;
    // A connection that maps groups decides the role at every sign-in; one that maps none
    // leaves roles to the tenant (an invitation's, an admin's change), and gives new members
    // its default role.
    let from_groups = (!c.role_mapping.is_empty()).then(|| mapped_role(c, who.claims));
    match members::tx::by_principal(&mut *conn, tenant, p).await? {
        Some(member) => {
            if let Some(role) = from_groups {
                members::set_role_in(&mut *conn, tenant, audit, &member, role).await?;
            }
        }
        None if c.jit == Jit::Create => {
            let role = from_groups.unwrap_or(c.default_role);
            members::join_in(&mut *conn, tenant, audit, p, &email, name, role, started_at).await?
        }
        None => {
            return Err(Error::Forbidden {
                code: "sso_not_provisioned",
                message: "you are not a member of this organisation yet; ask an admin to invite you".into(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn identity(groups: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        [("groups".to_owned(), groups)].into_iter().collect()
    }

    #[test]
    fn the_highest_mapped_group_wins_else_the_default() {
        let conn = Connection {
            id: uuid::Uuid::nil(),
            name: "Okta".into(),
            issuer: "https://acme.okta.example".into(),
            client_id: "gatehouse".into(),
            auth_method: super::super::AuthMethod::ClientSecretBasic,
            email_domains: vec!["acme.example".into()],
            groups_claim: "groups".into(),
            role_mapping: [("eng".to_owned(), Role::Operator), ("admins".to_owned(), Role::Admin)].into(),
            default_role: Role::Member,
            jit: Jit::Invitation,
            version: 1,
            created_by: String::new(),
            created_at: Utc::now(),
            updated_at: Utc::now(),
        };
        assert_eq!(mapped_role(&conn, &identity(json!(["eng", "admins"]))), Role::Admin);
        assert_eq!(mapped_role(&conn, &identity(json!("eng"))), Role::Operator);
        assert_eq!(mapped_role(&conn, &identity(json!(["other"]))), Role::Member);
        assert_eq!(mapped_role(&conn, &identity(json!(42))), Role::Member);
    }
}
