//! Counters of check decisions, rendered as `sless_code_checks_total{decision="..."}`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// One decision a check stage takes. An upload in mode `llm` records two:
/// the static stage's and the LLM stage's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// A static rule matched: the upload is rejected.
    RuleHit,
    /// No static rule matched.
    StaticPassed,
    /// The LLM answered `"safe": true`.
    LlmSafe,
    /// The LLM answered `"safe": false`: the upload is rejected.
    LlmUnsafe,
    /// The LLM was not asked (over the size budget, nothing to review).
    LlmSkipped,
    /// The LLM gave no verdict (unreachable, timeout, non-2xx, malformed).
    LlmError,
}

impl Decision {
    pub const ALL: [Decision; 6] = [
        Decision::RuleHit,
        Decision::StaticPassed,
        Decision::LlmSafe,
        Decision::LlmUnsafe,
        Decision::LlmSkipped,
        Decision::LlmError,
    ];

    /// The value of the `decision` label.
    pub fn label(self) -> &'static str {
        match self {
            Decision::RuleHit => "rule_hit",
            Decision::StaticPassed => "static_passed",
            Decision::LlmSafe => "llm_safe",
            Decision::LlmUnsafe => "llm_unsafe",
            Decision::LlmSkipped => "llm_skipped",
            Decision::LlmError => "llm_error",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Atomic counters by decision, shared between the validator and the
/// server's `/metrics` handler.
#[derive(Debug, Default)]
pub struct CheckMetrics {
    counts: [AtomicU64; Decision::ALL.len()],
}

impl CheckMetrics {
    pub const NAME: &'static str = "sless_code_checks_total";

    pub fn new() -> Self {
        Self::default()
    }

    pub fn record(&self, decision: Decision) {
        self.counts[decision.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self, decision: Decision) -> u64 {
        self.counts[decision.index()].load(Ordering::Relaxed)
    }

    /// Prometheus text exposition: HELP and TYPE lines, then one line per
    /// decision (zeros included, so every series exists from the start).
    pub fn render_prometheus(&self) -> String {
        let mut out = String::new();
        let name = Self::NAME;
        let _ = writeln!(
            out,
            "# HELP {name} Code-safety gate decisions on uploaded functions, by decision."
        );
        let _ = writeln!(out, "# TYPE {name} counter");
        for decision in Decision::ALL {
            let _ = writeln!(
                out,
                "{name}{{decision=\"{}\"}} {}",
                decision.label(),
                self.count(decision)
            );
        }
        out
    }
}
