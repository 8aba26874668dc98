//! Schema migrations: one ordered list per backend, embedded in the binary and
//! applied at start.

/// `(version, sql)` pairs in the order they apply.
pub type Migrations = &'static [(i64, &'static str)];

pub const SQLITE: Migrations = &[
    (1, include_str!("../../migrations/sqlite/0001_init.sql")),
    (2, include_str!("../../migrations/sqlite/0002_invocations.sql")),
    (3, include_str!("../../migrations/sqlite/0003_invocation_chunks.sql")),
    (4, include_str!("../../migrations/sqlite/0004_compressed_chunks.sql")),
    (5, include_str!("../../migrations/sqlite/0005_versions.sql")),
    (6, include_str!("../../migrations/sqlite/0006_async_events.sql")),
    (7, include_str!("../../migrations/sqlite/0007_secrets.sql")),
    (8, include_str!("../../migrations/sqlite/0008_async_parked.sql")),
    (9, include_str!("../../migrations/sqlite/0009_async_fair.sql")),
    (10, include_str!("../../migrations/sqlite/0010_version_bytes.sql")),
    (11, include_str!("../../migrations/sqlite/0011_job_results.sql")),
];

pub const POSTGRES: Migrations = &[
    (1, include_str!("../../migrations/postgres/0001_init.sql")),
    (2, include_str!("../../migrations/postgres/0002_invocations.sql")),
    (3, include_str!("../../migrations/postgres/0003_invocation_chunks.sql")),
    (4, include_str!("../../migrations/postgres/0004_compressed_chunks.sql")),
    (5, include_str!("../../migrations/postgres/0005_cluster.sql")),
    (6, include_str!("../../migrations/postgres/0006_versions.sql")),
    (7, include_str!("../../migrations/postgres/0007_async_events.sql")),
    (8, include_str!("../../migrations/postgres/0008_secrets.sql")),
    (9, include_str!("../../migrations/postgres/0009_async_parked.sql")),
    (10, include_str!("../../migrations/postgres/0010_async_fair.sql")),
    (11, include_str!("../../migrations/postgres/0011_version_bytes.sql")),
    (12, include_str!("../../migrations/postgres/0012_job_results.sql")),
    (13, include_str!("../../migrations/postgres/0013_version_deletes.sql")),
    (14, include_str!("../../migrations/postgres/0014_leader_epoch.sql")),
];

/// Refuses a database that a newer sless migrated (`newest` is the highest
/// version it recorded): this binary would read what it does not know as
/// absent, and write over it. Starting the newer version again, or
/// restoring a copy from before the upgrade, is the way back.
pub fn refuse_newer(newest: Option<i64>, migrations: Migrations) -> anyhow::Result<()> {
    let known = migrations.last().map_or(0, |(version, _)| *version);
    match newest {
        Some(newest) if newest > known => anyhow::bail!(
            "the database was migrated by a newer sless (schema version {newest}; this sless {} knows versions up to {known}): \
             run the newer sless, or restore a copy of the data from before the upgrade",
            env!("CARGO_PKG_VERSION")
        ),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file of a backend's migrations directory is in its list, in
    /// order: a file left out is never applied, and nothing fails.
    #[test]
    fn every_migration_file_is_listed() {
        for (backend, list) in [("sqlite", SQLITE), ("postgres", POSTGRES)] {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("migrations")
                .join(backend);
            let mut paths: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
            paths.sort();
            let texts: Vec<String> = paths.iter().map(|p| std::fs::read_to_string(p).unwrap()).collect();
            let listed: Vec<&str> = list.iter().map(|(_, sql)| *sql).collect();
            assert_eq!(texts, listed, "{backend}: migrations/{backend} and the list differ");
            let versions: Vec<i64> = list.iter().map(|(v, _)| *v).collect();
            assert_eq!(versions, (1..=list.len() as i64).collect::<Vec<_>>(), "{backend}");
        }
    }
}
