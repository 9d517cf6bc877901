//! The small non-strict JSON found in reference sets in the wild: a trailing comma before `}` or `]`,
//! and bare `NaN`, `Infinity`, `-Infinity` (Python's `json.dump` writes them). Such text is rewritten
//! into strict JSON: the comma is dropped, and the bare numbers become the strings `"NaN"`,
//! `"Infinity"`, `"-Infinity"`, which is how Zarr v2 metadata encodes these fill values.

use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// Strict JSON from the lenient forms above; everything else is copied unchanged (invalid JSON stays
/// invalid). Text inside strings is never changed.
pub(crate) fn sanitize(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len() + 16);
    let mut in_string = false;
    let mut escaped = false;
    let mut i = 0;
    while i < input.len() {
        let b = input[i];
        if in_string {
            out.push(b);
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        let rest = &input[i..];
        let word = |w: &[u8]| {
            rest.starts_with(w)
                && !rest
                    .get(w.len())
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
        };
        match b {
            b'"' => {
                in_string = true;
                out.push(b);
            }
            b',' => {
                let next = rest[1..].iter().find(|c| !c.is_ascii_whitespace());
                if !matches!(next, Some(b'}') | Some(b']')) {
                    out.push(b);
                }
            }
            b'N' if word(b"NaN") => {
                out.extend_from_slice(b"\"NaN\"");
                i += 3;
                continue;
            }
            b'I' if word(b"Infinity") => {
                out.extend_from_slice(b"\"Infinity\"");
                i += 8;
                continue;
            }
            b'-' if word(b"-Infinity") => {
                out.extend_from_slice(b"\"-Infinity\"");
                i += 9;
                continue;
            }
            _ => out.push(b),
        }
        i += 1;
    }
    out
}

/// Parses `bytes` as strict JSON, and when that fails on syntax, as the lenient forms above. `file`
/// names the document in errors.
pub(crate) fn parse<T: DeserializeOwned>(file: &str, bytes: &[u8]) -> Result<T> {
    match serde_json::from_slice(bytes) {
        Ok(value) => Ok(value),
        Err(first) if first.classify() == serde_json::error::Category::Syntax => {
            let fixed = sanitize(bytes);
            if fixed == bytes {
                return Err(Error::Json {
                    file: file.to_string(),
                    source: first,
                });
            }
            serde_json::from_slice(&fixed).map_err(|source| Error::Json {
                file: file.to_string(),
                source,
            })
        }
        Err(source) => Err(Error::Json {
            file: file.to_string(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn fix(s: &str) -> String {
        String::from_utf8(sanitize(s.as_bytes())).expect("utf-8")
    }

    #[test]
    fn trailing_commas_and_bare_numbers() {
        assert_eq!(fix(r#"{"a": [1, 2,], }"#), r#"{"a": [1, 2] }"#);
        assert_eq!(fix("[1,\n  ]"), "[1\n  ]");
        assert_eq!(
            fix(r#"{"f": NaN, "g": -Infinity, "h": Infinity}"#),
            r#"{"f": "NaN", "g": "-Infinity", "h": "Infinity"}"#
        );
        // Strings are untouched, escaped quotes included.
        assert_eq!(
            fix(r#"{"s": "NaN, ] \" ,}", "t": 1}"#),
            r#"{"s": "NaN, ] \" ,}", "t": 1}"#
        );
        // Strict JSON passes through unchanged; so does garbage.
        let strict = r#"{"a":[1,2.5e3,-4],"b":{"c":null,"d":true}}"#;
        assert_eq!(fix(strict), strict);
        assert_eq!(fix("{nope"), "{nope");
        assert_eq!(fix("NaNa"), "NaNa");
    }

    #[test]
    fn parse_falls_back_to_lenient() {
        let v: Value = parse("x.json", br#"{"fill_value": NaN, "chunks": [1, 2,],}"#).expect("ok");
        assert_eq!(v, json!({"fill_value": "NaN", "chunks": [1, 2]}));
        let err = parse::<Value>("x.json", b"{\"a\": }").expect_err("invalid");
        assert!(err.to_string().contains("x.json"), "{err}");
        let err = parse::<Vec<u8>>("y.json", b"{}").expect_err("type error");
        assert!(err.to_string().starts_with("y.json"), "{err}");
    }
}
