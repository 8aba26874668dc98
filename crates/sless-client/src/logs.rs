//! A function's invocation history and its handler output: the
//! `/invocations` pages and the `/logs` text (whole or followed).

use reqwest::{Method, Response, Url};
use sless_api::InvocationPage;

use crate::error::{Error, Result};
use crate::http::Client;

impl Client {
    /// `GET .../functions/{name}/invocations`: newest first, at most `limit`
    /// (the server's default when `None`), older than the invocation id
    /// `before` (pass the previous page's `next_before`).
    pub async fn list_invocations(
        &self,
        ns: &str,
        name: &str,
        limit: Option<u32>,
        before: Option<&str>,
    ) -> Result<InvocationPage> {
        let mut url = self.ns_url(ns, &["functions", name, "invocations"]);
        {
            let mut query = url.query_pairs_mut();
            if let Some(limit) = limit {
                query.append_pair("limit", &limit.to_string());
            }
            if let Some(before) = before {
                query.append_pair("before", before);
            }
        }
        strip_empty_query(&mut url);
        self.get_json(url).await
    }

    /// `GET .../functions/{name}/logs?follow=false`: the captured handler
    /// output of calls older than the invocation id `before` (all when
    /// `None`), one line each, `{RFC3339 time} {request_id} {stdout|stderr} {text}`.
    /// An answer holds a bounded part of the history: its `next_before`
    /// says where older lines begin.
    pub async fn logs(&self, ns: &str, name: &str, tail: Option<u32>, before: Option<&str>) -> Result<LogPage> {
        let mut url = self.logs_url(ns, name, false, tail);
        if let Some(before) = before {
            url.query_pairs_mut().append_pair("before", before);
        }
        let response = self.send(self.api(Method::GET, &url), &url).await?;
        let next_before = next_before(&response);
        let text = response.text().await.map_err(|cause| Error::Transport {
            url: url.to_string(),
            cause,
        })?;
        Ok(LogPage { text, next_before })
    }

    /// `GET .../functions/{name}/logs?follow=true`: the last `tail` lines,
    /// then new ones as handlers print them, until the stream is dropped.
    pub async fn follow_logs(&self, ns: &str, name: &str, tail: Option<u32>) -> Result<LogStream> {
        let url = self.logs_url(ns, name, true, tail);
        let request = self.api_with_timeout(Method::GET, &url, None);
        let response = self.send(request, &url).await?;
        Ok(LogStream {
            next_before: next_before(&response),
            response,
            url,
            buffer: Vec::new(),
            done: false,
        })
    }

    fn logs_url(&self, ns: &str, name: &str, follow: bool, tail: Option<u32>) -> Url {
        let mut url = self.ns_url(ns, &["functions", name, "logs"]);
        {
            let mut query = url.query_pairs_mut();
            query.append_pair("follow", if follow { "true" } else { "false" });
            if let Some(tail) = tail {
                query.append_pair("tail", &tail.to_string());
            }
        }
        url
    }
}

/// Where older lines begin, as a `/logs` answer says it.
fn next_before(response: &Response) -> Option<String> {
    let value = response.headers().get(sless_api::LOGS_NEXT_BEFORE)?;
    value
        .to_str()
        .ok()
        .filter(|id| sless_api::is_record_id(id))
        .map(str::to_string)
}

/// Part of a function's log history.
#[derive(Debug, Clone)]
pub struct LogPage {
    /// Lines, oldest first, each ending in a newline.
    pub text: String,
    /// Where older lines begin (the next `before`), when some are left.
    pub next_before: Option<String>,
}

pub(crate) fn strip_empty_query(url: &mut Url) {
    if url.query() == Some("") {
        url.set_query(None);
    }
}

/// Followed log lines, read as the server sends them.
#[derive(Debug)]
pub struct LogStream {
    /// Where lines older than the history sent first begin, when some are
    /// left.
    pub next_before: Option<String>,
    response: Response,
    url: Url,
    buffer: Vec<u8>,
    done: bool,
}

impl LogStream {
    /// The next line without its newline; `None` once the server ends the
    /// stream.
    pub async fn next_line(&mut self) -> Result<Option<String>> {
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let mut line: Vec<u8> = self.buffer.drain(..=end).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(Some(String::from_utf8_lossy(&line).into_owned()));
            }
            if self.done {
                if self.buffer.is_empty() {
                    return Ok(None);
                }
                let rest = std::mem::take(&mut self.buffer);
                return Ok(Some(String::from_utf8_lossy(&rest).into_owned()));
            }
            match self.response.chunk().await {
                Ok(Some(chunk)) => self.buffer.extend_from_slice(&chunk),
                Ok(None) => self.done = true,
                Err(cause) => {
                    return Err(Error::Transport {
                        url: self.url.to_string(),
                        cause,
                    })
                }
            }
        }
    }
}
