-- Invocation records in chunks (src/store/chunks.rs): one row per function
-- per written batch, its records a JSON array in id order, each record an
-- array of its fields (the order is chunks.rs's Row). Recording then
-- costs one row per chunk, not per call. Existing records move over as
-- chunks of one.
CREATE TABLE invocation_chunks (
    namespace TEXT NOT NULL,
    function  TEXT NOT NULL,
    first_id  TEXT NOT NULL,
    last_id   TEXT NOT NULL,
    records   BIGINT NOT NULL,
    data      TEXT NOT NULL
);
CREATE UNIQUE INDEX invocation_chunks_by_function ON invocation_chunks (namespace, function, last_id);
CREATE INDEX invocation_chunks_by_last ON invocation_chunks (last_id);
CREATE INDEX invocation_chunks_by_first ON invocation_chunks (first_id);
INSERT INTO invocation_chunks (namespace, function, first_id, last_id, records, data)
SELECT namespace, function, id, id, 1, json_build_array(json_build_array(
    id, version, trigger, request_id, started_at, duration_ms, status, error, bytes_in, bytes_out,
    cold_start, logs::json, logs_truncated))::text
FROM invocations;
DROP TABLE invocations;
