//! `tools/list` page by page, with limits.
//!
//! rmcp's `list_all_tools` follows `nextCursor` for as long as the server
//! sends one: a server whose cursor never ends (or repeats, which rmcp may
//! then answer from its own response cache without asking again) grew the
//! list until memory ran out, within the call's timeout, on every start
//! and every `list_changed`. Here a repeated cursor, too many pages or too
//! many tools fail that listing, naming what was wrong.

use std::collections::HashSet;
use std::future::Future;

/// The most pages one listing may take.
pub(crate) const MAX_PAGES: usize = 100;
/// The most tools one server may list.
pub(crate) const MAX_TOOLS: usize = 10_000;

/// Every page `page(cursor)` answers, from the first (no cursor) to the
/// one without a next cursor.
pub(crate) async fn all_pages<T, Page, Fut>(mut page: Page) -> Result<Vec<T>, String>
where
    Page: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Option<String>), String>>,
{
    let mut items = Vec::new();
    let mut seen = HashSet::new();
    let mut cursor = None;
    for pages in 1..=MAX_PAGES {
        let (batch, next) = page(cursor.take()).await?;
        items.extend(batch);
        if items.len() > MAX_TOOLS {
            return Err(format!(
                "tools/list returned more than {MAX_TOOLS} tools; no server needs that many"
            ));
        }
        let Some(next) = next else {
            return Ok(items);
        };
        if !seen.insert(next.clone()) {
            return Err(format!(
                "tools/list sent the cursor {next:?} a second time after {pages} pages: its \
                 pages never end"
            ));
        }
        cursor = Some(next);
    }
    Err(format!(
        "tools/list was still sending pages after {MAX_PAGES}; a server's tools fit in fewer"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lister over `pages`, where page `i` names page `i + 1` as next
    /// unless `next` says otherwise.
    async fn listed(
        next: impl Fn(usize) -> Option<String>,
        per_page: usize,
    ) -> (Result<Vec<usize>, String>, usize) {
        let mut calls = 0;
        let result = all_pages(|cursor| {
            calls += 1;
            let at: usize = cursor.map_or(0, |c| c.trim_start_matches('p').parse().unwrap_or(0));
            let items = (0..per_page).map(|i| at * per_page + i).collect();
            let next = next(at);
            async move { Ok((items, next)) }
        })
        .await;
        (result, calls)
    }

    #[tokio::test]
    async fn pages_are_followed_to_the_last_one() {
        let (result, calls) = listed(|at| (at < 2).then(|| format!("p{}", at + 1)), 2).await;
        assert_eq!(result.unwrap(), vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(calls, 3);
    }

    #[tokio::test]
    async fn a_repeated_cursor_stops_the_listing() {
        let (result, calls) = listed(|_| Some("p1".to_owned()), 1).await;
        let error = result.unwrap_err();
        assert!(
            error.contains("\"p1\" a second time after 2 pages"),
            "{error}"
        );
        assert_eq!(calls, 2);
    }

    #[tokio::test]
    async fn pages_without_end_stop_at_the_limit() {
        let (result, calls) = listed(|at| Some(format!("p{}", at + 1)), 1).await;
        assert!(result.unwrap_err().contains("after 100"));
        assert_eq!(calls, MAX_PAGES);
    }

    #[tokio::test]
    async fn exactly_the_most_tools_are_listed() {
        let (result, calls) = listed(|at| (at < 1).then(|| format!("p{}", at + 1)), 5_000).await;
        assert_eq!(result.unwrap().len(), MAX_TOOLS);
        assert_eq!(calls, 2);
    }

    #[tokio::test]
    async fn too_many_tools_stop_the_listing() {
        let (result, calls) = listed(|at| Some(format!("p{}", at + 1)), 4_000).await;
        assert!(result.unwrap_err().contains("more than 10000 tools"));
        assert_eq!(calls, 3);
    }
}
