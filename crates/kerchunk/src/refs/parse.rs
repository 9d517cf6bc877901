//! The streaming parser of JSON reference files (version 0 and 1): serde visitors feed a
//! `Builder` as the document streams by, so the document is never held as a `serde_json::Value`
//! (only `templates` and `gen`, which are small). Templated URLs and `gen` entries are rendered when
//! the document ends.

use std::collections::HashMap;
use std::fmt;
use std::io::Read;

use base64::Engine;
use bytes::Bytes;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use super::model::{is_metadata_leaf, Interner, JsonRefs, Key, Kind, Leaf, Ref, Use, TOP_LEVEL};
use crate::error::{format, Error, Result};
use crate::gen::{Gen, Generated};
use crate::template::Templates;

impl JsonRefs {
    /// Parses a JSON reference document from `reader`; `file` names it in errors. References its
    /// `gen` entries would generate are counted first and refused when they cannot fit
    /// `memory_limit` (see [`Gen::parse_all`]).
    pub(crate) fn parse<R: Read>(
        file: &str,
        reader: R,
        memory_limit: Option<u64>,
    ) -> Result<JsonRefs> {
        let mut builder = Builder::new(file, memory_limit);
        let mut de = serde_json::Deserializer::from_reader(reader);
        let json_error = |source| Error::Json {
            file: file.to_string(),
            source,
        };
        Document(&mut builder)
            .deserialize(&mut de)
            .map_err(json_error)?;
        de.end().map_err(json_error)?;
        builder.finish()
    }

    /// Parses a JSON reference document held in memory, accepting the lenient forms of
    /// [`crate::lenient`] (trailing commas, bare NaN/Infinity).
    pub(crate) fn parse_lenient(
        file: &str,
        bytes: &[u8],
        memory_limit: Option<u64>,
    ) -> Result<JsonRefs> {
        match JsonRefs::parse(file, bytes, memory_limit) {
            Err(Error::Json { source, .. })
                if source.classify() == serde_json::error::Category::Syntax =>
            {
                let fixed = crate::lenient::sanitize(bytes);
                if fixed == bytes {
                    return Err(Error::Json {
                        file: file.to_string(),
                        source,
                    });
                }
                JsonRefs::parse(file, fixed.as_slice(), memory_limit)
            }
            other => other,
        }
    }
}

/// Accumulates a reference set while the JSON streams by.
struct Builder {
    file: String,
    prefixes: Interner,
    keys: Vec<Key>,
    refs: Vec<Ref>,
    long_leaves: String,
    urls: Interner,
    first_use: Vec<Use>,
    inline: Vec<u8>,
    metadata: Vec<(String, Ref, bool)>,
    version: Option<Value>,
    templates: Option<Value>,
    gen: Option<Value>,
    saw_refs: bool,
    key: String,
    memory_limit: Option<u64>,
}

impl Builder {
    fn new(file: &str, memory_limit: Option<u64>) -> Builder {
        Builder {
            memory_limit,
            file: file.to_string(),
            prefixes: Interner::default(),
            keys: Vec::new(),
            refs: Vec::new(),
            long_leaves: String::new(),
            urls: Interner::default(),
            first_use: Vec::new(),
            inline: Vec::new(),
            metadata: Vec::new(),
            version: None,
            templates: None,
            gen: None,
            saw_refs: false,
            key: String::new(),
        }
    }

    fn inline_ref(&mut self, data: &[u8]) -> Ref {
        let r = Ref {
            offset: self.inline.len() as u64,
            length: data.len() as u64,
            target: 0,
            kind: Kind::Inline,
        };
        self.inline.extend_from_slice(data);
        r
    }

    fn url(&mut self, url: &str) -> u32 {
        let id = self.urls.intern(url);
        if id as usize == self.first_use.len() {
            let next = if is_metadata_leaf(self.key.rsplit('/').next().unwrap_or_default()) {
                Use::Metadata(self.metadata.len() as u32)
            } else {
                Use::Entry(self.refs.len() as u32)
            };
            self.first_use.push(next);
        }
        id
    }

    /// Adds the reference `r` under the key in `self.key`.
    fn add(&mut self, r: Ref, top_level: bool) -> Result<(), String> {
        let key = std::mem::take(&mut self.key);
        let result = self.add_key(&key, r, top_level);
        self.key = key;
        result
    }

