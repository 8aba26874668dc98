//! Who leads: one replica at a time holds a PostgreSQL session-level
//! advisory lock on a connection of its own (not one of the pool's, which
//! come and go) and leads while it holds it. The others try to take it
//! every [`CAMPAIGN_PERIOD`]; the database releases it the moment the
//! leader's session ends, so when a leader dies (its socket closes with
//! the process) another takes over within one period. The leader checks
//! its connection every [`HEALTH_PERIOD`] and steps down as soon as a check
//! fails, since the lock may be gone with the session. On SQLite there is
//! one replica, and it always leads.

use std::sync::Arc;
use std::time::Duration;

use sqlx::{Connection, PgConnection};
use tokio::sync::{watch, Notify};

/// How often a follower tries to take the lock.
pub const CAMPAIGN_PERIOD: Duration = Duration::from_millis(500);
/// How often the leader checks the connection that holds the lock.
const HEALTH_PERIOD: Duration = Duration::from_millis(1000);
/// How long a check may take before the leader steps down.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
/// The advisory lock key ("sless-ld"). Advisory locks are per database, so
/// each database elects its own leader.
const LEADER_LOCK: i64 = 0x736c_6573_732d_6c64;

/// This replica's view of who leads.
pub struct Leadership {
    leading: watch::Sender<bool>,
    resign: Notify,
    campaign: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Leadership {
    /// One replica (SQLite): leads from the start, for good.
    pub fn always() -> Arc<Leadership> {
        Arc::new(Leadership {
            leading: watch::channel(true).0,
            resign: Notify::new(),
            campaign: Default::default(),
        })
    }

    /// Campaigns for the lock in the database at `url` until
    /// [`Leadership::resign`]; the first try is made before this returns,
    /// so a replica that starts alone leads from its start.
    pub async fn elect(url: String) -> Arc<Leadership> {
        let leadership = Arc::new(Leadership {
            leading: watch::channel(false).0,
            resign: Notify::new(),
            campaign: Default::default(),
        });
        let mut first = PgConnection::connect(&url).await.ok();
        if let Some(conn) = &mut first {
            if let Ok(true) = try_lock(conn).await {
                tracing::info!("this replica now leads");
                leadership.set(true);
            }
        }
        let task = tokio::spawn(campaign(leadership.clone(), url, first));
        *leadership.campaign.lock().unwrap() = Some(task);
        leadership
    }

    pub fn is_leader(&self) -> bool {
        *self.leading.borrow()
    }

    /// Changes of leadership, for those who start and stop the leader's work.
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    /// Gives the lock up at once (shutdown) and stops campaigning. The
    /// caller stops the leader's work first.
    pub async fn resign(&self) {
        let task = self.campaign.lock().unwrap().take();
        if let Some(task) = task {
            self.resign.notify_one();
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
        self.set(false);
    }

    fn set(&self, leading: bool) {
        self.leading
            .send_if_modified(|now| std::mem::replace(now, leading) != leading);
    }
}

async fn try_lock(conn: &mut PgConnection) -> Result<bool, ()> {
    let taken = sqlx::query_scalar::<_, bool>("SELECT pg_try_advisory_lock($1)")
        .bind(LEADER_LOCK)
        .fetch_one(&mut *conn);
    match tokio::time::timeout(HEALTH_TIMEOUT, taken).await {
        Ok(Ok(taken)) => Ok(taken),
        _ => Err(()),
    }
}

async fn campaign(leadership: Arc<Leadership>, url: String, mut first: Option<PgConnection>) {
    loop {
        let connected = match first.take() {
            Some(conn) => Ok(conn),
            None => PgConnection::connect(&url).await,
        };
        let mut conn = match connected {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(error = %e, "leader election: cannot reach PostgreSQL; retrying");
                tokio::select! {
                    _ = leadership.resign.notified() => return,
                    _ = tokio::time::sleep(CAMPAIGN_PERIOD) => continue,
                }
            }
        };
        let resigned = hold(&leadership, &mut conn).await;
        if leadership.is_leader() {
            if !resigned {
                tracing::warn!("stepping down: the connection holding the leader lock failed");
            }
            leadership.set(false);
        }
        if resigned {
            let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
                .bind(LEADER_LOCK)
                .execute(&mut conn)
                .await;
            let _ = conn.close().await;
            tracing::info!("leader lock released");
            return;
        }
    }
}

/// Tries for the lock and, once held, keeps checking the connection.
/// Returns true when told to resign, false when the connection failed.
async fn hold(leadership: &Leadership, conn: &mut PgConnection) -> bool {
    loop {
        let period = if leadership.is_leader() {
            HEALTH_PERIOD
        } else {
            CAMPAIGN_PERIOD
        };
        if leadership.is_leader() {
            let check = sqlx::query("SELECT 1").execute(&mut *conn);
            match tokio::time::timeout(HEALTH_TIMEOUT, check).await {
                Ok(Ok(_)) => {}
                _ => return false,
            }
        } else {
            match try_lock(conn).await {
                Ok(true) => {
                    tracing::info!("this replica now leads");
                    leadership.set(true);
                    continue;
                }
                Ok(false) => {}
                Err(()) => return false,
            }
        }
        tokio::select! {
            _ = leadership.resign.notified() => return true,
            _ = tokio::time::sleep(period) => {}
        }
    }
}
