-- One row per call of a handler, whatever fired it. The id starts with the
-- start time (hex microseconds), so ids order the records by time and range
-- deletes by id prune by age; one index serves the per-function listing.
CREATE TABLE invocations (
    id             TEXT PRIMARY KEY,
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
) WITHOUT ROWID;
CREATE INDEX invocations_by_function ON invocations (namespace, function, id);
