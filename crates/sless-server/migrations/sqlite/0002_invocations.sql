-- One row per call of a handler, whatever fired it. `seq` orders them.
CREATE TABLE invocations (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    id             TEXT NOT NULL UNIQUE,
    namespace      TEXT NOT NULL,
    function       TEXT NOT NULL,
    version        BIGINT NOT NULL,
    trigger        TEXT NOT NULL,
    request_id     TEXT NOT NULL,
    started_at     TEXT NOT NULL,
    duration_ms    REAL NOT NULL,
    status         TEXT NOT NULL,
    error          TEXT,
    bytes_in       BIGINT NOT NULL,
    bytes_out      BIGINT NOT NULL,
    cold_start     BOOLEAN NOT NULL,
    logs           TEXT NOT NULL,
    logs_truncated BOOLEAN NOT NULL
);
CREATE INDEX invocations_by_function ON invocations (namespace, function, seq);
CREATE INDEX invocations_by_time ON invocations (started_at);
