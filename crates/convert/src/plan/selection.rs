//! Which arrays of a hierarchy a conversion (or `ls`, or `verify`) takes: `--include` / `--exclude`
//! globs on array paths. What is kept stays a valid hierarchy: every group above a kept array is
//! kept with its attributes, and groups with no kept array below them are dropped.

use globset::{Glob, GlobBuilder, GlobMatcher};
use zshard_core::{Node, NodeKind, Setting};

use crate::error::{Error, Result};

/// Globs on array paths (`climate/*`, `**/skip`, `a/b`); `*` and `?` do not cross `/`, `**` does.
/// A pattern that matches a group's path selects every array below that group.
///
/// ```
/// use zshard_convert::Selection;
///
/// let selection = Selection { include: vec!["a/*".into()], exclude: vec!["*/skip".into()] };
/// assert!(!selection.is_all());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Only arrays matching one of these (every array when empty).
    pub include: Vec<String>,
    /// No array matching one of these, even when included.
    pub exclude: Vec<String>,
}

/// One compiled pattern, with the text it came from for messages.
struct Pattern {
    text: String,
    matcher: GlobMatcher,
}

impl Pattern {
    fn new(setting: Setting, text: &str) -> Result<Pattern> {
        let glob: Glob = GlobBuilder::new(text)
            .literal_separator(true)
            .build()
            .map_err(|e| Error::Options {
                reason: format!(
                    "{} is not a valid glob: {}",
                    setting.given(format_args!("{text:?}")),
                    e.kind()
                ),
            })?;
        Ok(Pattern {
            text: text.to_string(),
            matcher: glob.compile_matcher(),
        })
    }

    /// Whether it names the array at `path` or a group above it.
    fn selects(&self, path: &str) -> bool {
        ancestors_and_self(path).any(|p| self.matcher.is_match(p))
    }
}

/// `a/b/c`, `a/b`, `a`: the path and the paths of the groups above it (the root excluded).
fn ancestors_and_self(path: &str) -> impl Iterator<Item = &str> {
    let cuts = path.match_indices('/').map(|(i, _)| i);
    std::iter::once(path.len())
        .chain(cuts)
        .map(move |end| &path[..end])
        .filter(|p| !p.is_empty())
}

impl Selection {
    /// Everything: no pattern given.
    pub fn is_all(&self) -> bool {
        self.include.is_empty() && self.exclude.is_empty()
    }

    /// The arrays of `nodes` (the hierarchy of `source`) this selection takes, and the groups above
    /// them. A pattern that selects no array is an error: a misspelt path would otherwise convert
    /// everything or nothing without a word, and a partial copy is found out too late.
    pub(crate) fn apply(&self, nodes: Vec<Node>, source: &str) -> Result<Vec<Node>> {
        if self.is_all() {
            return Ok(nodes);
        }
        let compile = |setting: Setting, texts: &[String]| -> Result<Vec<Pattern>> {
            texts.iter().map(|t| Pattern::new(setting, t)).collect()
        };
        let include = compile(Setting::Include, &self.include)?;
        let exclude = compile(Setting::Exclude, &self.exclude)?;
        let arrays: Vec<&str> = nodes
            .iter()
            .filter(|n| matches!(n.kind, NodeKind::Array(_)))
            .map(|n| n.path.as_str())
            .collect();
        for (setting, pattern) in include
            .iter()
            .map(|p| (Setting::Include, p))
            .chain(exclude.iter().map(|p| (Setting::Exclude, p)))
        {
            if !arrays.iter().any(|a| pattern.selects(a)) {
                return Err(Error::Options {
                    reason: format!(
                        "{} matches no array of {source} (its arrays: {})",
                        setting.given(format_args!("{:?}", pattern.text)),
                        listed(&arrays)
                    ),
                });
            }
        }
        let kept: Vec<&str> = arrays
            .iter()
            .copied()
            .filter(|a| include.is_empty() || include.iter().any(|p| p.selects(a)))
            .filter(|a| !exclude.iter().any(|p| p.selects(a)))
            .collect();
        if kept.is_empty() {
            return Err(Error::Options {
                reason: format!(
                    "{} and {} leave no array of {source} to convert",
                    Setting::Include.given(format_args!("{:?}", self.include)),
                    Setting::Exclude.given(format_args!("{:?}", self.exclude))
                ),
            });
        }
        let kept: Vec<String> = kept.into_iter().map(str::to_string).collect();
        Ok(nodes
            .into_iter()
            .filter(|node| match node.kind {
                NodeKind::Array(_) => kept.contains(&node.path),
                NodeKind::Group { .. } => kept.iter().any(|a| is_below(a, &node.path)),
            })
            .collect())
    }
}

