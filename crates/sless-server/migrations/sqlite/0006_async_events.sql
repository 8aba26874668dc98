-- Asynchronous invocations (src/async_invoke/): one row per event, stored
-- before the caller gets its 202. Times are microseconds since the epoch.
-- `due_at` is when a queued event's next attempt may start, or, while it
-- runs, when its lease ends (then any replica may take it again); a claim
-- takes rows whose status is queued or running and whose due_at has passed.
CREATE TABLE IF NOT EXISTS async_events (
    id                TEXT PRIMARY KEY,
    namespace         TEXT NOT NULL,
    function          TEXT NOT NULL,
    request_id        TEXT NOT NULL,
    method            TEXT NOT NULL,
    path              TEXT NOT NULL,
    query             TEXT NOT NULL,
    headers           TEXT NOT NULL,
    body              BLOB NOT NULL,
    status            TEXT NOT NULL,
    attempts          BIGINT NOT NULL DEFAULT 0,
    due_at            BIGINT NOT NULL,
    claim             TEXT,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL,
    succeeded_attempt BIGINT,
    last_error        TEXT,
    last_status       BIGINT,
    destination_error TEXT,
    source            TEXT
);
CREATE INDEX IF NOT EXISTS async_events_due ON async_events (due_at)
    WHERE status IN ('queued', 'running');
CREATE INDEX IF NOT EXISTS async_events_backlog ON async_events (namespace, function, created_at)
    WHERE status IN ('queued', 'running');
CREATE INDEX IF NOT EXISTS async_events_by_function ON async_events (namespace, function, id);
CREATE INDEX IF NOT EXISTS async_events_finished ON async_events (updated_at)
    WHERE status IN ('succeeded', 'failed');
