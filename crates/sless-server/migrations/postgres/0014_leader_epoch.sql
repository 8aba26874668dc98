-- The leader's fencing token (written to apply twice harmlessly): a replica
-- that takes the leader lock bumps `epoch` on the lock's own session before
-- it leads, and a version is recorded only in a transaction that finds the
-- epoch its leader took (reading it FOR SHARE, so a new leader's bump waits
-- for that transaction to end). A leader that lost the lock while it built,
-- stalled or cut off, can then record nothing once another has taken over.
CREATE TABLE IF NOT EXISTS cluster_leader (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    epoch BIGINT NOT NULL
);
INSERT INTO cluster_leader (id, epoch) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;
