//! Deploys, new versions, scale from zero, disable, delete.

use super::*;

#[tokio::test]
async fn a_first_deploy_prepares_the_namespace_then_serves_from_a_ready_pod() {
    let mut s = scenario();
    deployed(&mut s).await;
    let pod = fake_instance::start("demo", "hello", 1).await;
    let (result, ()) = tokio::join!(
        invoke(&s.driver, 1, 1),
        s.api.lists_endpoints(std::slice::from_ref(&pod))
    );
    let result = result.unwrap();
    assert_eq!(result.status, 200);
    assert_eq!(
        serde_json::from_slice::<Value>(&result.body).unwrap(),
        json!({"event": {"n": 1}})
    );
    assert_eq!(result.logs[0].text, "handled\n");
    assert!(!result.cold_start);
    assert_eq!(result.version, 1);
    // The list of ready pods is kept: the next call asks the API nothing.
    let (again, ()) = tokio::join!(invoke(&s.driver, 1, 2), s.api.nothing_more());
    assert_eq!(again.unwrap().status, 200);
    let stats = s.driver.stats().await;
    assert_eq!(stats.len(), 1);
    assert_eq!(stats[0].1.instances, 1);
}

#[tokio::test]
async fn a_new_version_applies_its_own_objects_and_waits_for_its_rollout() {
    let mut s = scenario();
    deployed(&mut s).await;
    let (deployed, ()) = tokio::join!(s.driver.deploy(version(2, true)), async {
        s.api.applies_version(2, 1).await;
        s.api
            .expect(
                "GET",
                &format!("{APPS}/deployments/fn-hello-v2"),
                200,
                deployment(
                    "fn-hello-v2",
                    2,
                    1,
                    json!({"observedGeneration": 1, "replicas": 1,
                    "updatedReplicas": 1, "readyReplicas": 1}),
                ),
            )
            .await;
        // Version 1 is left alone.
        s.api.nothing_more().await;
    });
    deployed.unwrap();
    let deployed: Vec<u64> = s.driver.stats().await.iter().map(|(t, _)| t.version).collect();
    assert_eq!(deployed, [1, 2]);
}

#[tokio::test]
async fn a_new_version_whose_handler_does_not_load_is_taken_away_again() {
    let mut s = scenario();
    deployed(&mut s).await;
    let (deployed, ()) = tokio::join!(s.driver.deploy(version(2, true)), async {
        s.api.applies_version(2, 1).await;
        s.api
            .expect(
                "GET",
                &format!("{APPS}/deployments/fn-hello-v2"),
                200,
                deployment(
                    "fn-hello-v2",
                    2,
                    1,
                    json!({"observedGeneration": 1, "replicas": 1,
                    "updatedReplicas": 1}),
                ),
            )
            .await;
        let pods = s
            .api
            .expect(
                "GET",
                &format!("{CORE}/pods"),
                200,
                pod_list(vec![ended_pod(
                    "fn-hello-v2-abc",
                    "instance",
                    3,
                    "ModuleNotFoundError: No module named 'handler'",
                )]),
            )
            .await;
        assert!(pods.query.contains("sless.dev%2Fversion%3D2"), "{}", pods.query);
        s.api
            .expect("DELETE", &format!("{APPS}/deployments/fn-hello-v2"), 200, success())
            .await;
        s.api
            .expect("DELETE", &format!("{CORE}/services/fn-hello-v2"), 200, success())
            .await;
    });
    let Err(DriverError::LoadFailed(error)) = deployed else {
        panic!("a load failure, not {deployed:?}")
    };
    assert!(error.contains("No module named 'handler'"), "{error}");
    let (missing, ()) = tokio::join!(invoke(&s.driver, 2, 1), s.api.nothing_more());
    assert!(matches!(missing, Err(InvokeError::NotDeployed(_))), "{missing:?}");
}

#[tokio::test]
async fn a_call_at_zero_scales_the_deployment_to_one_and_waits_for_its_pod() {
    let mut s = scenario();
    deployed(&mut s).await;
    let pod = fake_instance::start("demo", "hello", 1).await;
    let (result, ()) = tokio::join!(invoke(&s.driver, 1, 7), async {
        s.api.lists_endpoints(&[]).await;
        s.api
            .expect(
                "GET",
                &format!("{APPS}/deployments/fn-hello-v1/scale"),
                200,
                scale("fn-hello-v1", 0, "41"),
            )
            .await;
        // Only if nobody scaled it meanwhile (the scale's resource version).
        let scaled = s
            .api
            .expect(
                "PATCH",
                &format!("{APPS}/deployments/fn-hello-v1/scale"),
                200,
                scale("fn-hello-v1", 1, "42"),
            )
            .await;
        assert_eq!(
            scaled.body,
            json!({"metadata": {"resourceVersion": "41"}, "spec": {"replicas": 1}})
        );
        assert_eq!(scaled.content_type, "application/merge-patch+json");
        // Not ready yet, then ready.
        s.api.lists_endpoints(&[]).await;
        s.api.lists_endpoints(&[pod]).await;
    });
    let result = result.unwrap();
    assert!(result.cold_start);
    assert_eq!(
        serde_json::from_slice::<Value>(&result.body).unwrap(),
        json!({"event": {"n": 7}})
    );
}

