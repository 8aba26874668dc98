//! Integration tests of the code-safety gate: the static rules over a corpus
//! of sample functions, and the LLM path against a scripted OpenAI-compatible
//! server started by the test.

#[path = "codecheck/support.rs"]
mod support;

#[path = "codecheck/fake_llm.rs"]
mod fake_llm;

#[path = "codecheck/static_rules.rs"]
mod static_rules;

#[path = "codecheck/llm_review.rs"]
mod llm_review;

#[path = "codecheck/config_and_metrics.rs"]
mod config_and_metrics;
