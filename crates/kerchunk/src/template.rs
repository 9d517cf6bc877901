//! The Jinja2 strings of reference sets (`jinja-str` in the kerchunk spec), rendered with
//! `minijinja`: text with `{{ expression }}` parts, where the variables are the set's `templates`
//! (plus the dimensions, for `gen`). A template whose text contains `{{` is a function of keyword
//! arguments (`f(c='text')` renders template `f` with `c` set, and sees only its arguments, as in
//! fsspec); any other template is a plain string.
//!
//! A reference set is untrusted, so the environment is configured for safety:
//! - only `{{ expression }}` parts, as the spec describes `jinja-str`: no `{% statements %}` (loops and
//!   assignments are where unbounded work and memory hide) and no `{# comments #}`;
//! - no filters, tests or global functions, no auto-escaping;
//! - a name that is neither a variable nor a template is an error (found when the string is compiled,
//!   and strict undefined behaviour for what only rendering can tell, such as `i.x`);
//! - only strings and numbers print, integers only within i64 (so `{{ f }}`, a function, is an
//!   error rather than a description of it);
//! - every render has a fuel budget (instructions and bytes created), and template calls take only
//!   strings and numbers, so a hostile string cannot hang or exhaust memory.
//!
//! Each string is compiled once; `gen` renders the same compiled templates for every combination.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use minijinja::value::{from_args, Kwargs, Object, Value, ValueKind};
use minijinja::{Environment, Error as JinjaError, ErrorKind, State, UndefinedBehavior};

/// The work one render may do, in minijinja fuel (about one instruction, or 64 bytes created): a
/// `gen` key or url takes a few dozen, so this only stops hostile strings (about 6 MB of data).
const FUEL: u64 = 100_000;

/// Where a template of the set is stored in the environment (not a name a reference set can use
/// for its own strings, which are stored under `gen[..]` and `refs`).
fn template_slot(name: &str) -> String {
    format!("templates.{name}")
}

/// The templates of a reference set, and the environment every string of the set is compiled in.
#[derive(Debug)]
pub(crate) struct Templates {
    env: Environment<'static>,
    /// Each template as a value: a string, or a [`Callable`].
    values: Arc<HashMap<String, Value>>,
}

impl Default for Templates {
    fn default() -> Templates {
        Templates {
            env: environment(),
            values: Arc::default(),
        }
    }
}

/// A compiled string: its slot in the environment. Plain text is kept as it is.
#[derive(Debug)]
pub(crate) enum Template {
    Text(String),
    Compiled(String),
}

/// A compiled string looked up in its environment, to render it many times.
#[derive(Debug)]
pub(crate) enum Prepared<'a> {
    Text(&'a str),
    Jinja(minijinja::Template<'a, 'a>),
}

impl Prepared<'_> {
    /// Renders in `scope` (from [`Templates::scope`]).
    pub(crate) fn render(&self, scope: &Value) -> Result<String, String> {
        match self {
            Prepared::Text(text) => Ok(text.to_string()),
            Prepared::Jinja(template) => {
                template.render(scope.clone()).map_err(|e| jinja_reason(&e))
            }
        }
    }
}

fn environment() -> Environment<'static> {
    let mut env = Environment::empty();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_fuel(Some(FUEL));
    env.set_formatter(|out, _state, value| {
        print(out, value).map_err(|reason| JinjaError::new(ErrorKind::InvalidOperation, reason))
    });
    env
}