#[tokio::test]
async fn disabling_scales_every_version_to_zero_and_calls_get_disabled() {
    let mut s = scenario();
    deployed(&mut s).await;
    let (disabled, ()) = tokio::join!(set_enabled(&s.driver, false), async {
        // Every version in the cluster, also one this replica did not deploy.
        let listed = s
            .api
            .expect(
                "GET",
                &format!("{APPS}/deployments"),
                200,
                json!({"apiVersion": "apps/v1", "kind": "DeploymentList", "metadata": {}, "items": [
                    deployment("fn-hello-v1", 1, 1, json!({})),
                    deployment("fn-hello-v2", 2, 3, json!({})),
                ]}),
            )
            .await;
        assert!(
            listed.query.contains("sless.dev%2Ffunction%3Dhello"),
            "{}",
            listed.query
        );
        for name in ["fn-hello-v1", "fn-hello-v2"] {
            let scaled = s
                .api
                .expect(
                    "PATCH",
                    &format!("{APPS}/deployments/{name}/scale"),
                    200,
                    scale(name, 0, "9"),
                )
                .await;
            assert_eq!(scaled.body, json!({"spec": {"replicas": 0}}));
        }
    });
    disabled.unwrap();
    let (refused, ()) = tokio::join!(invoke(&s.driver, 1, 1), s.api.nothing_more());
    assert!(matches!(refused, Err(InvokeError::Disabled(_))), "{refused:?}");
    // Back on: nothing to scale (the first call wakes it), calls go through again.
    let (enabled, ()) = tokio::join!(set_enabled(&s.driver, true), async {
        s.api
            .expect(
                "GET",
                &format!("{APPS}/deployments"),
                200,
                json!({"apiVersion": "apps/v1", "kind": "DeploymentList", "metadata": {},
                       "items": [deployment("fn-hello-v1", 1, 0, json!({}))]}),
            )
            .await;
        s.api.nothing_more().await;
    });
    enabled.unwrap();
    let pod = fake_instance::start("demo", "hello", 1).await;
    let (result, ()) = tokio::join!(
        invoke(&s.driver, 1, 2),
        s.api.lists_endpoints(std::slice::from_ref(&pod))
    );
    assert_eq!(result.unwrap().status, 200);
}

#[tokio::test]
async fn deleting_a_function_deletes_its_anchor_and_with_it_everything_it_owns() {
    let mut s = scenario();
    deployed(&mut s).await;
    let (removed, ()) = tokio::join!(remove(&s.driver), async {
        let deleted = s
            .api
            .expect("DELETE", &format!("{CORE}/configmaps/fn-hello"), 200, success())
            .await;
        assert_eq!(deleted.body["propagationPolicy"], "Foreground");
    });
    removed.unwrap();
    let (missing, ()) = tokio::join!(invoke(&s.driver, 1, 1), s.api.nothing_more());
    assert!(matches!(missing, Err(InvokeError::NotDeployed(_))), "{missing:?}");
    assert!(s.driver.stats().await.is_empty());
    // Deployed again: a new anchor (the namespace is still prepared).
    let (again, ()) = tokio::join!(s.driver.deploy(version(3, false)), async {
        s.api.anchors().await;
        s.api.applies_version(3, 1).await;
    });
    again.unwrap();
}

#[tokio::test]
async fn a_call_that_waits_for_a_slot_asks_for_one_more_pod() {
    let mut s = scenario();
    let mut one_at_a_time = spec();
    one_at_a_time.concurrency = 1;
    one_at_a_time.max_instances = 3;
    let deployment = Deployment {
        spec: one_at_a_time,
        ..version(1, false)
    };
    let (deployed, ()) = tokio::join!(s.driver.deploy(deployment), async {
        s.api.prepares_namespace_and_anchor().await;
        s.api.applies_version(1, 1).await;
    });
    deployed.unwrap();
    let pod = fake_instance::start("demo", "hello", 1).await;
    let (slot_taken, taken) = tokio::sync::oneshot::channel();
    let (driver, api) = (&s.driver, &mut s.api);
    let version = target(1);
    let slow = Invocation {
        event: Some(json!({"sleep_ms": 300})),
        ..call(1)
    };
    let scale_path = format!("{APPS}/deployments/fn-hello-v1/scale");
    let (first, second, ()) = tokio::join!(
        driver.invoke(&version, &slow),
        async {
            taken.await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            invoke(driver, 1, 2).await
        },
        async {
            api.lists_endpoints(std::slice::from_ref(&pod)).await;
            slot_taken.send(()).unwrap();
            // The second call finds the only slot taken: one pod more.
            api.expect("GET", &scale_path, 200, scale("fn-hello-v1", 1, "3")).await;
            let scaled = api
                .expect("PATCH", &scale_path, 200, scale("fn-hello-v1", 2, "4"))
                .await;
            assert_eq!(
                scaled.body,
                json!({"metadata": {"resourceVersion": "3"}, "spec": {"replicas": 2}})
            );
            api.nothing_more().await;
        }
    );
    assert_eq!(first.unwrap().status, 200);
    assert_eq!(second.unwrap().status, 200);
}

