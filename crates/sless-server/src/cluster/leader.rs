//! Who leads: one replica at a time holds a PostgreSQL session-level
//! advisory lock on a connection of its own (not one of the pool's, which
//! come and go) and leads while it holds it. The others try to take it
//! every [`CAMPAIGN_PERIOD`]; the database releases it the moment the
//! leader's session ends, so when a leader dies (its socket closes with
//! the process) another takes over within one period.
//!
//! A leader cut off from the database without dying (a network black
//! hole, a long pause) cannot end its session, and PostgreSQL would keep
//! it, and the lock, until TCP gives up (hours). So the session holding
//! the lock asks PostgreSQL to end it after [`SESSION_IDLE_LIMIT`] without
//! a query (`idle_session_timeout`), and the leader queries it every
//! [`HEALTH_PERIOD`]. Each answered check extends a lease of [`LEASE`]
//! from when the check was sent; the leader stops leading when the lease
//! runs out, which is [`SESSION_IDLE_LIMIT`] `-` [`LEASE`] before the
//! database may end the session and let another replica take the lock.
//!
//! A lease is a local belief: a leader whose lock session was ended at
//! once (`pg_terminate_backend`), or whose write was sent in time and
//! held on the way, could still write after another has taken over. So
//! each replica that takes the lock bumps a counter on the lock's own
//! session (`cluster_leader.epoch`, migration 0014) before it leads, and
//! the leader's writes that must happen once (a built version recorded)
//! check in their transaction that the counter is still the one it took
//! ([`Leadership::fence`]), reading it `FOR SHARE`, so the next leader's
//! bump waits for such a transaction to end.
//! On SQLite there is one replica, and it always leads.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};
use tokio::sync::{watch, Notify};

/// How often a follower tries to take the lock.
pub const CAMPAIGN_PERIOD: Duration = Duration::from_millis(500);
/// How often the leader checks the connection that holds the lock.
const HEALTH_PERIOD: Duration = Duration::from_millis(500);
/// How long the leader leads after sending a check that was answered.
pub const LEASE: Duration = Duration::from_secs(2);
/// How long PostgreSQL keeps the lock's session without a query. Longer
/// than [`LEASE`]: the leader has stepped down before it can be released.
pub const SESSION_IDLE_LIMIT: Duration = Duration::from_secs(4);
/// How long the lock's session waits for a row lock (the epoch's, held by
/// a deposed leader's transaction) before it gives the lock up and tries
/// again; within [`LEASE`], which bounds the whole try.
const LOCK_WAIT: Duration = Duration::from_secs(1);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The advisory lock key ("sless-ld"). Advisory locks are per database, so
/// each database elects its own leader.
const LEADER_LOCK: i64 = 0x736c_6573_732d_6c64;

/// This replica's view of who leads.
pub struct Leadership {
    leading: watch::Sender<bool>,
    /// Milliseconds since `started` until which the lock is surely held.
    lease_until: AtomicU64,
    started: Instant,
    resign: Notify,
    campaign: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The epoch this replica took with the lock (0 before it first did);
    /// None for the only replica, which has nothing to fence.
    epoch: Option<AtomicI64>,
}

impl Leadership {
    fn new(leading: bool, lease_until: u64, fenced: bool) -> Leadership {
        Leadership {
            leading: watch::channel(leading).0,
            lease_until: AtomicU64::new(lease_until),
            started: Instant::now(),
            resign: Notify::new(),
            campaign: Default::default(),
            epoch: fenced.then(|| AtomicI64::new(0)),
        }
    }

    /// One replica (SQLite): leads from the start, for good.
    pub fn always() -> Arc<Leadership> {
        Arc::new(Leadership::new(true, u64::MAX, false))
    }

    /// Campaigns for the lock in the database at `url` until
    /// [`Leadership::resign`]; the first try is made before this returns,
    /// so a replica that starts alone leads from its start.
    pub async fn elect(url: String) -> Arc<Leadership> {
        let leadership = Arc::new(Leadership::new(false, 0, true));
        let mut first = connect(&url).await.ok();
        if let Some(conn) = &mut first {
            let _ = leadership.try_lock(conn).await;
        }
        let task = tokio::spawn(campaign(leadership.clone(), url, first));
        *leadership.campaign.lock().unwrap() = Some(task);
        leadership
    }

    /// Whether this replica leads: it took the lock, and a check sent less
    /// than [`LEASE`] ago found it still held (a replica that was paused
    /// sees its lease ran out before it does any leader's work).
    pub fn is_leader(&self) -> bool {
        *self.leading.borrow() && self.now() < self.lease_until.load(Ordering::SeqCst)
    }