    fn add_key(&mut self, key: &str, r: Ref, top_level: bool) -> Result<(), String> {
        let (prefix, leaf) = key.rsplit_once('/').unwrap_or(("", key));
        if is_metadata_leaf(leaf) {
            self.metadata.push((key.to_string(), r, top_level));
            return Ok(());
        }
        if self.refs.len() >= (u32::MAX - 1) as usize {
            return Err("more than 4 billion references".into());
        }
        let mut prefix = self.prefixes.intern(prefix);
        if prefix & TOP_LEVEL != 0 {
            return Err("too many distinct key prefixes".into());
        }
        if top_level {
            prefix |= TOP_LEVEL;
        }
        let leaf = Leaf::new(leaf, &mut self.long_leaves);
        self.keys.push(Key { prefix, leaf });
        self.refs.push(r);
        Ok(())
    }

    fn finish(mut self) -> Result<JsonRefs> {
        let file = self.file.clone();
        let v1 = match &self.version {
            None => self.saw_refs,
            Some(v) if v.as_u64() == Some(1) => true,
            Some(v) => {
                return Err(format(
                    &file,
                    format!("reference set version {v} is not supported (0 or 1)"),
                ))
            }
        };
        let mut templates = match (v1, self.templates.take()) {
            (true, Some(Value::Object(t))) => {
                let mut entries = Vec::with_capacity(t.len());
                for (name, value) in &t {
                    match value {
                        Value::String(s) => entries.push((name.clone(), s.clone())),
                        other => entries.push((name.clone(), other.to_string())),
                    }
                }
                Templates::new(entries.iter().map(|(n, s)| (n.as_str(), s.as_str()))).map_err(
                    |(name, reason)| Error::Template {
                        key: format!("templates.{name}"),
                        template: t
                            .get(&name)
                            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                            .unwrap_or_default(),
                        reason,
                    },
                )?
            }
            (true, Some(other)) => {
                return Err(format(
                    &file,
                    format!("templates must be an object, not {other}"),
                ))
            }
            _ => Templates::default(),
        };
        // Render templated URLs (each distinct one once).
        let raw = std::mem::take(&mut self.urls.strings);
        let mut urls = Vec::with_capacity(raw.len());
        for (id, url) in raw.iter().enumerate() {
            if !url.contains("{{") {
                urls.push(url.to_string());
                continue;
            }
            let rendered = templates
                .render_once(url)
                .map_err(|reason| Error::Template {
                    key: self.use_key(id),
                    template: url.to_string(),
                    reason,
                })?;
            urls.push(rendered);
        }
        drop(raw);
        self.urls.ids = HashMap::new();
        let mut refs = JsonRefs {
            file,
            prefixes: Vec::new(),
            keys: Vec::new(),
            refs: Vec::new(),
            long_leaves: String::new(),
            urls,
            first_use: std::mem::take(&mut self.first_use),
            inline: Bytes::new(),
            metadata: Vec::new(),
            skip_top_level: v1,
        };
        if let (true, Some(gen)) = (v1, self.gen.take()) {
            let gens = Gen::parse_all(&gen, &mut templates, self.memory_limit).map_err(
                // A refusal of the entry itself (a member missing, too many references) comes
                // without a template: it names the file and the entry.
                |(what, template, reason)| match template.is_empty() {
                    true => Error::Format {
                        file: self.file.clone(),
                        reason: format!("{what}: {reason}"),
                    },
                    false => Error::Template {
                        key: what,
                        template,
                        reason,
                    },
                },
            )?;
            let mut gen_urls: HashMap<String, u32> = HashMap::new();
            for g in &gens {
                g.expand(&templates, &mut |Generated { key, url, range }| {
                    let id = match gen_urls.get(&url) {
                        Some(&id) => id,
                        None => {
                            let id = refs.urls.len() as u32;
                            refs.urls.push(url.clone());
                            refs.first_use.push(Use::Entry(self.refs.len() as u32));
                            gen_urls.insert(url, id);
                            id
                        }
                    };
                    let r = match range {
                        Some((offset, length)) => Ref {
                            offset,
                            length,
                            target: id,
                            kind: Kind::Range,
                        },
                        None => Ref {
                            offset: 0,
                            length: 0,
                            target: id,
                            kind: Kind::Whole,
                        },
                    };
                    self.add_key(&key, r, false)
                        .map_err(|reason| (key.clone(), String::new(), reason))
                })
                .map_err(|(key, template, reason)| match template.is_empty() {
                    // A generated reference that does not fit (no template at fault).
                    true => Error::Reference { key, reason },
                    false => Error::Template {
                        key,
                        template,
                        reason,
                    },
                })?;
            }
        }
        refs.prefixes = std::mem::take(&mut self.prefixes.strings);
        refs.keys = std::mem::take(&mut self.keys);
        refs.refs = std::mem::take(&mut self.refs);
        // The references stay for the whole run: without the room the vector grew into (up to as
        // much again), which a memory budget would have to count.
        refs.refs.shrink_to_fit();
        refs.long_leaves = std::mem::take(&mut self.long_leaves);
        refs.inline = Bytes::from(std::mem::take(&mut self.inline));
        refs.metadata = std::mem::take(&mut self.metadata)
            .into_iter()
            .filter(|(_, _, top)| !(v1 && *top))
            .map(|(k, r, _)| (k, r))
            .collect();
        Ok(refs)
    }

