-- Several replicas on one database (written to apply twice harmlessly). `cluster_revision` counts changes to
-- resources that replicas must converge on (any insert or delete, a spec
-- change, a function's status): each replica polls it and reconciles when
-- it moved. Trigger and job status updates (a cron tick, a job's progress)
-- do not count: no replica acts on them.
CREATE TABLE IF NOT EXISTS cluster_revision (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    value BIGINT NOT NULL
);
INSERT INTO cluster_revision (id, value) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;

CREATE OR REPLACE FUNCTION sless_bump_revision() RETURNS trigger AS $$
BEGIN
    UPDATE cluster_revision SET value = value + 1 WHERE id = 1;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS resources_added_or_removed ON resources;
CREATE OR REPLACE TRIGGER resources_added_or_removed AFTER INSERT OR DELETE ON resources
    FOR EACH ROW EXECUTE FUNCTION sless_bump_revision();
DROP TRIGGER IF EXISTS resources_changed ON resources;
CREATE OR REPLACE TRIGGER resources_changed AFTER UPDATE ON resources
    FOR EACH ROW WHEN (OLD.spec IS DISTINCT FROM NEW.spec OR NEW.kind = 'function')
    EXECUTE FUNCTION sless_bump_revision();

-- Every live replica: a heartbeat (the database's clock) and whether it leads.
CREATE TABLE IF NOT EXISTS cluster_replicas (
    id           TEXT PRIMARY KEY,
    address      TEXT NOT NULL,
    started_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    leader       BOOLEAN NOT NULL DEFAULT FALSE
);

-- The version of each function a replica serves (or, after a failed
-- deploy, refuses to serve anything older than): a new version becomes
-- Ready once every live replica has it here.
CREATE TABLE IF NOT EXISTS served_versions (
    replica   TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name      TEXT NOT NULL,
    version   BIGINT NOT NULL,
    PRIMARY KEY (replica, namespace, name)
);
