// Development OpenID provider for the compose stack. NOT FOR PRODUCTION.
//
// One static confidential client (Gatehouse), authorization code flow, and
// oidc-provider's built-in development login page: any login name signs in
// as that subject, with an email of `<name>@example.test`. Signing keys are
// generated at start, so sessions and tokens do not survive a restart.
import { readFileSync } from 'node:fs';
import Provider from 'oidc-provider';

const env = (name, fallback) => process.env[name] || fallback;

const issuer = env('OIDC_ISSUER', 'http://oidc:3000');
const port = Number(env('PORT', '3000'));
const publicUrl = env('GATEHOUSE_PUBLIC_URL', 'http://localhost:8080').replace(/\/+$/, '');

const configuration = {
  clients: [
    {
      client_id: env('OIDC_CLIENT_ID', 'gatehouse'),
      client_secret: env('OIDC_CLIENT_SECRET', 'dev-only-oidc-client-secret-NOT-FOR-PRODUCTION'),
      redirect_uris: [`${publicUrl}/auth/callback`],
      post_logout_redirect_uris: [`${publicUrl}/`],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  // PKCE is accepted (S256) and, for a confidential client, not demanded:
  // oidc-provider's default. Gatehouse sends it anyway.
  // Put the scope's claims in the ID token too, not only behind userinfo.
  conformIdTokenClaims: false,
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'preferred_username', 'groups'],
  },
  async findAccount(_ctx, id) {
    return {
      accountId: id,
      async claims() {
        // OIDC_GROUPS_FILE (tests): a JSON object of login → groups, read at every sign-in,
        // so a test can change a person's groups between two sign-ins.
        const groupsFile = process.env.OIDC_GROUPS_FILE;
        const groups = groupsFile ? JSON.parse(readFileSync(groupsFile, 'utf8'))[id] : undefined;
        return {
          sub: id,
          name: id,
          preferred_username: id,
          email: `${id}@${env('OIDC_EMAIL_DOMAIN', 'example.test')}`,
          email_verified: true,
          ...(groups ? { groups } : {}),
        };
      },
    };
  },
  cookies: {
    keys: env('OIDC_COOKIE_KEYS', 'dev-only-cookie-key-NOT-FOR-PRODUCTION').split(','),
  },
  features: {
    devInteractions: { enabled: true },
  },
};

// Optional: a public client (PKCE, no secret) for Gatehouse's downstream OAuth, as a
// connector's authorization server (tests). Refresh tokens for it, rotated on every use.
const downstreamClient = process.env.OIDC_DOWNSTREAM_CLIENT_ID;
if (downstreamClient) {
  // With OIDC_DOWNSTREAM_CLIENT_SECRET it is a confidential client instead, authenticating by
  // OIDC_DOWNSTREAM_AUTH_METHOD (default client_secret_basic).
  const downstreamSecret = process.env.OIDC_DOWNSTREAM_CLIENT_SECRET;
  configuration.clients.push({
    client_id: downstreamClient,
    ...(downstreamSecret ? { client_secret: downstreamSecret } : {}),
    redirect_uris: [`${publicUrl}/oauth/callback`],
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    token_endpoint_auth_method: downstreamSecret ? env('OIDC_DOWNSTREAM_AUTH_METHOD', 'client_secret_basic') : 'none',
  });
  // OIDC_CLIENT_CREDENTIALS=1: the confidential downstream client may also use the client
  // credentials grant (no person; a token for the resource it names).
  if (env('OIDC_CLIENT_CREDENTIALS', '') === '1') {
    configuration.features.clientCredentials = { enabled: true };
    configuration.clients.at(-1).grant_types.push('client_credentials');
  }
  // The token endpoint methods the metadata advertises (e.g. only `none,client_secret_post`).
  if (process.env.OIDC_CLIENT_AUTH_METHODS) {
    configuration.clientAuthMethods = process.env.OIDC_CLIENT_AUTH_METHODS.split(',');
    const secretMethod = configuration.clientAuthMethods.find((m) => m.startsWith('client_secret_'));
    configuration.clients[0].token_endpoint_auth_method = secretMethod;
  }
  // RFC 8707: a token asked for a resource is an opaque token for that audience only, which
  // the resource checks by introspection (the sign-in client may introspect).
  configuration.features.resourceIndicators = {
    enabled: true,
    defaultResource: async (_ctx, _client, oneOf) => oneOf,
    useGrantedResource: async () => true,
    getResourceServerInfo: async (_ctx, resource) => ({
      scope: 'openid email profile mcp',
      audience: resource,
      accessTokenFormat: 'opaque',
      accessTokenTTL: Number(env('OIDC_ACCESS_TOKEN_TTL', '3600')),
    }),
  };
  configuration.features.introspection = { enabled: true };
  // Client ID Metadata Documents (draft-02): advertised in the metadata.
  if (env('OIDC_CIMD', '') === '1') {
    configuration.features.clientIdMetadataDocument = { enabled: true, ack: 'draft-02' };
  }
  // Tests only: fetch documents from loopback. oidc-provider refuses special-use addresses by
  // default (SSRF protection), as it should everywhere else.
  if (env('OIDC_FETCH_LOOPBACK', '') === '1') {
    configuration.fetch = (url, options) => {
      delete options.dispatcher;
      return globalThis.fetch(url, options);
    };
  }
  configuration.issueRefreshToken = async (_ctx, client) => client.grantTypeAllowed('refresh_token');
  configuration.features.revocation = { enabled: env('OIDC_REVOCATION', '') === '1' };
  // Open dynamic client registration (RFC 7591), for clients that register themselves.
  configuration.features.registration = { enabled: env('OIDC_REGISTRATION', '') === '1' };
  const ttl = Number(env('OIDC_ACCESS_TOKEN_TTL', '3600'));
  configuration.ttl = { AccessToken: ttl, RefreshToken: 86400, AuthorizationCode: 600, Grant: 86400, Session: 86400, Interaction: 3600 };
}

