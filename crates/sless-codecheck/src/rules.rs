//! The static rule table: what abuse of the platform looks like in source text.
//!
//! Each rule has a stable id (it appears in the rejection message) and a
//! reason. Patterns are byte regexes compiled with ASCII semantics
//! (`(?-u)`), so binaries and non-UTF-8 text are scanned at full speed.
//! A rule matches a file when all of its patterns match somewhere in that
//! file; the hit is reported at the line of the first pattern's first match.
//! Rules are written so that ordinary code does not trip them: "mining" in a
//! comment, base64 used on data, plain `subprocess`/`child_process` calls.

/// One rule as written in the table.
pub(crate) struct RuleSpec {
    pub id: &'static str,
    pub reason: &'static str,
    /// All must match in one file; the first one places the hit.
    pub all_of: &'static [&'static str],
    /// Also applied to binary files (files with a NUL byte).
    pub in_binaries: bool,
}

/// A shell binary named as a string: `"sh"`, `'/bin/bash'`, `` `/usr/bin/zsh` ``.
macro_rules! quoted_shell {
    () => {
        r#"['"`](?:/usr)?(?:/bin/)?(?:ba|z|da|k)?sh['"`]"#
    };
}

/// Calls that decode or decompress data, in Python and JavaScript.
macro_rules! decoder_call {
    () => {
        r"\b(?:b64decode|b32decode|b85decode|a85decode|urlsafe_b64decode|decodebytes|decodestring|unhexlify|fromhex|decompress|loads|decode|atob|Buffer\.from|unescape|decodeURIComponent|fromCharCode|inflateSync|inflateRawSync|gunzipSync)\s*\("
    };
}

/// A long run of base64 or hex, `\x..` escapes, or a char-code list.
const LONG_BLOB: &str = r"[A-Za-z0-9+/]{200,}={0,2}|(?:\\x[0-9a-fA-F]{2}){50,}|(?:\d{2,3}\s*,\s*){60,}";

/// An eval-like call whose argument chain (on the same line) decodes something.
const EXEC_OF_DECODED: &str = concat!(
    r#"\b(?:exec|eval|Function|setTimeout|setInterval|execScript)\s*\([\w.()'"`+ \t]*?"#,
    decoder_call!()
);

