//! How a string a model wrote reads where a boolean or a number belongs.
//!
//! Models often quote scalars (`"count": "20"`, `"verbose": "true"`). The
//! kernel's argument coercion ([`crate::validate`]) accepts those forms,
//! and so do the places a sequence meets the same values (a group's
//! declared input types, a condition's `==`): one reading here keeps them
//! in step, so a value one accepts is never refused by the next.
//!
//! The forms are narrow on purpose: `true`/`false` exactly (not `True`,
//! `yes`, `1` or ` true`: a guess could invert a meaning), and a number in
//! JSON's own grammar after trimming blanks (not `NaN`, `inf`, `+1`, `.5`
//! or `0x10`, and not one out of range).

use serde_json::{Number, Value};

/// `"true"` or `"false"`, exactly.
pub fn boolean(text: &str) -> Option<bool> {
    match text {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// A JSON number, blanks around it allowed.
pub fn number(text: &str) -> Option<Number> {
    text.trim().parse().ok()
}

/// [`number`], when it is whole (`20` and `20.0` alike), as the JSON
/// integer it stands for.
pub fn integer(text: &str) -> Option<Value> {
    integral(&number(text)?)
}

/// `20` and `20.0` as a JSON integer; `None` when there is a fraction.
pub fn integral(number: &Number) -> Option<Value> {
    if number.is_i64() || number.is_u64() {
        return Some(Value::Number(number.clone()));
    }
    let f = number.as_f64()?;
    if !f.is_finite() || f.fract() != 0.0 {
        return None;
    }
    // i64::MAX as f64 rounds up to 2^63, hence the strict upper bound.
    if f >= i64::MIN as f64 && f < i64::MAX as f64 {
        Some(Value::from(f as i64))
    } else {
        // Too large for i64 but integral: jsonschema still counts it as an integer.
        Some(Value::Number(number.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn booleans_are_the_two_words_exactly() {
        assert_eq!(boolean("true"), Some(true));
        assert_eq!(boolean("false"), Some(false));
        for not in [" true", "True", "1", "yes", ""] {
            assert_eq!(boolean(not), None, "{not:?}");
        }
    }

    #[test]
    fn integers_are_whole_json_numbers_kept_exact() {
        assert_eq!(integer(" 20 "), Some(json!(20)));
        assert_eq!(integer("20.0"), Some(json!(20)));
        assert_eq!(integer("-7"), Some(json!(-7)));
        assert_eq!(integer("1.5"), None);
        assert_eq!(integer("+1"), None);
        assert_eq!(integer("abc"), None);
        // Past f64's exact integers, on both sides: kept as written.
        assert_eq!(
            integer("-9007199254740993"),
            Some(json!(-9_007_199_254_740_993_i64))
        );
        assert_eq!(
            integer("18446744073709551615"),
            Some(json!(18_446_744_073_709_551_615_u64))
        );
        // 2^63 written with a fraction is whole, but no i64: kept as the
        // number it is, not clamped to i64::MAX.
        let two_to_63 = integer("9223372036854775808.0").unwrap();
        assert_ne!(two_to_63, json!(i64::MAX));
        assert_eq!(two_to_63.as_f64(), Some(9_223_372_036_854_775_808.0));
    }
}