// OIDC_CLIENT_AUTH_METHOD (tests): how the sign-in client authenticates at the token endpoint:
// client_secret_post, or private_key_jwt with its public keys in OIDC_CLIENT_JWKS (a JWK set).
const signInAuth = process.env.OIDC_CLIENT_AUTH_METHOD;
if (signInAuth) {
  const client = configuration.clients[0];
  client.token_endpoint_auth_method = signInAuth;
  if (signInAuth === 'private_key_jwt') {
    delete client.client_secret;
    client.jwks = JSON.parse(process.env.OIDC_CLIENT_JWKS);
  }
}

const provider = new Provider(issuer, configuration);

// Optional: counts of token-endpoint refreshes and revocations at GET /_stats (tests assert
// that a refresh token is never sent twice).
if (env('OIDC_TEST_STATS', '') === '1') {
  const stats = {
    refresh_requests: 0, refresh_failures: 0, client_credentials_requests: 0, revocations: 0, authorizations: [], tokens: [],
  };
  // How a client authenticated: Basic header, secret in the body, or neither.
  const auth = (ctx) => (ctx.headers.authorization?.startsWith('Basic ') ? 'client_secret_basic'
    : ctx.oidc?.body?.client_secret ? 'client_secret_post' : 'none');
  provider.use(async (ctx, next) => {
    if (ctx.path === '/_stats') {
      ctx.body = stats;
      return;
    }
    await next();
    if (ctx.oidc?.route === 'token' && ctx.oidc?.params?.grant_type === 'refresh_token') {
      stats.refresh_requests += 1;
      if (ctx.status >= 400) stats.refresh_failures += 1;
    }
    if (ctx.oidc?.route === 'token' && ctx.oidc?.params?.grant_type === 'client_credentials') {
      stats.client_credentials_requests += 1;
    }
    if (ctx.oidc?.route === 'revocation') {
      stats.revocations += 1;
      stats.tokens.push({ route: 'revocation', auth: auth(ctx), status: ctx.status });
    }
    if (ctx.oidc?.route === 'authorization') stats.authorizations.push({ resource: ctx.oidc?.params?.resource ?? null });
    if (ctx.oidc?.route === 'token') {
      stats.tokens.push({
        route: 'token', grant_type: ctx.oidc?.params?.grant_type, resource: ctx.oidc?.params?.resource ?? null,
        auth: auth(ctx), status: ctx.status,
      });
    }
  });
}

const server = provider.listen(port, () => {
  console.log(`development OpenID provider: issuer ${issuer}, listening on :${port}`);
  console.log(`client redirect URI: ${publicUrl}/auth/callback`);
});

for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
