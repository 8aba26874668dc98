//! Configuration parsing and errors, mode `off`, and the Prometheus rendering.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sless_codecheck::{build, CheckConfig, CheckMetrics, Decision, FailMode, Mode, Outcome, SourceFile};

use crate::support::{corpus, static_validator, validator};

#[test]
fn modes_parse_and_bad_values_are_named() {
    assert_eq!("off".parse::<Mode>().unwrap(), Mode::Off);
    assert_eq!("static".parse::<Mode>().unwrap(), Mode::Static);
    assert_eq!(" LLM ".parse::<Mode>().unwrap(), Mode::Llm);
    let err = "strict".parse::<Mode>().unwrap_err().to_string();
    assert!(
        err.contains("\"strict\"") && err.contains("off, static or llm"),
        "{err}"
    );

    assert_eq!("open".parse::<FailMode>().unwrap(), FailMode::Open);
    assert_eq!("closed".parse::<FailMode>().unwrap(), FailMode::Closed);
    let err = "shut".parse::<FailMode>().unwrap_err().to_string();
    assert!(err.contains("\"shut\""), "{err}");

    assert_eq!(Mode::Llm.to_string(), "llm");
    assert_eq!(FailMode::Closed.to_string(), "closed");
}

#[test]
fn defaults_are_off_open_15s_100kb() {
    let config = CheckConfig::default();
    assert_eq!(config.mode, Mode::Off);
    assert_eq!(config.fail_mode, FailMode::Open);
    assert_eq!(config.llm_timeout, Duration::from_secs(15));
    assert_eq!(config.size_budget_bytes, 102_400);
    assert_eq!(config.llm_model, "gpt-4o-mini");
}

#[test]
fn debug_output_hides_the_api_key() {
    let config = CheckConfig {
        llm_api_key: Some("sk-very-secret".to_owned()),
        ..CheckConfig::default()
    };
    let shown = format!("{config:?}");
    assert!(!shown.contains("sk-very-secret"), "{shown}");
    assert!(shown.contains("<redacted>"));
}

fn build_error(config: CheckConfig) -> String {
    match build(&config, Arc::new(CheckMetrics::new())) {
        Ok(_) => panic!("expected a config error for {config:?}"),
        Err(err) => err.to_string(),
    }
}

#[test]
fn llm_mode_without_endpoint_names_the_setting() {
    let err = build_error(CheckConfig {
        mode: Mode::Llm,
        ..CheckConfig::default()
    });
    assert!(err.contains("SLESS_LLM_ENDPOINT"), "{err}");
}

#[test]
fn a_bad_endpoint_is_named() {
    let err = build_error(CheckConfig {
        mode: Mode::Llm,
        llm_endpoint: Some("llm.internal:8000".to_owned()),
        ..CheckConfig::default()
    });
    assert!(err.contains("llm.internal:8000"), "{err}");
}

#[test]
fn an_unreadable_prompt_file_is_named() {
    let path = PathBuf::from("/nonexistent/sless/prompt.txt");
    let err = build_error(CheckConfig {
        mode: Mode::Llm,
        llm_endpoint: Some("http://127.0.0.1:9".to_owned()),
        llm_prompt_file: Some(path),
        ..CheckConfig::default()
    });
    assert!(err.contains("/nonexistent/sless/prompt.txt"), "{err}");
}

#[test]
fn static_mode_needs_no_llm_settings() {
    let config = CheckConfig {
        mode: Mode::Static,
        llm_prompt_file: Some(PathBuf::from("/nonexistent/prompt.txt")),
        ..CheckConfig::default()
    };
    assert!(build(&config, Arc::new(CheckMetrics::new())).is_ok());
}

#[tokio::test]
async fn off_mode_lets_everything_through_uncounted() {
    let (validator, metrics) = validator(&CheckConfig::default());
    let outcome = validator.check(&[corpus("python/miner.py")]).await;
    assert_eq!(
        outcome,
        Ok(Outcome::Unchecked {
            summary: "unchecked: code check off".to_owned()
        })
    );
    for decision in Decision::ALL {
        assert_eq!(metrics.count(decision), 0);
    }
}

#[tokio::test]
async fn metrics_render_as_prometheus_text() {
    let (validator, metrics) = static_validator();
    validator.check(&[corpus("python/miner.py")]).await.unwrap_err();
    validator.check(&[corpus("node/reverse_shell.js")]).await.unwrap_err();
    validator.check(&[SourceFile::new("ok.py", "x = 1\n")]).await.unwrap();
    assert_eq!(
        metrics.render_prometheus(),
        "# HELP sless_code_checks_total Code-safety gate decisions on uploaded functions, by decision.\n\
         # TYPE sless_code_checks_total counter\n\
         sless_code_checks_total{decision=\"rule_hit\"} 2\n\
         sless_code_checks_total{decision=\"static_passed\"} 1\n\
         sless_code_checks_total{decision=\"llm_safe\"} 0\n\
         sless_code_checks_total{decision=\"llm_unsafe\"} 0\n\
         sless_code_checks_total{decision=\"llm_skipped\"} 0\n\
         sless_code_checks_total{decision=\"llm_error\"} 0\n"
    );
}
