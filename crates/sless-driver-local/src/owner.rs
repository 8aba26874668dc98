//! Names of what a server leaves on the machine (its slots directory, its
//! network namespaces) carry an owner tag, `{pid}-{start}`: the server's
//! pid and its start time in clock ticks since boot. A pid is soon reused
//! on a busy machine (pid_max is often 32768); the pair is not, so what a
//! server left is known to be stale once no process has both. Tags without
//! a start time (older servers) fall back to the pid alone.

/// This server process's tag.
pub fn own_tag() -> String {
    let pid = std::process::id();
    match start_time(pid) {
        Some(start) => format!("{pid}-{start}"),
        None => pid.to_string(),
    }
}

/// Whether the server a tag names is gone; a name that is no tag is not a
/// server's (None).
pub fn is_gone(tag: &str) -> Option<bool> {
    let (pid, start) = match tag.split_once('-') {
        Some((pid, start)) => (pid.parse::<u32>().ok()?, Some(start.parse::<u64>().ok()?)),
        None => (tag.parse::<u32>().ok()?, None),
    };
    Some(match start {
        Some(start) => start_time(pid) != Some(start),
        None => !std::path::Path::new(&format!("/proc/{pid}")).exists(),
    })
}

/// Field 22 of `/proc/{pid}/stat`: when the process started.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ...": comm may hold spaces; fields 3 on follow the last ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_names_this_process_and_not_another_with_its_pid() {
        let own = own_tag();
        assert_eq!(is_gone(&own), Some(false));
        let pid = std::process::id();
        assert!(own.starts_with(&format!("{pid}-")), "{own}");
        // The same pid started at another time: another process.
        let start = start_time(pid).unwrap();
        assert_eq!(is_gone(&format!("{pid}-{}", start + 1)), Some(true));
        // Tags of older servers: the pid alone.
        assert_eq!(is_gone(&pid.to_string()), Some(false));
        assert_eq!(is_gone("4000001"), Some(true));
        assert_eq!(is_gone("not-a-tag"), None);
        assert_eq!(is_gone("build-x.tmp"), None);
    }
}
