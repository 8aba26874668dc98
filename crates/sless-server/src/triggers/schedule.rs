//! Cron schedules: 5 fields (or 6 with seconds first) in an IANA time zone.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

/// A parsed schedule.
#[derive(Debug)]
pub struct Schedule {
    cron: croner::Cron,
    tz: Tz,
}

/// Why a schedule was refused: the field at fault (`schedule` or
/// `timezone`) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleError {
    pub field: &'static str,
    pub message: String,
}

impl std::fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl Schedule {
    /// Parses, with an error that says what is wrong.
    pub fn parse(schedule: &str, timezone: &str) -> Result<Schedule, ScheduleError> {
        let bad_schedule = |message| ScheduleError {
            field: "schedule",
            message,
        };
        let fields = schedule.split_whitespace().count();
        if !(5..=6).contains(&fields) {
            return Err(bad_schedule(format!(
                "invalid schedule {schedule:?}: expected 5 fields (minute hour day-of-month month day-of-week), or 6 with seconds first; got {fields}"
            )));
        }
        let cron = croner::Cron::new(schedule)
            .with_seconds_optional()
            .parse()
            .map_err(|e| bad_schedule(format!("invalid schedule {schedule:?}: {e}")))?;
        let tz: Tz = timezone.parse().map_err(|_| ScheduleError {
            field: "timezone",
            message: format!("unknown timezone {timezone:?}: use an IANA name such as UTC or Europe/Berlin"),
        })?;
        Ok(Schedule { cron, tz })
    }

    /// The first tick strictly after `after`.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron
            .find_next_occurrence(&after.with_timezone(&self.tz), false)
            .ok()
            .map(|t| t.with_timezone(&Utc))
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

    #[test]
    fn says_what_is_wrong() {
        let fields = Schedule::parse("* * *", "UTC").unwrap_err();
        assert_eq!(fields.field, "schedule");
        assert!(fields.message.contains("5 fields"));
        let range = Schedule::parse("61 * * * *", "UTC").unwrap_err();
        assert_eq!(range.field, "schedule");
        assert!(range.message.contains("invalid schedule"));
        let zone = Schedule::parse("* * * * *", "Mars/Olympus").unwrap_err();
        assert_eq!(zone.field, "timezone");
        assert!(zone.message.contains("unknown timezone"));
    }
}
