//! Which RabbitMQ brokers an amqp trigger may name: the operator's
//! allow-list (`SLESS_AMQP_ALLOWED_HOSTS`), so a tenant cannot make the
//! server connect anywhere (and read in `last_error` what answered). A
//! broker not on the list is refused before any connection, with no detail
//! of what is there.

use std::io;
use std::time::Duration;

use lapin::{Connection, ConnectionProperties};

/// `host` or `host:port` entries; empty allows no broker at all.
#[derive(Debug, Clone, Default)]
pub struct BrokerAllowList {
    entries: Vec<(String, Option<u16>)>,
}

impl BrokerAllowList {
    /// Parses the configured entries; the error names the bad one.
    pub fn parse(entries: &[String]) -> Result<BrokerAllowList, String> {
        let mut parsed = Vec::new();
        for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
            parsed.push(split_host_port(entry).map_err(|e| format!("SLESS_AMQP_ALLOWED_HOSTS entry {entry:?}: {e}"))?);
        }
        Ok(BrokerAllowList { entries: parsed })
    }

    /// Whether a trigger may connect to `url`; the error is for the tenant.
    pub fn check(&self, url: &str) -> Result<(), String> {
        let (host, port) = broker_address(url)?;
        check_client_settings(url)?;
        let allowed = self
            .entries
            .iter()
            .any(|(h, p)| h.eq_ignore_ascii_case(&host) && p.is_none_or(|p| p == port));
        if allowed {
            return Ok(());
        }
        if self.entries.is_empty() {
            return Err(
                "this server connects to no RabbitMQ broker: the operator allows brokers with SLESS_AMQP_ALLOWED_HOSTS"
                    .into(),
            );
        }
        Err(format!(
            "broker {host}:{port} is not one this server may connect to (the operator's SLESS_AMQP_ALLOWED_HOSTS)"
        ))
    }
}

/// What the AMQP client takes from `url` within what the protocol carries:
/// the virtual host is a short string (the client panics past 255 bytes)
/// and no frame is smaller than 4096 bytes (a smaller `frame_max` never
/// connects).
fn check_client_settings(url: &str) -> Result<(), String> {
    let uri: lapin::uri::AMQPUri = url.parse().map_err(|e: String| {
        let reason = if e.contains(url) { "it does not parse".into() } else { e };
        format!("broker_url is not a URL the AMQP client can use: {reason}")
    })?;
    if uri.vhost.len() > 255 {
        return Err(format!(
            "broker_url's virtual host is {} bytes; AMQP allows at most 255",
            uri.vhost.len()
        ));
    }
    if let Some(frame_max) = uri.query.frame_max.filter(|&f| f < MIN_FRAME_MAX) {
        return Err(format!(
            "broker_url's frame_max is {frame_max}; AMQP's frames are at least {MIN_FRAME_MAX} bytes"
        ));
    }
    Ok(())
}

/// AMQP 0-9-1's `frame-min-size`.
const MIN_FRAME_MAX: u32 = 4096;

/// How long a connection to a broker may take (TCP, TLS and the AMQP
/// handshake): one that never completes (TLS spoken to a plain port, say)
/// is an error its trigger or event shows, not a wait without end.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Connects to `url` within [`CONNECT_TIMEOUT`].
pub async fn connect(url: &str) -> lapin::Result<Connection> {
    match tokio::time::timeout(
        CONNECT_TIMEOUT,
        Connection::connect(url, ConnectionProperties::default()),
    )
    .await
    {
        Ok(connected) => connected,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no AMQP handshake within {} s", CONNECT_TIMEOUT.as_secs()),
        )
        .into()),
    }
}

