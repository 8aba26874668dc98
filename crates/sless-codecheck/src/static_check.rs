//! The static pass: the rule table compiled once and run over every file.

use std::fmt;
use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use regex::bytes::{Regex, RegexSet};

use crate::metrics::{CheckMetrics, Decision};
use crate::rules::{RuleSpec, RULES};
use crate::validator::{CheckError, CodeValidator, Outcome, SourceFile};

/// A rule that matched, with the place its first pattern matched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RuleHit {
    pub rule_id: &'static str,
    pub reason: &'static str,
    pub path: String,
    pub line: usize,
}

impl fmt::Display for RuleHit {
    /// `<rule id>: <reason> (<file>:<line>)`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} ({}:{})", self.rule_id, self.reason, self.path, self.line)
    }
}

struct CompiledRule {
    spec: &'static RuleSpec,
    anchor: Regex,
    rest: Vec<Regex>,
}

/// All rules, compiled once; the anchors also form one set so that a file is
/// read once to learn which rules can match at all.
struct RuleSet {
    rules: Vec<CompiledRule>,
    anchors: RegexSet,
}

fn ascii(pattern: &str) -> String {
    format!("(?-u){pattern}")
}

static RULE_SET: LazyLock<RuleSet> = LazyLock::new(|| {
    // The table is a constant: a pattern that does not compile is a bug
    // caught by the first test that runs the static pass.
    let compile = |p: &str| Regex::new(&ascii(p)).expect("static rule pattern compiles");
    let rules: Vec<CompiledRule> = RULES
        .iter()
        .map(|spec| CompiledRule {
            spec,
            anchor: compile(spec.all_of[0]),
            rest: spec.all_of[1..].iter().map(|p| compile(p)).collect(),
        })
        .collect();
    let anchors = RegexSet::new(RULES.iter().map(|spec| ascii(spec.all_of[0]))).expect("static rule anchors compile");
    RuleSet { rules, anchors }
});

/// A file with a NUL byte is treated as binary.
pub(crate) fn is_binary(contents: &[u8]) -> bool {
    contents.contains(&0)
}

fn line_of(contents: &[u8], offset: usize) -> usize {
    contents[..offset].iter().filter(|&&b| b == b'\n').count() + 1
}

impl RuleSet {
    fn scan_file(&self, file: &SourceFile) -> Option<RuleHit> {
        let binary = is_binary(&file.contents);
        let candidates = self.anchors.matches(&file.contents);
        for index in candidates.iter() {
            let rule = &self.rules[index];
            if binary && !rule.spec.in_binaries {
                continue;
            }
            if !rule.rest.iter().all(|re| re.is_match(&file.contents)) {
                continue;
            }
            if let Some(found) = rule.anchor.find(&file.contents) {
                return Some(RuleHit {
                    rule_id: rule.spec.id,
                    reason: rule.spec.reason,
                    path: file.path.clone(),
                    line: line_of(&file.contents, found.start()),
                });
            }
        }
        None
    }
}

/// Runs every rule over every file, in path order, and returns the first hit.
pub(crate) fn scan(files: &[SourceFile]) -> Option<RuleHit> {
    let mut ordered: Vec<&SourceFile> = files.iter().collect();
    ordered.sort_by(|a, b| a.path.cmp(&b.path));
    ordered.into_iter().find_map(|file| RULE_SET.scan_file(file))
}

/// Mode `static`: the rule table alone.
pub(crate) struct StaticCheck {
    metrics: Arc<CheckMetrics>,
}

impl StaticCheck {
    pub(crate) fn new(metrics: Arc<CheckMetrics>) -> Self {
        Self { metrics }
    }

    /// The static verdict, counted and logged; shared with the LLM check,
    /// which runs it first.
    pub(crate) fn verdict(&self, files: &[SourceFile]) -> Result<(), CheckError> {
        match scan(files) {
            Some(hit) => {
                self.metrics.record(Decision::RuleHit);
                tracing::warn!(
                    decision = Decision::RuleHit.label(),
                    rule = hit.rule_id,
                    file = %hit.path,
                    line = hit.line,
                    "code check rejected upload: {hit}"
                );
                Err(CheckError::Rejected {
                    message: hit.to_string(),
                })
            }
            None => {
                self.metrics.record(Decision::StaticPassed);
                tracing::info!(
                    decision = Decision::StaticPassed.label(),
                    files = files.len(),
                    "code check: no static rule matched"
                );
                Ok(())
            }
        }
    }
}

#[async_trait]
impl CodeValidator for StaticCheck {
    async fn check(&self, files: &[SourceFile]) -> Result<Outcome, CheckError> {
        self.verdict(files)?;
        Ok(Outcome::Passed {
            summary: "passed: static".to_owned(),
        })
    }
}
