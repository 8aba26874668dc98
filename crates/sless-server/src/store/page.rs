//! A page of a tenant's records, newest first, bounded in records and in
//! bytes as sent: what every list filled by the tenant shares (invocation
//! records, asynchronous events). The store feeds the records it reads a
//! few at a time, and keeps only the page and the first record past it,
//! so what a read holds is bounded as the answer is.

use sless_api::{AsyncInvocation, InvocationRecord};

/// A record listed by id, newest (greatest id) first; a page's cursor is
/// the id of its last record.
pub trait Listed: serde::Serialize {
    fn id(&self) -> &str;
}

impl Listed for InvocationRecord {
    fn id(&self) -> &str {
        &self.id
    }
}

impl Listed for AsyncInvocation {
    fn id(&self) -> &str {
        &self.id
    }
}

/// A page of records, newest first.
#[derive(Debug)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Whether records older than the last of `items` are left.
    pub more: bool,
}

impl<T> Default for Page<T> {
    fn default() -> Self {
        Page {
            items: Vec::new(),
            more: false,
        }
    }
}

impl<T: Listed> Page<T> {
    /// Where the next page starts (its `before`): right after the last
    /// record sent, when older ones are left, so paging loses none.
    pub fn next_before(&self) -> Option<String> {
        self.items.last().filter(|_| self.more).map(|r| r.id().to_string())
    }
}

/// The newest records fed to it, as many as fit in `limit` records and
/// `max_bytes` of their JSON (at least one, so that paging always moves).
/// It holds the records that fit and at most one past them (which says
/// there are more), plus what is being added.
pub struct Fitting<T> {
    limit: usize,
    max_bytes: usize,
    /// Newest first, each with its length as JSON: the page, then at most
    /// one record past it.
    items: Vec<(T, usize)>,
    /// How many of `items` are the page, and their bytes.
    fit: usize,
    bytes: usize,
}

impl<T: Listed> Fitting<T> {
    pub fn new(limit: usize, max_bytes: usize) -> Self {
        Fitting {
            limit,
            max_bytes,
            items: Vec::new(),
            fit: 0,
            bytes: 0,
        }
    }

    /// Adds `records`, in any order relative to each other and to those
    /// held (records fed newest first cost no sorting).
    pub fn add(&mut self, records: impl IntoIterator<Item = T>) {
        let start = self.items.len();
        self.items.extend(records.into_iter().map(|r| {
            let len = crate::bounds::json_len(&r);
            (r, len)
        }));
        let in_order = self.items[start.saturating_sub(1)..].is_sorted_by(|a, b| a.0.id() > b.0.id());
        let (mut fit, mut bytes) = if in_order {
            // The page so far stands; only what follows it can join.
            (self.fit, self.bytes)
        } else {
            self.items.sort_unstable_by(|a, b| b.0.id().cmp(a.0.id()));
            (0, 0)
        };
        for (_, len) in &self.items[fit..] {
            if fit == self.limit || (fit > 0 && bytes + len > self.max_bytes) {
                break;
            }
            fit += 1;
            bytes += len;
        }
        (self.fit, self.bytes) = (fit, bytes);
        self.items.truncate(fit + 1);
    }

    /// The newest record known to fall past the page.
    pub fn past(&self) -> Option<&T> {
        self.items.get(self.fit).map(|(r, _)| r)
    }

    /// True when the page is settled for records fed newest first: no
    /// older one can join it.
    pub fn full(&self) -> bool {
        self.limit == 0 || self.past().is_some()
    }

    pub fn into_page(mut self) -> Page<T> {
        let more = self.items.len() > self.fit;
        self.items.truncate(self.fit);
        Page {
            items: self.items.into_iter().map(|(r, _)| r).collect(),
            more,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize)]
    struct Note {
        id: String,
        text: String,
    }

    impl Listed for Note {
        fn id(&self) -> &str {
            &self.id
        }
    }

    fn record(id: u32, text: usize) -> Note {
        Note {
            id: format!("{id:04}"),
            text: "x".repeat(text),
        }
    }

    fn ids(page: &Page<Note>) -> Vec<&str> {
        page.items.iter().map(|r| r.id.as_str()).collect()
    }

    #[test]
    fn records_fed_newest_first_stop_at_the_bytes_and_say_where_the_next_page_starts() {
        let one = crate::bounds::json_len(&record(1, 100));
        let mut fitting = Fitting::new(1000, 3 * one + one / 2);
        let mut fed = Vec::new();
        for id in (1..=9).rev() {
            if fitting.full() {
                break;
            }
            fitting.add([record(id, 100)]);
            fed.push(id);
        }
        assert_eq!(fed, [9, 8, 7, 6], "the first that does not fit settles the page");
        assert_eq!(fitting.past().map(|r| r.id.as_str()), Some("0006"));
        let page = fitting.into_page();
        assert_eq!((ids(&page), page.more), (vec!["0009", "0008", "0007"], true));
        assert_eq!(page.next_before().as_deref(), Some("0007"));
    }

    #[test]
    fn records_out_of_order_are_sorted_and_the_limit_counts() {
        let mut fitting = Fitting::new(2, usize::MAX);
        fitting.add([record(2, 1), record(5, 1)]);
        fitting.add([record(3, 1)]);
        fitting.add([record(4, 1), record(1, 1)]);
        let page = fitting.into_page();
        assert_eq!((ids(&page), page.more), (vec!["0005", "0004"], true));
    }

    #[test]
    fn one_record_over_the_bytes_is_a_page_and_the_last_page_has_no_cursor() {
        let mut alone = Fitting::new(1000, 10);
        alone.add([record(2, 100)]);
        assert!(!alone.full(), "nothing past it yet");
        let page = alone.into_page();
        assert_eq!((ids(&page), page.more), (vec!["0002"], false));
        assert_eq!(page.next_before(), None);
    }
}