/// Writes `value` as Python's `str` prints it, if it is a string or a number.
fn print(out: &mut impl std::fmt::Write, value: &Value) -> Result<(), String> {
    let written = match value.kind() {
        ValueKind::String => out.write_str(value.as_str().unwrap_or_default()),
        ValueKind::Number if value.is_integer() => match i64::try_from(value.clone()) {
            Ok(i) => write!(out, "{i}"),
            Err(_) => return Err(format!("integer overflow: {value} is beyond 64 bits")),
        },
        ValueKind::Number => match f64::try_from(value.clone()) {
            Ok(f) if f.is_nan() => out.write_str("nan"),
            Ok(f) if f.is_infinite() => out.write_str(if f > 0.0 { "inf" } else { "-inf" }),
            Ok(f) if f.fract() == 0.0 && f.abs() < 1e16 => write!(out, "{f:.1}"),
            Ok(f) => write!(out, "{f}"),
            Err(e) => return Err(e.to_string()),
        },
        ValueKind::Plain => {
            return Err(format!(
                "{value} takes arguments: call it as name(argument=value, ...)"
            ))
        }
        other => {
            return Err(format!(
                "a {other} cannot be printed (only strings and numbers)"
            ))
        }
    };
    written.map_err(|e| e.to_string())
}

/// A template that takes arguments: renders its text with only the keyword arguments it is given.
#[derive(Debug)]
struct Callable {
    name: String,
    /// The names its text uses, each of which must be an argument.
    params: Vec<String>,
}

impl std::fmt::Display for Callable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "template {}", self.name)
    }
}

impl Object for Callable {
    fn call(
        self: &Arc<Self>,
        state: &mut State<'_, '_>,
        args: &[Value],
    ) -> Result<Value, JinjaError> {
        let (kwargs,): (Kwargs,) = from_args(args).map_err(|_| {
            JinjaError::new(
                ErrorKind::InvalidOperation,
                format!(
                    "arguments of {}(...) must be keyword arguments (name=value)",
                    self.name
                ),
            )
        })?;
        let mut context: Vec<(Arc<str>, Value)> = Vec::new();
        for arg in kwargs.args() {
            let value: Value = kwargs.peek(arg)?;
            // Only strings and numbers: a function passed along could call itself without end.
            if !matches!(value.kind(), ValueKind::String | ValueKind::Number) {
                return Err(JinjaError::new(
                    ErrorKind::InvalidOperation,
                    format!(
                        "argument {arg} of {}(...) must be a string or a number",
                        self.name
                    ),
                ));
            }
            context.push((Arc::from(arg), value));
        }
        if let Some(missing) = self
            .params
            .iter()
            .find(|p| !context.iter().any(|(arg, _)| **arg == ***p))
        {
            return Err(JinjaError::new(
                ErrorKind::UndefinedError,
                format!(
                    "{missing} is not defined (template {} sees only its arguments)",
                    self.name
                ),
            ));
        }
        let text = state
            .env()
            .get_template(&template_slot(&self.name))?
            .render(Value::from_object(Scope {
                vars: context,
                templates: Arc::default(),
            }))?;
        Ok(Value::from(text))
    }

    fn render(self: &Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// The variables of one render: `vars` first (the `gen` dimensions), then the templates.
#[derive(Debug)]
struct Scope {
    vars: Vec<(Arc<str>, Value)>,
    templates: Arc<HashMap<String, Value>>,
}

impl Object for Scope {
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        let name = key.as_str()?;
        self.vars
            .iter()
            .find(|(n, _)| &**n == name)
            .map(|(_, v)| v.clone())
            .or_else(|| self.templates.get(name).cloned())
    }
}

/// The first `{%` or `{#` of `text`: statements and comments are not part of `jinja-str`.
fn refuse_statements(text: &str) -> Result<(), String> {
    match ["{%", "{#"]
        .iter()
        .filter_map(|open| text.find(open).map(|i| (i, *open)))
        .min()
    {
        Some((_, open)) => Err(format!(
            "{open} ... is not supported (only {{{{ expression }}}})"
        )),
        None => Ok(()),
    }
}

fn jinja_reason(e: &JinjaError) -> String {
    // The detail alone: the kind is repeated in it, and the slot name is internal.
    match e.detail() {
        Some(detail) => detail.to_string(),
        None => e.kind().to_string(),
    }
}

impl Templates {
    /// Compiles the `templates` object of a v1 reference set; `Err` is `(name, reason)`.
    pub(crate) fn new<'a>(
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Templates, (String, String)> {
        let mut env = environment();
        let mut values = HashMap::new();
        for (name, text) in entries {
            let value = if text.contains("{{") {
                let fail = |reason: String| (name.to_string(), reason);
                refuse_statements(text).map_err(fail)?;
                let slot = template_slot(name);
                env.add_template_owned(slot.clone(), text.to_string())
                    .map_err(|e| fail(jinja_reason(&e)))?;
                let mut params: Vec<String> = env
                    .get_template(&slot)
                    .map_err(|e| fail(jinja_reason(&e)))?
                    .undeclared_variables(false)
                    .into_iter()
                    .collect();
                params.sort();
                Value::from_object(Callable {
                    name: name.to_string(),
                    params,
                })
            } else {
                Value::from(text)
            };
            values.insert(name.to_string(), value);
        }
        Ok(Templates {
            env,
            values: Arc::new(values),
        })
    }

