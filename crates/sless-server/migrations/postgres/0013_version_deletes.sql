-- A version deleted (by hand, or pruned after a build) is a change the
-- replicas converge on (see 0005_cluster.sql): each retires its copy,
-- which calls by number would otherwise keep serving.
CREATE OR REPLACE TRIGGER function_versions_deleted AFTER DELETE ON function_versions
    FOR EACH STATEMENT EXECUTE FUNCTION sless_bump_revision();
