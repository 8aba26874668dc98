-- Functions, triggers and jobs share one table: the spec and status are JSON
-- documents whose shape the API types own.
CREATE TABLE resources (
    kind       TEXT NOT NULL,
    namespace  TEXT NOT NULL,
    name       TEXT NOT NULL,
    spec       TEXT NOT NULL,
    status     TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (kind, namespace, name)
);

CREATE TABLE tokens (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    hash       TEXT NOT NULL UNIQUE,
    namespaces TEXT NOT NULL,
    admin      BOOLEAN NOT NULL,
    created_at TEXT NOT NULL
);
