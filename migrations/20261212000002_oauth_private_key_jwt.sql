-- `private_key_jwt` (RFC 7523 §2.2) beside the secret-bearing methods (issue 27 §1, §2): a
-- static confidential client whose `oauth_client` credential is a private key signs a JWT
-- assertion for each token (and revocation) request. Flows, grants and revocation intents
-- record it as they record the others.
ALTER TABLE oauth_flows
    DROP CONSTRAINT oauth_flows_client_auth_check,
    ADD CONSTRAINT oauth_flows_client_auth_check
        CHECK (client_auth IN ('none', 'client_secret_basic', 'client_secret_post', 'private_key_jwt'));
ALTER TABLE oauth_grants
    DROP CONSTRAINT oauth_grants_client_auth_check,
    ADD CONSTRAINT oauth_grants_client_auth_check
        CHECK (client_auth IN ('none', 'client_secret_basic', 'client_secret_post', 'private_key_jwt'));
ALTER TABLE oauth_revocations
    DROP CONSTRAINT oauth_revocations_client_auth_check,
    ADD CONSTRAINT oauth_revocations_client_auth_check
        CHECK (client_auth IN ('none', 'client_secret_basic', 'client_secret_post', 'private_key_jwt'));
