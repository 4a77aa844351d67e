//! The key check's text helpers, case by case: each decides whether a
//! request gets in.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

use axum::http::{HeaderMap, HeaderValue, header};

use super::{
    BodyDeadlinePassed, bearer, cookies, deadline_passed, is_loopback_host, percent_decode,
    query_param, same_secret,
};

#[test]
fn loopback_hosts_are_loopback_names_and_addresses_only() {
    for host in [
        "localhost",
        "LOCALHOST:8080",
        "app.localhost:3000",
        "127.0.0.1",
        "127.1.2.3:80",
        "[::1]:8080",
        "[::1]",
    ] {
        assert!(is_loopback_host(host), "{host}");
    }
    for host in [
        "",
        "evil.com",
        "localhost.evil.com",
        "evillocalhost",
        "127.0.0.1.nip.io",
        "10.0.0.1:8080",
        "0.0.0.0",
        "[::2]:8080",
        // A port that is not digits is part of the name.
        "localhost:abc",
    ] {
        assert!(!is_loopback_host(host), "{host}");
    }
}

#[test]
fn a_secret_matches_only_itself() {
    assert!(same_secret("s3cret", "s3cret"));
    assert!(same_secret("", ""));
    for presented in ["", "s3cre", "s3crett", "s3cres", "S3cret", "t3cret"] {
        assert!(!same_secret(presented, "s3cret"), "{presented:?}");
    }
    // A longer guess that starts with the key, and a key that is a prefix
    // of the guess padded with the zero bytes `get` falls back to.
    assert!(!same_secret("s3cret\0", "s3cret"));
    assert!(!same_secret("ab", "ab\0"));
}

#[test]
fn percent_decoding_takes_two_hex_digits_and_leaves_the_rest() {
    for (encoded, decoded) in [
        ("%41%42", "AB"),
        ("x%41", "xA"),
        ("%e2%82%ac", "€"),
        ("a+b", "a+b"),
        ("%", "%"),
        ("%4", "%4"),
        ("a%4", "a%4"),
        ("%zz", "%zz"),
        ("%4g1", "%4g1"),
        ("100%", "100%"),
        ("%%41", "%A"),
    ] {
        assert_eq!(percent_decode(encoded), decoded, "{encoded}");
    }
}

#[test]
fn query_parameters_are_found_by_their_decoded_name() {
    assert_eq!(
        query_param(Some("a=1&token=x%2By"), "token").as_deref(),
        Some("x+y")
    );
    assert_eq!(
        query_param(Some("tok%65n=y"), "token").as_deref(),
        Some("y")
    );
    assert_eq!(query_param(Some("a=1&token"), "token").as_deref(), Some(""));
    assert_eq!(query_param(Some("tokens=1&a=token"), "token"), None);
    assert_eq!(query_param(Some(""), "token"), None);
    assert_eq!(query_param(None, "token"), None);
}

#[test]
fn every_cookie_of_the_name_counts() {
    let mut headers = HeaderMap::new();
    headers.append(
        header::COOKIE,
        HeaderValue::from_static("a=1; homeagent_token=k1;homeagent_token=k%2B2"),
    );
    headers.append(
        header::COOKIE,
        HeaderValue::from_static("homeagent_token ; other_homeagent_token=x; homeagent_token=k3"),
    );
    assert_eq!(cookies(&headers, "homeagent_token"), ["k1", "k+2", "k3"]);
    assert!(cookies(&headers, "missing").is_empty());
}

#[test]
fn only_a_bearer_authorization_carries_a_key() {
    let with = |value: &'static str| {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static(value));
        bearer(&headers)
    };
    assert_eq!(with("Bearer abc").as_deref(), Some("abc"));
    assert_eq!(with("bearer  abc ").as_deref(), Some("abc"));
    assert_eq!(with("BEARER abc").as_deref(), Some("abc"));
    assert_eq!(with("Basic abc"), None);
    assert_eq!(with("Bearer"), None);
    assert_eq!(bearer(&HeaderMap::new()), None);
}

#[test]
fn a_passed_body_deadline_is_found_behind_the_errors_that_wrap_it() {
    #[derive(Debug)]
    struct Wrapper(Box<dyn std::error::Error + 'static>);
    impl std::fmt::Display for Wrapper {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "wrapped: {}", self.0)
        }
    }
    impl std::error::Error for Wrapper {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(self.0.as_ref())
        }
    }
    let twice = Wrapper(Box::new(Wrapper(Box::new(BodyDeadlinePassed))));
    assert!(deadline_passed(&twice));
    assert_eq!(
        twice.to_string(),
        "wrapped: wrapped: the request body did not arrive in time"
    );
    assert!(!deadline_passed(&Wrapper(Box::new(std::fmt::Error))));
}
