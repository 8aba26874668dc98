-- Every successful build of a function is a version; aliases point at one
-- (optionally sending a share of calls to a second, `weights` as JSON).
CREATE TABLE IF NOT EXISTS function_versions (
    namespace       TEXT NOT NULL,
    function        TEXT NOT NULL,
    version         BIGINT NOT NULL,
    code_hash       TEXT NOT NULL,
    artifact        TEXT NOT NULL,
    artifact_digest TEXT,
    spec            TEXT NOT NULL,
    built_at        TEXT NOT NULL,
    PRIMARY KEY (namespace, function, version)
);

CREATE TABLE IF NOT EXISTS function_aliases (
    namespace  TEXT NOT NULL,
    function   TEXT NOT NULL,
    name       TEXT NOT NULL,
    version    BIGINT NOT NULL,
    weights    TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (namespace, function, name)
);

-- Replicas route aliases from their own table: a moved alias is a change
-- they converge on (see 0005_cluster.sql).
CREATE OR REPLACE TRIGGER function_aliases_changed AFTER INSERT OR UPDATE OR DELETE ON function_aliases
    FOR EACH ROW EXECUTE FUNCTION sless_bump_revision();
