-- Secrets of a namespace: `data` is a JSON object of key -> sealed value
-- (AEAD, see src/secrets/cipher.rs), all sealed with the key `key_id`
-- names. No value is ever stored in clear.
CREATE TABLE IF NOT EXISTS secrets (
    namespace  TEXT NOT NULL,
    name       TEXT NOT NULL,
    key_id     TEXT NOT NULL,
    data       TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (namespace, name)
);

-- A changed secret rolls the functions that use it on every replica
-- (see 0005_cluster.sql).
CREATE OR REPLACE TRIGGER secrets_changed AFTER INSERT OR UPDATE OR DELETE ON secrets
    FOR EACH ROW EXECUTE FUNCTION sless_bump_revision();