#[tokio::test]
async fn new_settings_whose_handler_does_not_load_give_the_version_its_old_spec_back() {
    let mut s = scenario();
    deployed(&mut s).await;
    let mut broken = spec();
    broken.entrypoint = "missing.handle".into();
    let respec = Deployment {
        spec: broken,
        ..version(1, true)
    };
    let (deployed, ()) = tokio::join!(s.driver.deploy(respec), async {
        let applied = s.api.applies_version(1, 1).await;
        let env = applied["spec"]["template"]["spec"]["containers"][0]["env"].to_string();
        assert!(env.contains("missing.handle"), "{env}");
        s.api
            .expect(
                "GET",
                &format!("{APPS}/deployments/fn-hello-v1"),
                200,
                deployment(
                    "fn-hello-v1",
                    1,
                    1,
                    json!({"observedGeneration": 1, "replicas": 2,
                    "updatedReplicas": 1, "readyReplicas": 1}),
                ),
            )
            .await;
        s.api
            .expect(
                "GET",
                &format!("{CORE}/pods"),
                200,
                pod_list(vec![ended_pod(
                    "fn-hello-v1-new",
                    "instance",
                    3,
                    "No module named 'missing'",
                )]),
            )
            .await;
        // The spec that served is applied again.
        let restored = s.api.apply(&format!("{APPS}/deployments/fn-hello-v1")).await;
        let env = restored["spec"]["template"]["spec"]["containers"][0]["env"].to_string();
        assert!(
            env.contains("handler.handle") && !env.contains("missing.handle"),
            "{env}"
        );
        s.api.nothing_more().await;
    });
    let Err(DriverError::LoadFailed(error)) = deployed else {
        panic!("a load failure, not {deployed:?}")
    };
    assert!(error.contains("No module named 'missing'"), "{error}");
    // Still deployed, still served.
    let pod = fake_instance::start("demo", "hello", 1).await;
    let (result, ()) = tokio::join!(
        invoke(&s.driver, 1, 3),
        s.api.lists_endpoints(std::slice::from_ref(&pod))
    );
    assert_eq!(result.unwrap().status, 200);
}

/// Version 1 with `password` as its secret variable and one secret file.
fn with_secrets(password: &str, verify: bool) -> Deployment {
    Deployment {
        secrets: SecretValues {
            env: vec![("DB_PASSWORD".into(), password.into())],
            files: vec![SecretFile {
                secret: "tls".into(),
                key: "server.key".into(),
                value: b"key".to_vec(),
            }],
        },
        ..version(1, verify)
    }
}

#[tokio::test]
async fn a_version_with_secrets_applies_the_functions_secret_and_rolls_when_a_value_changes() {
    let mut s = scenario();
    let (deployed, ()) = tokio::join!(s.driver.deploy(with_secrets("one", false)), async {
        s.api.prepares_namespace_and_anchor().await;
        let secret = s.api.apply_at(&format!("{CORE}/secrets/fn-hello"), Some("11")).await;
        assert_eq!(secret["metadata"]["ownerReferences"][0]["uid"], "uid-of-fn-hello");
        assert_eq!(secret["data"]["env.DB_PASSWORD"], "b25l", "base64 of the value");
        assert_eq!(secret["data"]["file.tls.server.key"], "a2V5");
        let deployment = s.api.applies_version(1, 1).await;
        let template = &deployment["spec"]["template"];
        assert_eq!(template["metadata"]["annotations"]["sless.dev/secrets-revision"], "11");
        let text = template.to_string();
        assert!(
            !text.contains("b25l") && !text.contains("\"one\""),
            "no value in the Deployment: {text}"
        );
    });
    deployed.unwrap();
    // New values: the Secret changes (a new resourceVersion), and so does
    // the pod template, which rolls the pods.
    let (deployed, ()) = tokio::join!(s.driver.deploy(with_secrets("two", false)), async {
        let secret = s.api.apply_at(&format!("{CORE}/secrets/fn-hello"), Some("12")).await;
        assert_eq!(secret["data"]["env.DB_PASSWORD"], "dHdv");
        let deployment = s.api.applies_version(1, 1).await;
        assert_eq!(
            deployment["spec"]["template"]["metadata"]["annotations"]["sless.dev/secrets-revision"],
            "12"
        );
    });
    deployed.unwrap();
}
