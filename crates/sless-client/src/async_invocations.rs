//! The records of a function's asynchronous calls (`.../async-invocations`).

use sless_api::{AsyncInvocation, AsyncInvocationPage};

use crate::error::Result;
use crate::http::Client;

impl Client {
    /// `GET .../functions/{name}/async-invocations/{id}`: one event's state and attempts.
    pub async fn get_async_invocation(&self, ns: &str, name: &str, id: &str) -> Result<AsyncInvocation> {
        self.get_json(self.ns_url(ns, &["functions", name, "async-invocations", id]))
            .await
    }

    /// `GET .../functions/{name}/async-invocations`: a page, newest first,
    /// of at most `limit` (the server's default when `None`), only in
    /// `status` when given, older than the event id `before` (pass the
    /// previous page's `next_before`; a page may end before `limit`, where
    /// its JSON would pass the server's bound in bytes).
    pub async fn list_async_invocations(
        &self,
        ns: &str,
        name: &str,
        status: Option<&str>,
        limit: Option<u32>,
        before: Option<&str>,
    ) -> Result<AsyncInvocationPage> {
        let mut url = self.ns_url(ns, &["functions", name, "async-invocations"]);
        {
            let mut query = url.query_pairs_mut();
            if let Some(status) = status {
                query.append_pair("status", status);
            }
            if let Some(limit) = limit {
                query.append_pair("limit", &limit.to_string());
            }
            if let Some(before) = before {
                query.append_pair("before", before);
            }
        }
        crate::logs::strip_empty_query(&mut url);
        self.get_json(url).await
    }
}