    /// The fencing token of this replica's leadership: the epoch it took
    /// with the lock, which a write that must happen once checks in its own
    /// transaction (a deposed leader's no longer matches once another has
    /// taken the lock). None alone (SQLite), where nobody else can lead.
    pub fn fence(&self) -> Option<i64> {
        self.epoch.as_ref().map(|epoch| epoch.load(Ordering::SeqCst))
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

    fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// When the lease runs out, as an instant.
    fn lease_end(&self) -> tokio::time::Instant {
        let until = self.lease_until.load(Ordering::SeqCst);
        let left = until.saturating_sub(self.now());
        tokio::time::Instant::now() + Duration::from_millis(left)
    }

    /// A check sent at `sent` found the lock held: the lease runs from then.
    fn renew(&self, sent: Instant) {
        let until = (sent - self.started + LEASE).as_millis() as u64;
        self.lease_until.store(until, Ordering::SeqCst);
    }

    /// Tries for the lock once and, when it is taken, bumps the epoch on
    /// the same session (the lock is led with only once that is done); Err
    /// when the connection failed, or the bump did (the caller drops the
    /// connection, and the lock with it).
    async fn try_lock(&self, conn: &mut PgConnection) -> Result<bool, ()> {
        let sent = Instant::now();
        let taken = async {
            let taken = sqlx::query_scalar::<_, bool>("SELECT pg_try_advisory_lock($1)")
                .bind(LEADER_LOCK)
                .fetch_one(&mut *conn)
                .await?;
            if !taken {
                return Ok(None);
            }
            sqlx::query_scalar::<_, i64>("UPDATE cluster_leader SET epoch = epoch + 1 WHERE id = 1 RETURNING epoch")
                .fetch_one(&mut *conn)
                .await
                .map(Some)
        };
        match tokio::time::timeout(LEASE, taken).await {
            Ok(Ok(Some(epoch))) => {
                if let Some(token) = &self.epoch {
                    token.store(epoch, Ordering::SeqCst);
                }
                self.renew(sent);
                tracing::info!(epoch, "this replica now leads");
                self.set(true);
                Ok(true)
            }
            Ok(Ok(None)) => Ok(false),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "leader election: taking the lock failed");
                Err(())
            }
            Err(_) => Err(()),
        }
    }
}

/// A connection of its own whose session PostgreSQL ends after
/// [`SESSION_IDLE_LIMIT`] without a query.
async fn connect(url: &str) -> Result<PgConnection, String> {
    let mut conn = match tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect(url)).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err(format!("no answer within {CONNECT_TIMEOUT:?}")),
    };
    let set =
        sqlx::query("SELECT set_config('idle_session_timeout', $1, false), set_config('lock_timeout', $2, false)")
            .bind(SESSION_IDLE_LIMIT.as_millis().to_string())
            .bind(LOCK_WAIT.as_millis().to_string())
            .execute(&mut conn);
    let set = tokio::time::timeout(CONNECT_TIMEOUT, set).await;
    match set {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(
            error = %e,
            "leader election: PostgreSQL refused idle_session_timeout (before version 14?): a leader cut off from the database keeps the lock until TCP gives up"
        ),
        Err(_) => return Err(format!("no answer within {CONNECT_TIMEOUT:?}")),
    }
    Ok(conn)
}

async fn campaign(leadership: Arc<Leadership>, url: String, mut first: Option<PgConnection>) {
    loop {
        let connected = match first.take() {
            Some(conn) => Ok(conn),
            None => connect(&url).await,
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
        if *leadership.leading.borrow() {
            if !resigned {
                tracing::warn!(
                    "stepping down: the connection holding the leader lock failed or did not answer in time"
                );
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
/// Returns true when told to resign, false when the connection failed or
/// the lease ran out (the connection is then dropped: its session, and
/// the lock, end with it, or within [`SESSION_IDLE_LIMIT`] if the database
/// cannot be reached).
async fn hold(leadership: &Leadership, conn: &mut PgConnection) -> bool {
    loop {
        let next = if *leadership.leading.borrow() {
            let sent = Instant::now();
            let check = sqlx::query("SELECT 1").execute(&mut *conn);
            match tokio::time::timeout_at(leadership.lease_end(), check).await {
                Ok(Ok(_)) if tokio::time::Instant::now() < leadership.lease_end() => leadership.renew(sent),
                _ => return false,
            }
            // Checked again before the lease can run out.
            (tokio::time::Instant::now() + HEALTH_PERIOD).min(leadership.lease_end())
        } else {
            match leadership.try_lock(conn).await {
                Ok(true) => continue,
                Ok(false) => {}
                Err(()) => return false,
            }
            tokio::time::Instant::now() + CAMPAIGN_PERIOD
        };
        tokio::select! {
            _ = leadership.resign.notified() => return true,
            _ = tokio::time::sleep_until(next) => {}
        }
    }
}
