//! Image mode: a version's image is baked by a kaniko Job in the control
//! plane's namespace before its Deployment runs it; deleting the function
//! deletes those Jobs by label (an owner cannot be in another namespace).

use super::*;
use crate::objects::image_build;

fn image_mode() -> Scenario {
    let mut settings = settings();
    settings.build = sless_driver_k8s::BuildMode::Image;
    settings.image_build = Some(image_build(true));
    scenario_of(settings, None)
}

const IMAGE_JOBS: &str = "/apis/batch/v1/namespaces/sless/jobs";

#[tokio::test]
async fn a_version_in_image_mode_runs_the_image_its_kaniko_job_pushed() {
    let mut s = image_mode();
    let (deployed, ()) = tokio::join!(s.driver.deploy(version(1, false)), async {
        let made = s
            .api
            .expect("POST", IMAGE_JOBS, 201, job("image-demo-hello-v1", json!({})))
            .await;
        assert_eq!(made.body["metadata"]["name"], "image-demo-hello-v1");
        let args = made.body["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
        assert!(
            args.contains("--destination=registry.sless.svc:5000/sless-demo-hello:v1"),
            "{args}"
        );
        s.api
            .expect(
                "GET",
                &format!("{IMAGE_JOBS}/image-demo-hello-v1"),
                200,
                job(
                    "image-demo-hello-v1",
                    json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}),
                ),
            )
            .await;
        s.api.prepares_namespace_and_anchor().await;
        let deployment = s.api.applies_version(1, 1).await;
        let pod = &deployment["spec"]["template"]["spec"];
        assert_eq!(
            pod["containers"][0]["image"],
            "registry.sless.svc:5000/sless-demo-hello:v1"
        );
        assert!(pod.get("initContainers").is_none(), "the image holds the code: {pod}");
    });
    deployed.unwrap();
    let (removed, ()) = tokio::join!(remove(&s.driver), async {
        s.api
            .expect("DELETE", &format!("{CORE}/configmaps/fn-hello"), 200, success())
            .await;
        let listed = s
            .api
            .expect(
                "GET",
                IMAGE_JOBS,
                200,
                json!({"apiVersion": "batch/v1", "kind": "JobList", "metadata": {},
                       "items": [job("image-demo-hello-v1", json!({}))]}),
            )
            .await;
        assert!(
            listed.query.contains("sless.dev%2Fcomponent%3Dimage-build"),
            "{}",
            listed.query
        );
        s.api
            .expect("DELETE", &format!("{IMAGE_JOBS}/image-demo-hello-v1"), 200, success())
            .await;
    });
    removed.unwrap();
}

#[tokio::test]
async fn a_failed_image_build_is_a_failed_deploy_with_kanikos_message() {
    let mut s = image_mode();
    let (deployed, ()) = tokio::join!(s.driver.deploy(version(1, false)), async {
        s.api
            .expect("POST", IMAGE_JOBS, 201, job("image-demo-hello-v1", json!({})))
            .await;
        s.api
            .expect(
                "GET",
                &format!("{IMAGE_JOBS}/image-demo-hello-v1"),
                200,
                job(
                    "image-demo-hello-v1",
                    json!({"failed": 1, "conditions": [{"type": "Failed", "status": "True",
                    "reason": "BackoffLimitExceeded"}]}),
                ),
            )
            .await;
        s.api
            .expect(
                "GET",
                "/api/v1/namespaces/sless/pods",
                200,
                pod_list(vec![ended_pod(
                    "image-pod",
                    "kaniko",
                    1,
                    "error pushing image: UNAUTHORIZED",
                )]),
            )
            .await;
        s.api.nothing_more().await;
    });
    let Err(DriverError::Unavailable(error)) = deployed else {
        panic!("a failed deploy, not {deployed:?}")
    };
    assert!(error.contains("UNAUTHORIZED"), "{error}");
}
