-- Chunk data is compressed (src/store/chunks.rs), so it is bytes; SQLite
-- stores them as BLOBs in the same column, and chunks written before stay
-- their plain JSON text, which reads back as it is. Nothing to change but
-- the version, which keeps both backends' schema versions in step.
SELECT 1;
