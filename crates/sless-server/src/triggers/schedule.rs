//! Cron schedules: 5 fields (or 6 with seconds first) in an IANA time zone.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

/// A parsed schedule.
#[derive(Debug)]
pub struct Schedule {
    cron: croner::Cron,
    tz: Tz,
}

impl Schedule {
    /// Parses, with an error that says what is wrong.
    pub fn parse(schedule: &str, timezone: &str) -> Result<Schedule, String> {
        let fields = schedule.split_whitespace().count();
        if !(5..=6).contains(&fields) {
            return Err(format!(
                "invalid schedule {schedule:?}: expected 5 fields (minute hour day-of-month month day-of-week), or 6 with seconds first; got {fields}"
            ));
        }
        let cron = croner::Cron::new(schedule)
            .with_seconds_optional()
            .parse()
            .map_err(|e| format!("invalid schedule {schedule:?}: {e}"))?;
        let tz: Tz = timezone
            .parse()
            .map_err(|_| format!("unknown timezone {timezone:?}: use an IANA name such as UTC or Europe/Berlin"))?;
        Ok(Schedule { cron, tz })
    }

    /// A schedule must fire within this long of any moment: one that never
    /// does (`0 0 30 2 *`) is refused, since the search for its next tick
    /// runs to the end of the calendar every time.
    pub const HORIZON_DAYS: i64 = 5 * 366;

    /// The first tick strictly after `after`. This can take milliseconds
    /// for a rare schedule: call it off the serving threads.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron
            .find_next_occurrence(&after.with_timezone(&self.tz), false)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }
}

/// Parses `schedule` and checks that it fires within the horizon, on a
/// blocking thread; the error says what is wrong.
pub async fn checked(schedule: &str, timezone: &str) -> Result<(), String> {
    let parsed = Schedule::parse(schedule, timezone)?;
    let now = crate::store::now();
    let next = tokio::task::spawn_blocking(move || parsed.next_after(now))
        .await
        .map_err(|e| e.to_string())?;
    match next {
        Some(next) if next - now <= chrono::Duration::days(Schedule::HORIZON_DAYS) => Ok(()),
        _ => Err(format!(
            "schedule {schedule:?} does not fire within 5 years (in {timezone}); check its day of month and month"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::Schedule;
    use chrono::{TimeZone, Utc};

    #[test]
    fn parses_and_finds_ticks_in_a_zone() {
        let s = Schedule::parse("0 9 * * *", "Europe/Berlin").unwrap();
        let after = Utc.with_ymd_and_hms(2026, 1, 10, 12, 0, 0).unwrap();
        // 09:00 in Berlin in winter is 08:00 UTC.
        assert_eq!(
            s.next_after(after),
            Some(Utc.with_ymd_and_hms(2026, 1, 11, 8, 0, 0).unwrap())
        );
        let every_second = Schedule::parse("* * * * * *", "UTC").unwrap();
        assert_eq!(
            every_second.next_after(after),
            Some(Utc.with_ymd_and_hms(2026, 1, 10, 12, 0, 1).unwrap())
        );
    }

    #[tokio::test]
    async fn schedules_that_never_fire_are_refused() {
        for never in ["0 0 30 2 *", "0 0 31 4 *", "0 0 31 11 *"] {
            let refused = super::checked(never, "UTC").await.unwrap_err();
            assert!(refused.contains("does not fire within 5 years"), "{never}: {refused}");
        }
        for rare in ["0 0 29 2 *", "0 9 * * 1-5", "0 0 1 1 *"] {
            assert!(super::checked(rare, "Europe/Berlin").await.is_ok(), "{rare}");
        }
    }

    #[test]
    fn says_what_is_wrong() {
        assert!(Schedule::parse("* * *", "UTC").unwrap_err().contains("5 fields"));
        assert!(Schedule::parse("61 * * * *", "UTC")
            .unwrap_err()
            .contains("invalid schedule"));
        assert!(Schedule::parse("* * * * *", "Mars/Olympus")
            .unwrap_err()
            .contains("unknown timezone"));
    }
}
