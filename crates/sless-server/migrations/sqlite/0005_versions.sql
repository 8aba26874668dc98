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