    fn use_key(&self, url: usize) -> String {
        match self.first_use.get(url) {
            Some(Use::Entry(e)) => match self.keys.get(*e as usize) {
                Some(k) => {
                    let prefix = &self.prefixes.strings[(k.prefix & !TOP_LEVEL) as usize];
                    let leaf = k.leaf.get(&self.long_leaves);
                    if prefix.is_empty() {
                        leaf.to_string()
                    } else {
                        format!("{prefix}/{leaf}")
                    }
                }
                None => String::new(),
            },
            Some(Use::Metadata(m)) => self
                .metadata
                .get(*m as usize)
                .map(|(k, _, _)| k.clone())
                .unwrap_or_default(),
            None => String::new(),
        }
    }
}

/// The whole document: `{"version": 1, "templates": ..., "gen": ..., "refs": {...}}` or a version 0
/// map of references.
struct Document<'a>(&'a mut Builder);

impl<'de> DeserializeSeed<'de> for Document<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Document<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object of references")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let b = self.0;
        while map.next_key_seed(KeyInto(&mut b.key))?.is_some() {
            match b.key.as_str() {
                "version" => b.version = Some(map.next_value()?),
                "templates" => b.templates = Some(map.next_value()?),
                "gen" => b.gen = Some(map.next_value()?),
                "refs" => {
                    b.saw_refs = true;
                    map.next_value_seed(RefsMap(b))?;
                }
                _ => map.next_value_seed(Reference { b, top_level: true })?,
            }
        }
        Ok(())
    }
}

/// Reads a map key into a reused buffer.
struct KeyInto<'a>(&'a mut String);

impl<'de> DeserializeSeed<'de> for KeyInto<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyInto<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.0.clear();
        self.0.push_str(v);
        Ok(())
    }
}

/// The `refs` object of a version 1 document.
struct RefsMap<'a>(&'a mut Builder);

impl<'de> DeserializeSeed<'de> for RefsMap<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RefsMap<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("refs to be an object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let b = self.0;
        while map.next_key_seed(KeyInto(&mut b.key))?.is_some() {
            map.next_value_seed(Reference {
                b: &mut *b,
                top_level: false,
            })?;
        }
        Ok(())
    }
}

/// The value of one reference, whose key is in `b.key`.
struct Reference<'a> {
    b: &'a mut Builder,
    top_level: bool,
}

impl Reference<'_> {
    fn add<E: de::Error>(self, r: Ref) -> Result<(), E> {
        let b = self.b;
        b.add(r, self.top_level)
            .map_err(|reason| E::custom(format!("reference {}: {reason}", b.key)))
    }

    fn data<E: de::Error>(self, s: &str) -> Result<(), E> {
        let r = match s.strip_prefix("base64:") {
            Some(encoded) => {
                let decoded = BASE64.decode(encoded.trim_end()).map_err(|e| {
                    E::custom(format!("reference {}: invalid base64: {e}", self.b.key))
                })?;
                self.b.inline_ref(&decoded)
            }
            None => self.b.inline_ref(s.as_bytes()),
        };
        self.add(r)
    }
}

