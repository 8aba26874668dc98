//! Lists the server hands out a page at a time (invocation records,
//! asynchronous events): a page holds at most 1000 records and ends sooner
//! where its JSON would pass the server's bound in bytes, so one request
//! may answer fewer than a user asked for. A command follows the pages up
//! to its `--limit`, and says on stderr how to see the rest.

use std::future::Future;

/// The most records one command lists (`--limit`): a few pages' worth,
/// which still prints at once.
pub const MAX_LIMIT: u32 = 10_000;

/// The most records one request asks for: the server's bound on `limit`.
const MAX_PAGE: u32 = 1000;

/// `--limit`, checked as clap parses it.
pub fn limit(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(limit) if (1..=MAX_LIMIT).contains(&limit) => Ok(limit),
        _ => Err(format!("expected a number from 1 to {MAX_LIMIT}")),
    }
}

/// Records, newest first, and where older ones begin (the next `--before`)
/// when some are left.
pub struct Listed<T> {
    pub items: Vec<T>,
    pub next_before: Option<String>,
}

/// Up to `limit` records older than `before`: `fetch(before, limit)` asks
/// for one page and answers its records and its `next_before`; pages are
/// fetched until `limit` records or the last page.
pub async fn follow<T, F, Page>(limit: u32, before: Option<String>, mut fetch: F) -> anyhow::Result<Listed<T>>
where
    F: FnMut(Option<String>, u32) -> Page,
    Page: Future<Output = sless_client::Result<(Vec<T>, Option<String>)>>,
{
    let limit = limit as usize;
    let mut listed = Listed {
        items: Vec::new(),
        next_before: before,
    };
    loop {
        let left = (limit - listed.items.len()).min(MAX_PAGE as usize) as u32;
        let (items, next_before) = fetch(listed.next_before.take(), left).await?;
        // Every page but the last holds a record (its cursor is the id of
        // its last one), so each turn moves towards `limit`.
        let empty = items.is_empty();
        listed.items.extend(items);
        listed.next_before = next_before;
        if empty || listed.next_before.is_none() || listed.items.len() >= limit {
            return Ok(listed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{follow, limit, MAX_LIMIT};

    /// Records "9" to "0", newest first, served `page` at a time at most
    /// (as a server whose pages end at its bound in bytes).
    async fn listed(most: u32, before: Option<&str>, page: usize) -> (Vec<String>, Option<String>, Vec<u32>) {
        let records: Vec<String> = (0..10).rev().map(|i| i.to_string()).collect();
        let mut asked = Vec::new();
        let listed = follow(most, before.map(str::to_string), |before, limit| {
            asked.push(limit);
            let start = match before {
                Some(id) => records.iter().position(|r| *r == id).unwrap() + 1,
                None => 0,
            };
            let end = records.len().min(start + page.min(limit as usize));
            let items = records[start..end].to_vec();
            let next = (end < records.len()).then(|| items.last().unwrap().clone());
            async move { Ok::<_, sless_client::Error>((items, next)) }
        })
        .await
        .unwrap();
        (listed.items, listed.next_before, asked)
    }

    #[tokio::test]
    async fn pages_are_followed_up_to_the_limit_and_say_where_the_rest_begin() {
        let (items, next, asked) = listed(5, None, 2).await;
        assert_eq!(items, ["9", "8", "7", "6", "5"]);
        assert_eq!(next.as_deref(), Some("5"));
        assert_eq!(asked, [5, 3, 1], "never more than is left to list");

        let (items, next, _) = listed(5, next.as_deref(), 2).await;
        assert_eq!(items, ["4", "3", "2", "1", "0"]);
        assert_eq!(next, None, "the last page has no cursor");

        let (items, next, asked) = listed(MAX_LIMIT, None, 3).await;
        assert_eq!((items.len(), next), (10, None));
        assert_eq!(asked[0], 1000, "a request asks for what the server answers at most");
    }

    #[test]
    fn a_limit_is_from_one_to_the_most() {
        assert_eq!(limit("1"), Ok(1));
        assert_eq!(limit(&MAX_LIMIT.to_string()), Ok(MAX_LIMIT));
        for bad in ["0", "-1", "x", "", &(MAX_LIMIT + 1).to_string()] {
            assert!(limit(bad).is_err(), "{bad}");
        }
    }
}
