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

/// [`number`], when it is whole (`20`, `20.0` and `2e1` alike), as the
/// JSON integer it stands for exactly. Written with a point or an
/// exponent, it is read as a float: whole only when its digits say so
/// (`0.99999999999999999` becomes the float 1.0, but is no integer) and
/// only up to 2^53 ([`integral`]).
pub fn integer(text: &str) -> Option<Value> {
    let number = number(text)?;
    if number.is_i64() || number.is_u64() {
        return Some(Value::Number(number));
    }
    if !whole_as_written(text.trim()) {
        return None;
    }
    integral(&number)
}

/// Below this (2^53) a float holds every integer exactly; from it on,
/// `9007199254740993.0` is read as 2^53 itself, so 2^53 is not trusted
/// either.
const EXACT_FLOAT_INTEGERS: f64 = 9_007_199_254_740_992.0;

/// `20` and `20.0` as a JSON integer; `None` when there is a fraction, or
/// when a float is 2^53 or more and may not be the integer that was
/// written.
pub fn integral(number: &Number) -> Option<Value> {
    if number.is_i64() || number.is_u64() {
        return Some(Value::Number(number.clone()));
    }
    let f = number.as_f64()?;
    // Within ±2^53 the cast is exact.
    (f.is_finite() && f.fract() == 0.0 && f.abs() < EXACT_FLOAT_INTEGERS)
        .then(|| Value::from(f as i64))
}

/// Whether `number` is whole, as JSON Schema counts integers: `3`, `3.0`
/// and `1e19` are.
pub fn is_whole(number: &Number) -> bool {
    number.is_i64()
        || number.is_u64()
        || number
            .as_f64()
            .is_some_and(|f| f.is_finite() && f.fract() == 0.0)
}

/// Whether a number in JSON's grammar stands for a whole number, judged
/// on its digits: every digit the exponent leaves after the point is 0.
fn whole_as_written(text: &str) -> bool {
    let unsigned = text.strip_prefix('-').unwrap_or(text);
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => match exponent.parse::<i64>() {
            Ok(exponent) => (mantissa, exponent),
            Err(_) => return false,
        },
        None => (unsigned, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let zero = |d: u8| d == b'0';
    let shift = usize::try_from(exponent.unsigned_abs()).unwrap_or(usize::MAX);
    if exponent >= 0 {
        fraction.bytes().skip(shift).all(zero)
    } else {
        fraction.bytes().all(zero) && whole.bytes().rev().take(shift).all(zero)
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
        // Written as a float, a number is read as one: whole only up to
        // 2^53, where floats stop holding every integer (…993.0 reads as
        // …992), and judged on its digits, not on the float it became.
        assert_eq!(
            integer("9007199254740991.0"),
            Some(json!(9_007_199_254_740_991_i64))
        );
        for changed in [
            "9007199254740992.0",
            "9007199254740993.0",
            "9223372036854775808.0",
            "12345678901234567890123",
            "0.99999999999999999",
            "1e20",
        ] {
            assert_eq!(integer(changed), None, "{changed}");
        }
        // An exponent that leaves no fraction is whole.
        assert_eq!(integer("1e3"), Some(json!(1000)));
        assert_eq!(integer("1.5e1"), Some(json!(15)));
        assert_eq!(integer("-100e-2"), Some(json!(-1)));
        assert_eq!(integer("0.0e5"), Some(json!(0)));
        for fraction in [
            "1.25e1",
            "150e-2",
            "1e-1",
            "5e99999999999999999999",
            // 1.00000000000000000001, which a float reads as 1.0.
            "100000000000000000001e-20",
            "100.00000000000000001e-2",
        ] {
            assert_eq!(integer(fraction), None, "{fraction}");
        }
    }

    #[test]
    fn a_float_is_whole_up_to_two_to_the_53() {
        let float = |f: f64| Number::from_f64(f).unwrap();
        assert_eq!(integral(&float(100.0)), Some(json!(100)));
        assert!(integral(&float(100.0)).unwrap().is_i64());
        assert_eq!(
            integral(&float(-9_007_199_254_740_991.0)),
            Some(json!(-9_007_199_254_740_991_i64))
        );
        assert_eq!(integral(&float(9_007_199_254_740_992.0)), None);
        assert_eq!(integral(&float(1.5)), None);
        assert_eq!(integral(&float(1e20)), None);
        assert_eq!(integral(&float(18_014_398_509_481_984.0)), None);
    }
}
