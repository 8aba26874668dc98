-- What each version keeps (src/deploy/storage.rs): its artifact (files on
-- the disk that built it, or its tarball in the object store) and its
-- uploaded archive, so that a namespace's kept versions are held to
-- SLESS_NS_MAX_STORAGE_MB. Versions recorded before count 0.
ALTER TABLE function_versions ADD COLUMN IF NOT EXISTS artifact_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE function_versions ADD COLUMN IF NOT EXISTS archive_bytes BIGINT NOT NULL DEFAULT 0;
