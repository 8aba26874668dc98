//! `Number`: a Terraform number as it crosses the plugin protocol. Terraform
//! (cty) sends a number as a msgpack integer when it is one that fits an
//! int64, as a float64 when it is exactly one, and otherwise as its decimal
//! text (`0.1`, `1e30`); it reads text back the same way. Holding any of
//! these, a state decodes whatever the practitioner wrote, so a wrong value
//! is an error on its attribute (`memory_mb must be a whole number ...`)
//! rather than a failure to decode the whole resource.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A number attribute's value: a whole number, or any other number as
/// decimal text.
#[derive(Debug, Clone, PartialEq)]
pub enum Number {
    Whole(i64),
    Decimal(String),
}

impl Number {
    /// The value, when it is a whole number that fits an `i64`.
    pub fn whole(&self) -> Option<i64> {
        match self {
            Number::Whole(n) => Some(*n),
            Number::Decimal(_) => None,
        }
    }

    /// The value as the nearest `f64` (`None` for text that is no number).
    pub fn to_f64(&self) -> Option<f64> {
        match self {
            Number::Whole(n) => Some(*n as f64),
            Number::Decimal(text) => text.parse().ok().filter(|f: &f64| f.is_finite()),
        }
    }

    /// `value` as Terraform reads it back equal to the shortest decimal that
    /// gives the same `f64` (so the server's `0.1` equals a configured `0.1`).
    pub fn from_f64(value: f64) -> Number {
        let whole = value.fract() == 0.0 && value.abs() < 9.0e15;
        if whole {
            Number::Whole(value as i64)
        } else {
            Number::Decimal(value.to_string())
        }
    }
}

impl From<i64> for Number {
    fn from(n: i64) -> Number {
        Number::Whole(n)
    }
}

impl From<u16> for Number {
    fn from(n: u16) -> Number {
        Number::Whole(n.into())
    }
}

impl From<u32> for Number {
    fn from(n: u32) -> Number {
        Number::Whole(n.into())
    }
}

impl From<u64> for Number {
    fn from(n: u64) -> Number {
        i64::try_from(n).map_or_else(|_| Number::Decimal(n.to_string()), Number::Whole)
    }
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Number::Whole(n) => write!(f, "{n}"),
            Number::Decimal(text) => f.write_str(text),
        }
    }
}

impl Serialize for Number {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Number::Whole(n) => serializer.serialize_i64(*n),
            Number::Decimal(text) => serializer.serialize_str(text),
        }
    }
}

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Number, D::Error> {
        deserializer.deserialize_any(NumberVisitor)
    }
}

struct NumberVisitor;

impl Visitor<'_> for NumberVisitor {
    type Value = Number;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number")
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Number, E> {
        Ok(Number::Whole(n))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Number, E> {
        Ok(n.into())
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Number, E> {
        Ok(Number::from_f64(n))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Number, E> {
        Ok(text
            .parse()
            .map_or_else(|_| Number::Decimal(text.to_string()), Number::Whole))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_msgpack(bytes: &[u8]) -> Number {
        rmp_serde::from_slice(bytes).expect("a number")
    }

    #[test]
    fn every_encoding_terraform_uses_decodes() {
        // 256 (int), 256.5 (float64), "0.1" (text: no float64 is exactly 0.1).
        assert_eq!(from_msgpack(&rmp_serde::to_vec(&256_i64).unwrap()), Number::Whole(256));
        assert_eq!(
            from_msgpack(&rmp_serde::to_vec(&256.5_f64).unwrap()),
            Number::Decimal("256.5".into())
        );
        assert_eq!(from_msgpack(&rmp_serde::to_vec("0.1").unwrap()).to_f64(), Some(0.1));
        let huge = from_msgpack(&rmp_serde::to_vec(&9_223_372_036_854_775_808_u64).unwrap());
        assert_eq!(huge.whole(), None);
        assert_eq!(huge.to_string(), "9223372036854775808");
    }

    #[test]
    fn numbers_go_back_as_terraform_reads_them() {
        let json = |n: Number| serde_json::to_value(n).unwrap();
        assert_eq!(json(Number::from_f64(0.1)), serde_json::json!("0.1"));
        assert_eq!(json(Number::from_f64(2.0)), serde_json::json!(2));
        assert_eq!(json(Number::Whole(7)), serde_json::json!(7));
    }
}
