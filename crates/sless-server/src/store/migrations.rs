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
];
