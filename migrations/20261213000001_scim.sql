-- SCIM 2.0 provisioning per tenant (issue 22 item 2).
--
-- A tenant's directory (its IdP) authenticates with a SCIM bearer token (`gsm_` + 43
-- characters), minted by a tenant admin and stored only as its SHA-256, like access tokens.
CREATE TABLE scim_tokens (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    token_hash bytea NOT NULL CONSTRAINT scim_tokens_hash_key UNIQUE,
    prefix text NOT NULL,
    name text NOT NULL CHECK (length(name) BETWEEN 1 AND 80),
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at timestamptz,
    PRIMARY KEY (tenant_id, id)
);
SELECT gatehouse_scope_to_tenant('scim_tokens');
GRANT SELECT, INSERT, UPDATE ON scim_tokens TO gatehouse_app;

-- The directory's Users. `attrs` holds the core attributes the directory set (validated
-- against the published schema; `id`, `meta` and `groups` are the server's); `user_name_key`
-- is userName lowercased (userName is caseExact false, unique per tenant); `email` is the
-- primary (else first) email lowercased: it links the User to the tenant's member of that
-- address, whom deprovisioning removes.
CREATE TABLE scim_users (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    user_name_key text NOT NULL,
    external_id text,
    active boolean NOT NULL DEFAULT true,
    email text,
    attrs jsonb NOT NULL,
    version bigint NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT scim_users_user_name_key UNIQUE (tenant_id, user_name_key)
);
CREATE INDEX scim_users_email ON scim_users (tenant_id, email) WHERE email IS NOT NULL;
SELECT gatehouse_scope_to_tenant('scim_users');
GRANT SELECT, INSERT, UPDATE, DELETE ON scim_users TO gatehouse_app;

-- The directory's Groups. A group whose displayName is a role name (admin, operator,
-- member) gives that role to the members of its Users.
CREATE TABLE scim_groups (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    display_name_key text NOT NULL,
    external_id text,
    attrs jsonb NOT NULL,
    version bigint NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT scim_groups_display_name_key UNIQUE (tenant_id, display_name_key)
);
SELECT gatehouse_scope_to_tenant('scim_groups');
GRANT SELECT, INSERT, UPDATE, DELETE ON scim_groups TO gatehouse_app;

CREATE TABLE scim_group_members (
    tenant_id uuid NOT NULL,
    group_id uuid NOT NULL,
    user_id uuid NOT NULL,
    -- The member value as the directory sent it (`value`, `display`, `type`); `$ref` is
    -- derived when it is shown.
    entry jsonb NOT NULL,
    PRIMARY KEY (tenant_id, group_id, user_id),
    FOREIGN KEY (tenant_id, group_id) REFERENCES scim_groups (tenant_id, id) ON DELETE CASCADE,
    FOREIGN KEY (tenant_id, user_id) REFERENCES scim_users (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX scim_group_members_user ON scim_group_members (tenant_id, user_id);
SELECT gatehouse_scope_to_tenant('scim_group_members');
GRANT SELECT, INSERT, UPDATE, DELETE ON scim_group_members TO gatehouse_app;
