//! A source's `base_url`: checked once when the source is built, and shown
//! (status, `Debug`, error texts) without the credentials a proxy URL may
//! carry.

use reqwest::Url;

/// Checks a `base_url` so a typo fails at start-up rather than as a
/// connection error at the first request. `paths_appended`: the wire's path
/// (and, on Gemini, `?alt=sse`) is appended to it, so a query or fragment
/// would end up in the middle of the URL; a Lua adapter builds its own URL
/// and may want one. The error text says what to write instead and never
/// repeats the URL (it may hold a password).
pub fn check_base_url(text: &str, paths_appended: bool) -> Result<(), String> {
    const NO_SCHEME: &str = "has no scheme: write it with http:// or https:// in front";
    // `localhost:8080/v1` parses, as a URL of the scheme `localhost`.
    if !text.contains("://") {
        return Err(NO_SCHEME.to_owned());
    }
    let url = Url::parse(text.trim()).map_err(|error| {
        format!("is not a URL ({error}); write it as http(s)://host[:port][/path]")
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "uses the scheme `{}`: only http and https are spoken",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("names no host: write it as http(s)://host[:port][/path]".to_owned());
    }
    if paths_appended && url.query().is_some() {
        return Err(
            "has a query (`?…`): the protocol's path is appended to base_url, so the query \
             would land in the middle of it; leave it out"
                .to_owned(),
        );
    }
    if paths_appended && url.fragment().is_some() {
        return Err("has a fragment (`#…`), which is never sent; leave it out".to_owned());
    }
    Ok(())
}

/// `text` fit to show: without user name, password, query and fragment.
/// A text that is not a URL is not shown at all (it could be anything).
pub fn shown_url(text: &str) -> String {
    match Url::parse(text.trim()) {
        Ok(mut url) if url.has_host() => {
            if url.username().is_empty()
                && url.password().is_none()
                && url.query().is_none()
                && url.fragment().is_none()
            {
                // As written: the parse would normalise it (a trailing `/`).
                return text.to_owned();
            }
            redact(&mut url);
            let mut shown: String = url.into();
            // The parse gives an empty path as `/`; keep it as written.
            let written = text.trim().split(['?', '#']).next().unwrap_or_default();
            if !written.ends_with('/') && shown.ends_with('/') {
                shown.pop();
            }
            shown
        }
        _ => "(not a URL)".to_owned(),
    }
}

/// Removes what a URL may hold that must not be shown. (Setting the user
/// name or password fails only on URLs without a host, which have neither.)
pub(crate) fn redact(url: &mut Url) {
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_query(None);
    url.set_fragment(None);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_query_and_fragment_are_not_shown() {
        let cases = [
            ("http://u:p@h:8/v1", "http://h:8/v1"),
            ("https://u@h/v1?key=k#f", "https://h/v1"),
            ("http://h/v1", "http://h/v1"),
            ("http://h", "http://h"),
            ("http://u:p@h:9?key=k", "http://h:9"),
            ("http://u:p@h:9/?key=k", "http://h:9/"),
            ("u:p@h/v1", "(not a URL)"),
        ];
        for (text, shown) in cases {
            assert_eq!(shown_url(text), shown, "{text}");
        }
    }
}