impl Selection {
    /// The items (named by array path) this selection takes; patterns are checked when the
    /// selection is applied to the hierarchy.
    pub(crate) fn retain_selected<T>(
        &self,
        items: Vec<T>,
        path: impl Fn(&T) -> &str,
    ) -> Result<Vec<T>> {
        if self.is_all() {
            return Ok(items);
        }
        let compile = |setting: Setting, texts: &[String]| -> Result<Vec<Pattern>> {
            texts.iter().map(|t| Pattern::new(setting, t)).collect()
        };
        let include = compile(Setting::Include, &self.include)?;
        let exclude = compile(Setting::Exclude, &self.exclude)?;
        Ok(items
            .into_iter()
            .filter(|item| {
                let p = path(item);
                (include.is_empty() || include.iter().any(|i| i.selects(p)))
                    && !exclude.iter().any(|e| e.selects(p))
            })
            .collect())
    }
}

/// Whether the node at `path` lies below the group at `group` (every node lies below the root).
fn is_below(path: &str, group: &str) -> bool {
    group.is_empty()
        || path
            .strip_prefix(group)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Array paths for a message: the first few.
fn listed(arrays: &[&str]) -> String {
    const SHOWN: usize = 10;
    let mut text = arrays
        .iter()
        .take(SHOWN)
        .map(|a| {
            if a.is_empty() {
                "(the source itself)"
            } else {
                a
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    if arrays.len() > SHOWN {
        text.push_str(&format!(", ... {} more", arrays.len() - SHOWN));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    fn group(path: &str) -> Node {
        Node {
            path: path.into(),
            kind: NodeKind::Group {
                attributes: Map::new(),
            },
        }
    }

    fn array(path: &str) -> Node {
        Node {
            path: path.into(),
            kind: NodeKind::Array(Box::new(zshard_core::ArrayMeta {
                shape: vec![1],
                data_type: zshard_core::DataType::UInt8,
                fill_value: zshard_core::FillValue::from_bytes(vec![0]),
                chunk_shape: vec![1],
                codecs: vec![],
                chunk_key_encoding: zshard_core::ChunkKeyEncoding::Default { separator: '/' },
                attributes: Map::new(),
                dimension_names: None,
                rectilinear: None,
                sharded: None,
                warnings: vec![],
            })),
        }
    }

    fn hierarchy() -> Vec<Node> {
        vec![
            group(""),
            group("a"),
            array("a/x"),
            array("a/skip"),
            group("a/deep"),
            array("a/deep/y"),
            group("b"),
            array("b/z"),
            array("top"),
        ]
    }

    fn paths(selection: &Selection) -> Result<Vec<String>> {
        Ok(selection
            .apply(hierarchy(), "src")?
            .into_iter()
            .map(|n| n.path)
            .collect())
    }

    fn select(include: &[&str], exclude: &[&str]) -> Selection {
        Selection {
            include: include.iter().map(|s| s.to_string()).collect(),
            exclude: exclude.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn keeps_selected_arrays_and_the_groups_above_them() {
        // `a/*` matches the group a/deep too, so its arrays come along.
        let kept = paths(&select(&["a/*"], &["*/skip"])).expect("valid");
        assert_eq!(kept, ["", "a", "a/x", "a/deep", "a/deep/y"]);
        let kept = paths(&select(&["a/x", "top"], &[])).expect("valid");
        assert_eq!(kept, ["", "a", "a/x", "top"]);
        let kept = paths(&select(&["a/**"], &[])).expect("valid");
        assert_eq!(kept, ["", "a", "a/x", "a/skip", "a/deep", "a/deep/y"]);
        // A group's path selects everything below it.
        let kept = paths(&select(&["b"], &[])).expect("valid");
        assert_eq!(kept, ["", "b", "b/z"]);
        let kept = paths(&select(&[], &["a"])).expect("valid");
        assert_eq!(kept, ["", "b", "b/z", "top"]);
        assert_eq!(paths(&Selection::default()).expect("all").len(), 9);
    }

    #[test]
    fn patterns_that_select_nothing_are_errors() {
        let flags = |include: &[&str], exclude: &[&str]| {
            zshard_core::setting::spelled(zshard_core::Spelling::Flag, || {
                paths(&select(include, exclude))
                    .expect_err("no match")
                    .to_string()
            })
        };
        let e = flags(&["c/*"], &[]);
        assert!(e.contains("--include \"c/*\" matches no array of src (its arrays: a/x, a/skip, a/deep/y, b/z, top)"), "{e}");
        let e = flags(&[], &["nope"]);
        assert!(e.starts_with("--exclude \"nope\""), "{e}");
        let e = paths(&select(&["b"], &["b/*"])).expect_err("nothing left");
        assert!(e.to_string().contains("leave no array"), "{e}");
        let e = paths(&select(&["a/[x"], &[])).expect_err("bad glob");
        assert!(e.to_string().contains("is not a valid glob"), "{e}");
    }
}