    /// Compiles `text` under `slot` (a name for the environment, unique per string), where
    /// `variables` are the names rendering will set besides the templates.
    pub(crate) fn compile(
        &mut self,
        slot: String,
        text: &str,
        variables: &[&str],
    ) -> Result<Template, String> {
        if !text.contains("{{") {
            // Plain text renders as itself, unless it opens a statement or comment.
            refuse_statements(text)?;
            return Ok(Template::Text(text.to_string()));
        }
        refuse_statements(text)?;
        self.env
            .add_template_owned(slot.clone(), text.to_string())
            .map_err(|e| jinja_reason(&e))?;
        let template = self.env.get_template(&slot).map_err(|e| jinja_reason(&e))?;
        let known: HashSet<&str> = variables.iter().copied().collect();
        let mut unknown: Vec<String> = template
            .undeclared_variables(false)
            .into_iter()
            .filter(|n| !known.contains(n.as_str()) && !self.values.contains_key(n))
            .collect();
        unknown.sort();
        if let Some(name) = unknown.first() {
            return Err(format!("{name} is not defined"));
        }
        Ok(Template::Compiled(slot))
    }

    /// The variables of a render: `vars` (looked up before the templates) and the templates. One
    /// scope serves every string rendered for the same values.
    pub(crate) fn scope(&self, vars: Vec<(Arc<str>, Value)>) -> Value {
        Value::from_object(Scope {
            vars,
            templates: Arc::clone(&self.values),
        })
    }

    /// `template`, ready to render many times.
    pub(crate) fn prepare<'a>(&'a self, template: &'a Template) -> Result<Prepared<'a>, String> {
        match template {
            Template::Text(text) => Ok(Prepared::Text(text)),
            Template::Compiled(slot) => self
                .env
                .get_template(slot)
                .map(Prepared::Jinja)
                .map_err(|e| jinja_reason(&e)),
        }
    }

    /// Renders `template` in `scope` (from [`Templates::scope`]).
    pub(crate) fn render(&self, template: &Template, scope: &Value) -> Result<String, String> {
        self.prepare(template)?.render(scope)
    }