pub(crate) const RULES: &[RuleSpec] = &[
    // --- cryptocurrency mining -------------------------------------------
    RuleSpec {
        id: "mining-pool-url",
        reason: "connects to a cryptocurrency mining pool (stratum URL)",
        all_of: &[r"(?i)\bstratum[12]?\+(?:tcp|ssl|tls|udp)://"],
        in_binaries: true,
    },
    RuleSpec {
        id: "mining-pool-host",
        reason: "connects to a known cryptocurrency mining pool",
        all_of: &[
            r"(?i)\b(?:minexmr|supportxmr|moneroocean|nanopool|2miners|f2pool|nicehash|hashvault|herominers|c3pool|minergate|unmineable|ethermine|miningpoolhub)\.(?:com|org|net|pro|io|stream|cc)\b",
        ],
        in_binaries: true,
    },
    RuleSpec {
        id: "miner-software",
        reason: "names known cryptocurrency miner software",
        all_of: &[
            r"(?i)\b(?:xmrig|xmr-stak|cpuminer|minerd|cgminer|bfgminer|ethminer|nbminer|phoenixminer|lolminer|nanominer|teamredminer|srbminer|ccminer|coinhive|cryptonight)\b|--donate-level\b",
        ],
        in_binaries: true,
    },
    // --- reverse shells and remote control --------------------------------
    RuleSpec {
        id: "reverse-shell-dev-tcp",
        reason: "redirects a shell through bash's /dev/tcp (reverse shell)",
        all_of: &[r#"/dev/(?:tcp|udp)/[^\s/'"]+/\d+"#],
        in_binaries: false,
    },
    RuleSpec {
        id: "reverse-shell-netcat",
        reason: "hands a shell to a remote host with netcat (reverse shell)",
        all_of: &[concat!(
            r#"\b(?:nc|ncat|netcat)(?:\.traditional|\.openbsd)?\b[^\n]*?[\s'"]-[a-zA-Z]*[ec]['"]?[\s,]+['"]?(?:/usr)?(?:/bin/)?(?:ba|z|da|k)?sh\b"#,
            r"|\bmkfifo\b[^\n]*\b(?:nc|ncat|netcat)\b"
        )],
        in_binaries: false,
    },
    RuleSpec {
        id: "reverse-shell-socat",
        reason: "hands a shell to a remote host with socat (reverse shell)",
        all_of: &[r"(?i)\bsocat\b[^\n]*\bexec:[^\n]*\b(?:ba|z|da|k)?sh\b"],
        in_binaries: false,
    },
    RuleSpec {
        id: "reverse-shell-python",
        reason: "duplicates a socket onto stdin/stdout and spawns a shell (reverse shell)",
        all_of: &[
            r"\bdup2\s*\(",
            r"\bsocket\s*\(|\bcreate_connection\s*\(",
            concat!(
                r"\bpty\.spawn\s*\(",
                r"|\b(?:call|Popen|run|check_call|check_output)\s*\(\s*\[?\s*",
                quoted_shell!(),
                r#"|\bos\.(?:exec\w*|system|spawn\w*)\s*\(\s*['"](?:/usr)?(?:/bin/)?(?:ba|z|da|k)?sh\b"#
            ),
        ],
        in_binaries: false,
    },
    RuleSpec {
        id: "reverse-shell-node",
        reason: "pipes a network socket into a spawned shell (reverse shell)",
        all_of: &[
            r"\.pipe\s*\(\s*[\w.]+\.stdin\s*\)|\.stdin\.write\s*\(",
            r"\bnet\.(?:Socket|connect|createConnection)\s*\(|\bnew\s+(?:net\.)?Socket\s*\(",
            concat!(r"\b(?:spawn|execFile|exec|fork)\s*\(\s*", quoted_shell!()),
        ],
        in_binaries: false,
    },
    // --- container escape -------------------------------------------------
    RuleSpec {
        id: "host-proc-access",
        reason: "reaches the host through /proc (container escape)",
        all_of: &[
            r"/proc/1/(?:root|cwd|environ|mem|maps|ns|fd)\b|/proc/sys/kernel/(?:core_pattern|modprobe)\b|/proc/sysrq-trigger\b",
        ],
        in_binaries: false,
    },
    RuleSpec {
        id: "container-runtime-socket",
        reason: "talks to the container runtime socket (container escape)",
        all_of: &[r"\b(?:docker|dockershim|containerd|crio|podman)\.sock\b"],
        in_binaries: false,
    },
    RuleSpec {
        id: "host-namespace-enter",
        reason: "enters another process's namespaces with nsenter (container escape)",
        all_of: &[r"\bnsenter\b"],
        in_binaries: false,
    },
    RuleSpec {
        id: "host-fs-mount",
        reason: "mounts a host block device or kernel filesystem (container escape)",
        all_of: &[concat!(
            r#"\bmount\b[^\n]*[\s'"]/dev/(?:sd[a-z]|nvme\d|xvd[a-z]|vd[a-z]|hd[a-z]|dm-\d|mapper/|root\b)"#,
            r"|\bmount\s+-t\s+(?:cgroup2?|proc|sysfs|debugfs)\b",
            r"|\bchroot\s+/(?:host|rootfs|mnt/host|proc/1/root)\b"
        )],
        in_binaries: false,
    },
    RuleSpec {
        id: "cgroup-release-agent",
        reason: "writes a cgroup release_agent (container escape)",
        all_of: &[r"\brelease_agent\b|\bnotify_on_release\b"],
        in_binaries: false,
    },
    RuleSpec {
        id: "k8s-service-account-token",
        reason: "reads the Kubernetes service account credentials",
        all_of: &[r"/run/secrets/kubernetes\.io/serviceaccount\b"],
        in_binaries: false,
    },
    // --- obfuscation ------------------------------------------------------
    RuleSpec {
        id: "obfuscated-exec",
        reason: "executes a long encoded blob through eval/exec (obfuscated code)",
        all_of: &[EXEC_OF_DECODED, LONG_BLOB],
        in_binaries: false,
    },
    RuleSpec {
        id: "obfuscated-exec",
        reason: "executes a long encoded blob through eval/exec (obfuscated code)",
        all_of: &[
            r"\b(?:exec|eval)\s*\(\s*[A-Za-z_]\w*\s*[,)]|\bnew\s+Function\s*\(\s*[A-Za-z_]\w*\s*\)",
            decoder_call!(),
            LONG_BLOB,
        ],
        in_binaries: false,
    },
    // --- floods and scans -------------------------------------------------
    RuleSpec {
        id: "ddos-tool",
        reason: "names a denial-of-service flood tool or technique",
        all_of: &[r"(?i)\b(?:slowloris|hping3|torshammer|syn[_-]?flood|udp[_-]?flood|http[_-]?flood|icmp[_-]?flood)\b"],
        in_binaries: true,
    },
    RuleSpec {
        id: "raw-socket",
        reason: "opens a raw socket (packet forging for floods or scans)",
        all_of: &[r"\bSOCK_RAW\b|\bIPPROTO_RAW\b"],
        in_binaries: false,
    },
    RuleSpec {
        id: "port-scanner",
        reason: "runs a network port scanner",
        all_of: &[r"(?i)\b(?:masscan|zmap)\b|\bnmap\s+-|\bnmap\.PortScanner\b|\bimport\s+nmap\b"],
        in_binaries: true,
    },
    RuleSpec {
        id: "port-scan-loop",
        reason: "loops over every TCP port opening connections (port scan)",
        all_of: &[
            concat!(
                r"\bfor\s+\w+\s+in\s+range\s*\(\s*\d+\s*,\s*6553[56]\s*\)",
                r"|\bfor\s*\(\s*(?:let|var|const)?\s*\w+\s*=\s*\d+\s*;\s*\w+\s*<=?\s*6553[56]\b"
            ),
            r"\bconnect_ex\s*\(|\.connect\s*\(|\bnet\.(?:connect|createConnection)\s*\(|\bnew\s+net\.Socket\s*\(",
        ],
        in_binaries: false,
    },
];
