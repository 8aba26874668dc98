-- Events parked while their function cannot run (off, or no ready version)
-- wait with claim = 'parked' instead of being polled; this index finds a
-- function's parked events when it can run again, and holds no other row.
CREATE INDEX IF NOT EXISTS async_events_parked ON async_events (namespace, function)
    WHERE status = 'queued' AND claim = 'parked';