    /// Compiles and renders `text` once, with the templates as its only variables.
    pub(crate) fn render_once(&mut self, text: &str) -> Result<String, String> {
        const SLOT: &str = "refs";
        let template = self.compile(SLOT.to_string(), text, &[])?;
        let rendered = self.render(&template, &self.scope(Vec::new()));
        self.env.remove_template(SLOT);
        rendered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn templates() -> Templates {
        Templates::new([("u", "server.domain/path"), ("f", "{{c}}")]).expect("compile")
    }

    fn render(src: &str, i: i64) -> Result<String, String> {
        let mut t = templates();
        let template = t.compile("test".into(), src, &["i"])?;
        t.render(&template, &t.scope(vec![(Arc::from("i"), Value::from(i))]))
    }

    #[test]
    fn the_spec_example() {
        assert_eq!(render("gen_key{{i}}", 3).as_deref(), Ok("gen_key3"));
        assert_eq!(
            render("http://{{u}}_{{i}}", 0).as_deref(),
            Ok("http://server.domain/path_0")
        );
        assert_eq!(render("{{(i + 1) * 1000}}", 4).as_deref(), Ok("5000"));
        assert_eq!(render("1000", 4).as_deref(), Ok("1000"));
        assert_eq!(
            render("http://{{f(c='text')}}", 0).as_deref(),
            Ok("http://text")
        );
    }

    #[test]
    fn arithmetic_follows_python() {
        let r = |s: &str| render(s, 7).expect("renders");
        assert_eq!(r("{{ i*10 }}"), "70");
        assert_eq!(
            r("{{ i // 2 }}-{{ -i // 2 }}-{{ i % 3 }}-{{ -i % 3 }}"),
            "3--4-1-2"
        );
        assert_eq!(r("{{ i / 2 }}|{{ 4 / 2 }}"), "3.5|2.0");
        assert_eq!(r("{{ 2 + 3 * (i - 1) }}"), "20");
        assert_eq!(r("{{ 'a' ~ i ~ \"b\" }}{{ 'x' + 'y' }}"), "a7bxy");
        assert_eq!(r("{{ 1.5 * 2 }}"), "3.0");
        assert_eq!(r("no braces"), "no braces");
    }

    #[test]
    fn refuses_what_it_cannot_render() {
        for bad in [
            "{{ j }}",
            "{{ i",
            "{% for x in y %}",
            "{{ i | string }}",
            "{{ i.x }}",
            "{{ 1 // 0 }}",
            "{{ f }}",
            "{{ u(c=1) }}",
            "{{ f(1) }}",
            "{{ 9223372036854775807 + 1 }}",
            "{{ }}",
        ] {
            assert!(render(bad, 1).is_err(), "{bad} should fail");
        }
        let deep = format!("{{{{ {}1{} }}}}", "(".repeat(200), ")".repeat(200));
        assert!(render(&deep, 1).is_err());
        // Template calls see only their arguments.
        let mut t = Templates::new([("g", "{{i}}")]).expect("compile");
        let call = t
            .compile("call".into(), "{{g()}}", &["i"])
            .expect("compiles");
        let e = t
            .render(&call, &t.scope(vec![(Arc::from("i"), Value::from(1))]))
            .expect_err("i is not an argument");
        assert!(e.contains("i is not defined"), "{e}");
    }

    #[test]
    fn jinja2_operators_the_old_subset_refused() {
        // `**` and string repetition are Jinja2 (fsspec renders them too).
        assert_eq!(render("{{ i ** 2 }}", 3).as_deref(), Ok("9"));
        assert_eq!(render("{{ 'a' * 2 }}", 1).as_deref(), Ok("aa"));
    }

    #[test]
    fn hostile_strings_stop() {
        // Exponential growth through template calls stops at the fuel budget of each render.
        let mut t = Templates::new([("d", "{{c}}{{c}}{{c}}{{c}}")]).expect("compile");
        let mut nested = "'xxxxxxxxxxxxxxxx'".to_string();
        for _ in 0..20 {
            nested = format!("d(c={nested})");
        }
        let bomb = t
            .compile("bomb".into(), &format!("{{{{ {nested} }}}}"), &[])
            .expect("compiles");
        let e = t
            .render(&bomb, &t.scope(Vec::new()))
            .expect_err("runs out of fuel");
        assert!(e.contains("fuel"), "{e}");
        // A huge repetition is refused before it is made.
        let e = render("{{ 'x' * 1000000000 }}", 1).expect_err("too large");
        assert!(!e.is_empty());
        // A template cannot be passed to a template (which could then call itself).
        let mut t = Templates::new([("r", "{{c(c=c)}}")]).expect("compile");
        let self_call = t
            .compile("self".into(), "{{ r(c=r) }}", &[])
            .expect("compiles");
        let e = t
            .render(&self_call, &t.scope(Vec::new()))
            .expect_err("refused");
        assert!(e.contains("must be a string or a number"), "{e}");
        // Statements and comments are not part of jinja-str.
        let mut t = Templates::default();
        assert!(t.compile("s".into(), "{% set x = 1 %}", &[]).is_err());
        assert!(t.compile("c".into(), "a{# note #}", &[]).is_err());
    }
}
