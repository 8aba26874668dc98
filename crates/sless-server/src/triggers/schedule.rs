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
    /// Parses, with an error that says what is wrong: the field at fault
    /// and the values it allows.
    pub fn parse(schedule: &str, timezone: &str) -> Result<Schedule, ScheduleError> {
        let bad_schedule = |message| ScheduleError {
            field: "schedule",
            message,
        };
        let fields: Vec<&str> = schedule.split_whitespace().collect();
        if !(5..=6).contains(&fields.len()) {
            return Err(bad_schedule(format!(
                "invalid schedule {schedule:?}: expected {FORMAT}; got {} field{}",
                fields.len(),
                if fields.len() == 1 { "" } else { "s" }
            )));
        }
        let cron = parse_cron(schedule).map_err(|e| {
            bad_schedule(match culprit(&fields) {
                Some((index, name, values)) => format!(
                    "invalid schedule {schedule:?}: the {name} field {:?} is not valid: it takes {values}, \
                     as one value, a list (a,b), a range (a-b) or a step (*/n); {FORMAT}",
                    fields[index]
                ),
                None => format!("invalid schedule {schedule:?}: {e}; {FORMAT}"),
            })
        })?;
        let tz: Tz = timezone.parse().map_err(|_| ScheduleError {
            field: "timezone",
            message: format!("unknown timezone {timezone:?}: use an IANA name such as UTC or Europe/Berlin"),
        })?;
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

/// The accepted shapes, for every message about a schedule.
const FORMAT: &str = "5 fields (minute hour day-of-month month day-of-week), or 6 with seconds first";

fn parse_cron(schedule: &str) -> Result<croner::Cron, croner::errors::CronError> {
    croner::Cron::new(schedule).with_seconds_optional().parse()
}

/// The fields of a 6-field schedule and the values each takes; a 5-field
/// one has no seconds.
const FIELDS: [(&str, &str); 6] = [
    ("second", "0-59"),
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or JAN-DEC"),
    ("day-of-week", "0-7 (0 and 7 are Sunday) or SUN-SAT"),
];

/// The first field that is wrong on its own, as `(index, name, values)`:
/// each field is tried with every other one set to `*`.
fn culprit(fields: &[&str]) -> Option<(usize, &'static str, &'static str)> {
    let named = &FIELDS[FIELDS.len() - fields.len()..];
    named.iter().enumerate().find_map(|(index, &(name, values))| {
        let probe: Vec<&str> = (0..fields.len())
            .map(|i| if i == index { fields[i] } else { "*" })
            .collect();
        parse_cron(&probe.join(" ")).is_err().then_some((index, name, values))
    })
}

/// A special token or a name in a field that does not take it, as
/// `(index, token, the fields that take it)`. croner takes some of these
/// where they mean nothing or something else: `L` anywhere (a minute of
/// `L` never fires), `?` anywhere (as `*`), and day and month names
/// anywhere (`MON` in the minute field is minute 1).
fn misplaced(fields: &[&str]) -> Option<(usize, String, &'static str)> {
    const DAY_OF_MONTH: usize = 3;
    const MONTH: usize = 4;
    const DAY_OF_WEEK: usize = 5;
    const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
    const MONTHS: [&str; 12] = [
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ];
    let offset = FIELDS.len() - fields.len();
    fields.iter().enumerate().find_map(|(index, field)| {
        let named = index + offset;
        let upper = field.to_ascii_uppercase();
        let mut tokens = upper
            .split(|c: char| !c.is_ascii_alphabetic())
            .filter(|word| !word.is_empty())
            .chain(upper.matches(['?', '#']));
        tokens.find_map(|token| {
            let day = |word: &str| DAYS.contains(&word);
            let (fits, takes) = match token {
                "?" => (
                    matches!(named, DAY_OF_MONTH | DAY_OF_WEEK),
                    "only in the day-of-month and day-of-week fields (as *)",
                ),
                "#" => (
                    named == DAY_OF_WEEK,
                    "only in the day-of-week field (1#2: the second Monday)",
                ),
                "W" => (
                    named == DAY_OF_MONTH,
                    "only in the day-of-month field (15W: the weekday nearest the 15th)",
                ),
                // Alone it is the month's last day; after a day, that day's
                // last one in the month (croner takes a lone L in the other
                // fields too, where it never matches).
                "L" if named == DAY_OF_WEEK => (
                    upper.split(',').all(|part| part != "L"),
                    "after a day in the day-of-week field (5L: the month's last Friday), \
                     or alone in the day-of-month field (the month's last day)",
                ),
                "L" => (
                    named == DAY_OF_MONTH,
                    "alone in the day-of-month field (the month's last day), \
                     or after a day in the day-of-week field (5L: the month's last Friday)",
                ),
                word if day(word) || word.strip_suffix('L').is_some_and(day) => {
                    (named == DAY_OF_WEEK, "only in the day-of-week field")
                }
                word if MONTHS.contains(&word) => (named == MONTH, "only in the month field"),
                _ => (true, ""),
            };
            (!fits).then(|| (index, token.to_string(), takes))
        })
    })
}

/// Parses `schedule` and checks that it fires within the horizon (the
/// search runs on a blocking thread); the error says what is wrong. Tokens
/// in a field that does not take them are refused here, for new schedules:
/// a stored one the API took before still parses and fires as it did.
pub async fn checked(schedule: &str, timezone: &str) -> Result<(), ScheduleError> {
    let fields: Vec<&str> = schedule.split_whitespace().collect();
    if let Some((index, token, takes)) = (5..=6).contains(&fields.len()).then(|| misplaced(&fields)).flatten() {
        let (name, values) = FIELDS[FIELDS.len() - fields.len() + index];
        return Err(ScheduleError {
            field: "schedule",
            message: format!(
                "invalid schedule {schedule:?}: the {name} field {:?} is not valid: {token} goes {takes}; \
                 the {name} field takes {values}; {FORMAT}",
                fields[index]
            ),
        });
    }
    let parsed = Schedule::parse(schedule, timezone)?;
    let now = crate::store::now();
    let never = || ScheduleError {
        field: "schedule",
        message: format!(
            "schedule {schedule:?} does not fire within 5 years (in {timezone}); check its day of month and month"
        ),
    };
    let next = tokio::task::spawn_blocking(move || parsed.next_after(now))
        .await
        .map_err(|_| never())?;
    match next {
        Some(next) if next - now <= chrono::Duration::days(Schedule::HORIZON_DAYS) => Ok(()),
        _ => Err(never()),
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
            assert_eq!(refused.field, "schedule");
            assert!(
                refused.message.contains("does not fire within 5 years"),
                "{never}: {}",
                refused.message
            );
        }
        for rare in ["0 0 29 2 *", "0 9 * * 1-5", "0 0 1 1 *"] {
            assert!(super::checked(rare, "Europe/Berlin").await.is_ok(), "{rare}");
        }
    }

    /// croner takes L, W, #, ? and names in some fields only, and some of
    /// them anywhere where they mean nothing: the message names the field
    /// that holds one out of place.
    #[tokio::test]
    async fn a_token_out_of_its_field_is_blamed_on_that_field() {
        let misplaced = [
            ("L * * * *", "minute", "L"),
            ("0 L * * *", "hour", "L"),
            ("0 0 * L *", "month", "L"),
            ("L 0 0 * * *", "second", "L"),
            ("0 0 * * L", "day-of-week", "L"),
            ("5W * * * *", "minute", "W"),
            ("0 0 * * 1W", "day-of-week", "W"),
            ("0 0 1#2 * *", "day-of-month", "#"),
            ("1#2 0 * * *", "minute", "#"),
            ("? * * * *", "minute", "?"),
            ("0 0 * ? *", "month", "?"),
            ("MON * * * *", "minute", "MON"),
            ("0 0 * * JAN", "day-of-week", "JAN"),
        ];
        for (schedule, field, token) in misplaced {
            let message = super::checked(schedule, "UTC").await.unwrap_err().message;
            let named = schedule
                .split_whitespace()
                .find(|f| f.to_uppercase().contains(token))
                .unwrap();
            assert!(
                message.contains(&format!("the {field} field {named:?} is not valid: {token} goes ")),
                "{schedule}: {message}"
            );
        }
        // Where croner takes them, they are taken.
        for fine in [
            "0 0 L * *",
            "0 0 15W * *",
            "0 0 * * 5L",
            "0 0 * * 1#2",
            "0 0 ? * MON",
            "0 0 1 * ?",
            "0 0 * JAN,FEB FRIL",
        ] {
            assert!(super::checked(fine, "UTC").await.is_ok(), "{fine}");
        }
        // Wrong in their own field: croner refuses them, and the field is named.
        let message = super::checked("0 0 5L * *", "UTC").await.unwrap_err().message;
        assert!(message.contains(r#"day-of-month field "5L" is not valid"#), "{message}");
        let message = super::checked("0 0 * * 1#9", "UTC").await.unwrap_err().message;
        assert!(message.contains(r#"day-of-week field "1#9" is not valid"#), "{message}");
    }

    #[test]
    fn says_what_is_wrong() {
        assert!(Schedule::parse("* * *", "UTC")
            .unwrap_err()
            .message
            .contains("5 fields"));
        let err = Schedule::parse("61 * * * *", "UTC").unwrap_err().message;
        assert!(
            err.contains(r#"minute field "61" is not valid: it takes 0-59"#),
            "{err}"
        );
        let err = Schedule::parse("0 25 * * *", "UTC").unwrap_err().message;
        assert!(err.contains(r#"hour field "25" is not valid: it takes 0-23"#), "{err}");
        let err = Schedule::parse("0 0 * 13 *", "UTC").unwrap_err().message;
        assert!(err.contains(r#"month field "13" is not valid: it takes 1-12"#), "{err}");
        let err = Schedule::parse("0 0 32 * *", "UTC").unwrap_err().message;
        assert!(
            err.contains(r#"day-of-month field "32" is not valid: it takes 1-31"#),
            "{err}"
        );
        let err = Schedule::parse("0 0 * * MON-XYZ", "UTC").unwrap_err().message;
        assert!(err.contains("day-of-week field"), "{err}");
        let err = Schedule::parse("75 0 0 * * *", "UTC").unwrap_err().message;
        assert!(
            err.contains(r#"second field "75" is not valid: it takes 0-59"#),
            "{err}"
        );
        assert!(err.contains("6 with seconds first"), "{err}");
        assert!(Schedule::parse("* * * * *", "Mars/Olympus")
            .unwrap_err()
            .message
            .contains("unknown timezone"));
        let zone = Schedule::parse("* * * * *", "Mars/Olympus").unwrap_err();
        assert_eq!(zone.field, "timezone");
        assert_eq!(Schedule::parse("61 * * * *", "UTC").unwrap_err().field, "schedule");
    }
}
