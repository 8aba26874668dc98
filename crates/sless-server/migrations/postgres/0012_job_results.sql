-- A large part of a record, kept out of what lists read: a job's result
-- over 8 KiB (src/jobs.rs). The leader and every quota check list a
-- namespace's jobs; 400 results of 1 MiB in their status made each of
-- those reads 400 MB.
ALTER TABLE resources ADD COLUMN IF NOT EXISTS detail TEXT;