/// Host (lowercase, IPv6 without brackets) and port of an `amqp[s]://` URL.
pub fn broker_address(url: &str) -> Result<(String, u16), String> {
    let (rest, default_port) = if let Some(rest) = url.strip_prefix("amqp://") {
        (rest, 5672)
    } else if let Some(rest) = url.strip_prefix("amqps://") {
        (rest, 5671)
    } else {
        return Err("broker_url must start with amqp:// or amqps://".into());
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let (host, port) = split_host_port(host_port)?;
    Ok((host, port.unwrap_or(default_port)))
}

fn split_host_port(text: &str) -> Result<(String, Option<u16>), String> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or("an IPv6 address needs its closing ]")?;
        (host, after.strip_prefix(':'))
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err("no host".into());
    }
    // A host in plain characters only: what is checked is what is dialled.
    if !host.chars().all(|c| c.is_ascii_alphanumeric() || ".-:_".contains(c)) {
        return Err(format!("host {host:?} has characters a broker's host name cannot have"));
    }
    let port = match port {
        Some(port) => Some(port.parse::<u16>().map_err(|_| format!("bad port {port:?}"))?),
        None => None,
    };
    Ok((host.to_ascii_lowercase(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_come_from_the_url() {
        assert_eq!(
            broker_address("amqp://guest:guest@127.0.0.1:5672/%2f").unwrap(),
            ("127.0.0.1".into(), 5672)
        );
        assert_eq!(
            broker_address("amqps://Rabbit.Example").unwrap(),
            ("rabbit.example".into(), 5671)
        );
        assert_eq!(broker_address("amqp://u:p@[::1]:5673/v").unwrap(), ("::1".into(), 5673));
        assert_eq!(broker_address("amqp://a:b@c@host/").unwrap(), ("host".into(), 5672));
        assert!(broker_address("http://x").is_err());
        assert!(broker_address("amqp://host:99999").is_err());
    }

    #[test]
    fn only_listed_brokers_pass() {
        let list = BrokerAllowList::parse(&["127.0.0.1:5672".into(), "rabbit.internal".into()]).unwrap();
        assert!(list.check("amqp://guest:guest@127.0.0.1:5672/%2f").is_ok());
        assert!(list.check("amqp://127.0.0.1/").is_ok(), "default port");
        assert!(
            list.check("amqp://RABBIT.internal:1234/").is_ok(),
            "any port of a bare host"
        );
        let refused = list.check("amqp://127.0.0.1:5432/").unwrap_err();
        assert!(
            refused.contains("127.0.0.1:5432") && refused.contains("SLESS_AMQP_ALLOWED_HOSTS"),
            "{refused}"
        );
        assert!(list.check("amqp://user:pw@127.0.0.1:5672@evil:6379/").is_err());
        let none = BrokerAllowList::parse(&[]).unwrap();
        assert!(none
            .check("amqp://127.0.0.1/")
            .unwrap_err()
            .contains("no RabbitMQ broker"));
        assert!(BrokerAllowList::parse(&["host:port".into()]).is_err());
    }

    /// The client panicked on a virtual host past 255 bytes, and a tiny
    /// frame_max never connected: both are refused before any connection.
    #[test]
    fn what_the_client_cannot_carry_is_refused() {
        let list = BrokerAllowList::parse(&["127.0.0.1:5672".into()]).unwrap();
        let base = "amqp://guest:guest@127.0.0.1:5672/";
        assert!(list.check(&format!("{base}{}", "v".repeat(255))).is_ok());
        let long = list.check(&format!("{base}{}", "v".repeat(256))).unwrap_err();
        assert!(long.contains("virtual host is 256 bytes"), "{long}");
        // Percent-encoded, as the client decodes it.
        let encoded = list.check(&format!("{base}{}", "%41".repeat(256))).unwrap_err();
        assert!(encoded.contains("256 bytes"), "{encoded}");
        let tiny = list.check(&format!("{base}%2f?frame_max=0")).unwrap_err();
        assert!(tiny.contains("frame_max is 0"), "{tiny}");
        assert!(list.check(&format!("{base}%2f?frame_max=131072")).is_ok());
        let bad = list.check(&format!("{base}%2f?heartbeat=x")).unwrap_err();
        assert!(bad.contains("not a URL the AMQP client can use"), "{bad}");
    }
}
