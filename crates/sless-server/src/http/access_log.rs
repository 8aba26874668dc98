//! The one access log of every request, the `/fn` gateway's and the
//! router's alike: a span with method and path around the request, and one
//! line with status and latency when it is answered (a warning for 5xx).

use std::convert::Infallible;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::extract::Request;
use axum::response::Response;
use futures::future::BoxFuture;
use tower::Service;
use tracing::Instrument;

/// Wraps a service with the access log.
#[derive(Clone)]
pub struct AccessLog<S>(pub S);

impl<S> Service<Request> for AccessLog<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        // A path may be 64 KiB long (the head's bound); the log keeps 1 KiB.
        let path = sless_api::text::Cut(request.uri().path(), 1024);
        let span = tracing::info_span!("request", method = %request.method(), path = %path);
        let started = Instant::now();
        let answer = self.0.call(request);
        Box::pin(
            async move {
                let Ok(response) = answer.await;
                let status = response.status().as_u16();
                let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
                if status >= 500 {
                    tracing::warn!(status, latency_ms, "request");
                } else {
                    tracing::info!(status, latency_ms, "request");
                }
                Ok(response)
            }
            .instrument(span),
        )
    }
}