fn bad_list<E: de::Error>(key: &str, what: &str) -> E {
    E::custom(format!(
        "reference {key}: {what} (expected [url] or [url, offset, length])"
    ))
}

/// Base64 as Python's `b64decode` accepts it (padding optional).
const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

impl<'de> DeserializeSeed<'de> for Reference<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Reference<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "a string, an object, [url] or [url, offset, length] as the value of reference {}",
            self.b.key
        )
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.data(v)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        let value = Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        let text = serde_json::to_vec(&value).map_err(de::Error::custom)?;
        let r = self.b.inline_ref(&text);
        self.add(r)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some(target) = seq.next_element_seed(Url(&mut *self.b))? else {
            return Err(bad_list(&self.b.key, "empty list"));
        };
        let r = match seq.next_element::<Value>()? {
            None => Ref {
                offset: 0,
                length: 0,
                target,
                kind: Kind::Whole,
            },
            Some(offset) => {
                let Some(length) = seq.next_element::<Value>()? else {
                    return Err(bad_list(&self.b.key, "an offset without a length"));
                };
                if seq.next_element::<IgnoredAny>()?.is_some() {
                    return Err(bad_list(&self.b.key, "more than three elements"));
                }
                let (Some(offset), Some(length)) = (offset.as_u64(), length.as_u64()) else {
                    return Err(bad_list(
                        &self.b.key,
                        &format!(
                            "offset {offset} and length {length} must be non-negative integers"
                        ),
                    ));
                };
                if offset.checked_add(length).is_none() {
                    return Err(bad_list(&self.b.key, "offset + length overflows"));
                }
                Ref {
                    offset,
                    length,
                    target,
                    kind: Kind::Range,
                }
            }
        };
        self.add(r)
    }
}

/// The URL of a reference (a string), interned.
struct Url<'a>(&'a mut Builder);

