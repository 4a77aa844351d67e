//! Durations written the way people write them: `"500ms"`, `"30s"`, `"2m"`,
//! `"1h"`.
//!
//! The form is deliberately strict. A bare number is refused because its
//! unit would be a guess (seconds? milliseconds?), and so is `"30 sec"`: a
//! config that is read differently from how it was meant is worse than one
//! that is refused with the accepted forms listed. A value keeps the unit it
//! was written with, so serializing gives back the same text.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What the error messages list as the accepted forms.
pub const ACCEPTED_FORMS: &str = "a whole number followed by ms, s, m or h, without a space, like \"500ms\", \"30s\", \"2m\" or \"1h\"";

/// The unit a duration was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DurationUnit {
    Milliseconds,
    Seconds,
    Minutes,
    Hours,
}

impl DurationUnit {
    fn suffix(self) -> &'static str {
        match self {
            DurationUnit::Milliseconds => "ms",
            DurationUnit::Seconds => "s",
            DurationUnit::Minutes => "m",
            DurationUnit::Hours => "h",
        }
    }

    fn millis(self) -> u64 {
        match self {
            DurationUnit::Milliseconds => 1,
            DurationUnit::Seconds => 1_000,
            DurationUnit::Minutes => 60_000,
            DurationUnit::Hours => 3_600_000,
        }
    }
}

/// A duration from the config file, e.g. `"30s"`.
///
/// Equality compares the time span, so `"60s"` equals `"1m"`.
#[derive(Debug, Clone, Copy)]
pub struct HumanDuration {
    amount: u64,
    unit: DurationUnit,
}

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {text:?}: expected {ACCEPTED_FORMS}")]
pub struct DurationError {
    /// The text that was refused.
    pub text: String,
}

impl HumanDuration {
    /// `amount` of `unit`.
    pub const fn new(amount: u64, unit: DurationUnit) -> Self {
        HumanDuration { amount, unit }
    }

    /// Whole seconds.
    pub const fn seconds(amount: u64) -> Self {
        Self::new(amount, DurationUnit::Seconds)
    }

    /// Whole milliseconds.
    pub const fn millis(amount: u64) -> Self {
        Self::new(amount, DurationUnit::Milliseconds)
    }

    /// The time span (saturating at `u64::MAX` milliseconds).
    pub fn as_duration(self) -> Duration {
        Duration::from_millis(self.amount.saturating_mul(self.unit.millis()))
    }
}

impl PartialEq for HumanDuration {
    fn eq(&self, other: &Self) -> bool {
        self.as_duration() == other.as_duration()
    }
}

impl Eq for HumanDuration {}

impl From<HumanDuration> for Duration {
    fn from(value: HumanDuration) -> Self {
        value.as_duration()
    }
}

impl FromStr for HumanDuration {
    type Err = DurationError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let refuse = || DurationError {
            text: text.to_owned(),
        };
        let digits_end = text
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(refuse)?;
        let (digits, suffix) = text.split_at(digits_end);
        if digits.is_empty() {
            return Err(refuse());
        }
        let unit = match suffix {
            "ms" => DurationUnit::Milliseconds,
            "s" => DurationUnit::Seconds,
            "m" => DurationUnit::Minutes,
            "h" => DurationUnit::Hours,
            _ => return Err(refuse()),
        };
        let amount = digits.parse::<u64>().map_err(|_| refuse())?;
        Ok(HumanDuration { amount, unit })
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.amount, self.unit.suffix())
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

struct DurationVisitor;

impl DurationVisitor {
    fn number<E: de::Error>(shown: impl fmt::Display) -> E {
        E::custom(format!(
            "invalid duration {shown}: a bare number has no unit; expected {ACCEPTED_FORMS}"
        ))
    }
}

impl Visitor<'_> for DurationVisitor {
    type Value = HumanDuration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(ACCEPTED_FORMS)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        text.parse().map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Self::Value, E> {
        Err(Self::number(value))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Self::Value, E> {
        Err(Self::number(value))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Self::Value, E> {
        Err(Self::number(value))
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DurationVisitor)
    }
}

impl JsonSchema for HumanDuration {
    fn schema_name() -> Cow<'static, str> {
        "HumanDuration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": "^[0-9]+(ms|s|m|h)$",
            "description": "A duration: a whole number followed by ms, s, m or h, like \"30s\".",
        })
    }

    fn inline_schema() -> bool {
        true
    }
}
