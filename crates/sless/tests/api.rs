//! End-to-end tests of the sless server over real HTTP, each run against both
//! stores (SQLite and the PostgreSQL on 127.0.0.1:5432).

mod api {
    mod amqp;
    mod archive_rules;
    mod asynchronous;
    mod auth;
    mod browser;
    mod cli;
    mod cli_edges;
    mod cluster;
    mod cluster_faults;
    mod cluster_quotas;
    mod code_check;
    mod console;
    mod console_api;
    mod deleting;
    mod deploys;
    mod failures;
    mod fake_cluster;
    mod fake_cluster_rollout;
    mod fake_cluster_runs;
    mod fidelity;
    mod functions;
    mod handler_output;
    mod handlers;
    pub mod harness;
    mod instance;
    mod instance_build;
    mod jobs;
    mod kubernetes;
    mod leftovers;
    mod lifecycle;
    mod network;
    mod observability;
    mod poisoning;
    mod sandbox;
    mod scaling;
    mod secrets;
    mod starving;
    mod tenants;
    mod triggers;
    mod upgrade;
    mod versions;
    mod warm_pods;
    mod zygote;
}
