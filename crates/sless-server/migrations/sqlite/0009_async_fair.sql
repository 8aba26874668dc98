-- Claims are fair between namespaces (src/async_invoke/deliver.rs): a claim
-- lists the namespaces with a due event, then takes each one's oldest due
-- events. Both walk this index, whatever one namespace's backlog holds; the
-- index on due_at alone, which the single oldest-first claim used, goes.
CREATE INDEX IF NOT EXISTS async_events_due_by_namespace ON async_events (namespace, due_at)
    WHERE status IN ('queued', 'running');
DROP INDEX IF EXISTS async_events_due;
