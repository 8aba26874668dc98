-- Chunk data is compressed (src/store/chunks.rs), so it is bytes; chunks
-- written before stay their plain JSON text, which reads back as it is.
ALTER TABLE invocation_chunks ALTER COLUMN data TYPE BYTEA USING convert_to(data, 'UTF8');