impl<'de> DeserializeSeed<'de> for Url<'_> {
    type Value = u32;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<u32, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Url<'_> {
    type Value = u32;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "a URL string as the first element of reference {}",
            self.0.key
        )
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<u32, E> {
        Ok(self.0.url(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(doc: &str) -> Result<JsonRefs> {
        JsonRefs::parse_lenient("refs.json", doc.as_bytes(), None)
    }

    /// What a key maps to, resolved the slow way (for tests).
    fn lookup(refs: &JsonRefs, key: &str) -> Option<Ref> {
        (0..refs.keys.len())
            .rev()
            .find(|&e| {
                refs.key_of(e) == key
                    && !(refs.skip_top_level && refs.keys[e].prefix & TOP_LEVEL != 0)
            })
            .map(|e| refs.refs[e])
    }

    /// Issue 45, row 13: a refusal of a `gen` entry that is not about a template (the memory
    /// limit, a missing member) names the file and the entry, not an empty template.
    #[test]
    fn gen_refusals_that_are_not_about_a_template_do_not_name_one() {
        let doc = r#"{"version": 1, "refs": {".zgroup": "{\"zarr_format\": 2}"},
            "gen": [{"key": "x/{{i}}", "url": "u", "offset": "{{i}}", "length": "1",
                "dimensions": {"i": {"stop": 60000000}}}]}"#;
        let error = JsonRefs::parse("refs.json", doc.as_bytes(), Some(256 << 20))
            .expect_err("refused")
            .to_string();
        assert!(
            error.starts_with("refs.json: gen[0]: the gen entries up to this one generate 60000000 references, which take at least "),
            "{error}"
        );
        assert!(!error.contains("template"), "{error}");
        let doc = r#"{"version": 1, "refs": {}, "gen": [{"key": "x/{{i}}", "url": "u",
            "offset": "{{i}}", "dimensions": {"i": {"stop": 2}}}]}"#;
        let error = parse(doc).expect_err("refused").to_string();
        assert_eq!(
            error,
            "refs.json: gen[0]: offset and length must be given together"
        );
    }

    #[test]
    fn version_0_value_forms() {
        let refs = parse(
            r#"{".zgroup": "{\"zarr_format\": 2}",
                "a/.zattrs": {"units": "K", "scale": [1, 2]},
                "a/0": "base64:AAEC",
                "a/1": "plain",
                "a/2": ["s3://b/f.nc"],
                "a/3": ["s3://b/f.nc", 100, 50],
                "a/4": {"x": 1},
            }"#,
        )
        .expect("parses");
        let meta: Vec<&str> = refs.metadata().iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(meta, [".zgroup", "a/.zattrs"]);
        assert_eq!(
            &refs.inline(&refs.metadata()[1].1)[..],
            br#"{"units":"K","scale":[1,2]}"#
        );
        let get = |k: &str| lookup(&refs, k).expect("present");
        assert_eq!(&refs.inline(&get("a/0"))[..], &[0u8, 1, 2]);
        assert_eq!(&refs.inline(&get("a/1"))[..], b"plain");
        assert_eq!(&refs.inline(&get("a/4"))[..], br#"{"x":1}"#);
        let whole = get("a/2");
        assert_eq!(whole.kind, Kind::Whole);
        assert_eq!(refs.urls()[whole.target as usize], "s3://b/f.nc");
        let range = get("a/3");
        assert_eq!(
            (range.kind, range.offset, range.length, range.target),
            (Kind::Range, 100, 50, whole.target)
        );
        assert_eq!(refs.len(), 5);
        assert_eq!(refs.url_user(whole.target), "a/2");
    }

    #[test]
    fn version_1_templates_gen_and_ignored_top_level_keys() {
        let refs = parse(
            r#"{"version": 1, "extra": "ignored",
                "templates": {"u": "server.domain/path", "f": "{{c}}"},
                "gen": [{"key": "gen_key{{i}}", "url": "http://{{u}}_{{i}}",
                         "offset": "{{(i + 1) * 1000}}", "length": "1000",
                         "dimensions": {"i": {"stop": 5}}}],
                "refs": {"key0": "data", "key1": ["http://target_url", 10000, 100],
                         "key2": ["http://{{u}}", 10000, 100],
                         "key3": ["http://{{f(c='text')}}", 10000, 100]}}"#,
        )
        .expect("parses");
        let url = |k: &str| {
            let r = lookup(&refs, k).expect("present");
            (refs.urls()[r.target as usize].clone(), r.offset, r.length)
        };
        assert_eq!(url("key1"), ("http://target_url".into(), 10000, 100));
        assert_eq!(
            url("key2"),
            ("http://server.domain/path".into(), 10000, 100)
        );
        assert_eq!(url("key3"), ("http://text".into(), 10000, 100));
        assert_eq!(
            url("gen_key0"),
            ("http://server.domain/path_0".into(), 1000, 1000)
        );
        assert_eq!(
            url("gen_key4"),
            ("http://server.domain/path_4".into(), 5000, 1000)
        );
        assert!(lookup(&refs, "extra").is_none());
        assert_eq!(refs.len(), 4 + 5 + 1);
    }

    #[test]
    fn malformed_documents_name_the_key_or_file() {
        let err = |doc: &str| {
            let e = parse(doc).expect_err("fails");
            let source = std::error::Error::source(&e).map(|s| s.to_string());
            format!("{e}: {}", source.unwrap_or_default())
        };
        let e = err(r#"{"a/0": ["f", 1]}"#);
        assert!(e.contains("refs.json") && e.contains("a/0"), "{e}");
        let e = err(r#"{"a/0": ["f", -1, 2]}"#);
        assert!(e.contains("a/0"), "{e}");
        let e = err(r#"{"a/0": 12}"#);
        assert!(e.contains("a/0"), "{e}");
        let e = err(r#"{"a/0": "base64:!!"}"#);
        assert!(e.contains("a/0") && e.contains("base64"), "{e}");
        let e = err(r#"{"a/0": [3, 1, 2]}"#);
        assert!(e.contains("refs.json"), "{e}");
        let e = err(r#"{"version": 2, "refs": {}}"#);
        assert!(e.contains("version 2"), "{e}");
        let e = err(r#"{"version": 1, "refs": {"a/0": ["{{nope}}/f"]}}"#);
        assert!(e.contains("a/0") && e.contains("nope"), "{e}");
        let e = err(r#"{"a/0": ["f"] "#);
        assert!(e.contains("refs.json: invalid JSON"), "{e}");
        assert!(parse("[1, 2]").is_err());
    }
}
