-- RFC 9207: the issuer a flow's authorization request went to, exactly as its metadata
-- names it, and whether that server promised an `iss` on its authorization responses. The
-- callback compares the response's `iss` with it byte for byte (a mix-up defence).
ALTER TABLE oauth_flows
    ADD COLUMN issuer text,
    ADD COLUMN iss_required boolean NOT NULL DEFAULT false;
