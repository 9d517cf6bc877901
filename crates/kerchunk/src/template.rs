//! The jinja-like strings of reference sets: text with `{{ expression }}` parts. Expressions are the
//! small safe subset the kerchunk spec uses: integer, float and string literals, variables (`gen`
//! dimensions and templates), `+ - * / // % ~`, parentheses, and calls of templates with keyword
//! arguments (`f(c='text')`, which renders template `f` with `c` set). Nothing else of jinja (no
//! statements, filters or attribute access) is accepted; an undefined name is an error rather than
//! an empty string.

use std::collections::HashMap;

/// Deepest nesting of parentheses and unary operators an expression may have.
const MAX_DEPTH: usize = 64;

/// A value in an expression.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Val {
    Int(i64),
    Float(f64),
    Str(String),
}

impl Val {
    /// The value as jinja prints it (Python's `str`).
    fn write(&self, out: &mut String) {
        use std::fmt::Write;
        match self {
            Val::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Val::Float(f) if f.is_nan() => out.push_str("nan"),
            Val::Float(f) if f.is_infinite() => out.push_str(if *f > 0.0 { "inf" } else { "-inf" }),
            Val::Float(f) if f.fract() == 0.0 && f.abs() < 1e16 => {
                let _ = write!(out, "{f:.1}");
            }
            Val::Float(f) => {
                let _ = write!(out, "{f}");
            }
            Val::Str(s) => out.push_str(s),
        }
    }

    fn to_text(&self) -> String {
        let mut s = String::new();
        self.write(&mut s);
        s
    }

    fn as_f64(&self) -> Option<f64> {
        match self {
            Val::Int(i) => Some(*i as f64),
            Val::Float(f) => Some(*f),
            Val::Str(_) => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
    FloorDiv,
    Mod,
    Concat,
}

#[derive(Clone, Debug, PartialEq)]
enum Expr {
    Lit(Val),
    Var(String),
    Call(String, Vec<(String, Expr)>),
    Neg(Box<Expr>),
    Bin(Op, Box<Expr>, Box<Expr>),
}

#[derive(Clone, Debug, PartialEq)]
enum Part {
    Text(String),
    Expr(Expr),
}

/// A compiled jinja-like string.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Template {
    parts: Vec<Part>,
}

/// The templates of a reference set: plain strings, or (when they contain `{{`) functions of keyword
/// arguments.
#[derive(Debug, Default)]
pub(crate) struct Templates {
    defs: HashMap<String, Def>,
}

#[derive(Debug)]
enum Def {
    Text(String),
    Callable(Template),
}

impl Templates {
    /// Compiles the `templates` object of a v1 reference set; `Err` is `(name, reason)`.
    pub(crate) fn new<'a>(
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Templates, (String, String)> {
        let mut defs = HashMap::new();
        for (name, text) in entries {
            let def = if text.contains("{{") {
                Def::Callable(Template::compile(text).map_err(|e| (name.to_string(), e))?)
            } else {
                Def::Text(text.to_string())
            };
            defs.insert(name.to_string(), def);
        }
        Ok(Templates { defs })
    }
}

/// Where names are looked up while rendering: variables first (the `gen` dimensions or a template
/// call's arguments), then templates.
struct Scope<'a> {
    vars: &'a dyn Fn(&str) -> Option<Val>,
    templates: Option<&'a Templates>,
}

impl Template {
    /// Compiles `src`; the error says what is wrong.
    pub(crate) fn compile(src: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut rest = src;
        while !rest.is_empty() {
            let next = ["{{", "{%", "{#"]
                .iter()
                .filter_map(|open| rest.find(open).map(|i| (i, *open)))
                .min();
            match next {
                None => {
                    parts.push(Part::Text(rest.to_string()));
                    break;
                }
                Some((_, open)) if open != "{{" => {
                    return Err(format!(
                        "{open} ... is not supported (only {{{{ expression }}}})"
                    ))
                }
                Some((i, _)) => {
                    if i > 0 {
                        parts.push(Part::Text(rest[..i].to_string()));
                    }
                    let inner = &rest[i + 2..];
                    let end = inner.find("}}").ok_or("unclosed {{")?;
                    parts.push(Part::Expr(parse_expression(&inner[..end])?));
                    rest = &inner[end + 2..];
                }
            }
        }
        Ok(Template { parts })
    }

    /// Renders with `vars` (looked up first) and `templates`.
    pub(crate) fn render(
        &self,
        vars: &dyn Fn(&str) -> Option<Val>,
        templates: &Templates,
    ) -> Result<String, String> {
        self.render_in(&Scope {
            vars,
            templates: Some(templates),
        })
    }

    fn render_in(&self, scope: &Scope) -> Result<String, String> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Expr(e) => eval(e, scope)?.write(&mut out),
            }
        }
        Ok(out)
    }
}

fn eval(expr: &Expr, scope: &Scope) -> Result<Val, String> {
    match expr {
        Expr::Lit(v) => Ok(v.clone()),
        Expr::Var(name) => {
            if let Some(v) = (scope.vars)(name) {
                return Ok(v);
            }
            match scope.templates.and_then(|t| t.defs.get(name)) {
                Some(Def::Text(t)) => Ok(Val::Str(t.clone())),
                Some(Def::Callable(_)) => Err(format!(
                    "template {name} takes arguments: call it as {name}(name=value, ...)"
                )),
                None => Err(format!("{name} is not defined")),
            }
        }
        Expr::Call(name, args) => {
            let Some(Def::Callable(body)) = scope.templates.and_then(|t| t.defs.get(name)) else {
                return Err(format!("{name} is not a template with arguments"));
            };
            let mut values = HashMap::new();
            for (arg, e) in args {
                values.insert(arg.clone(), eval(e, scope)?);
            }
            let lookup = |n: &str| values.get(n).cloned();
            // As in fsspec, a template call sees only its arguments.
            body.render_in(&Scope {
                vars: &lookup,
                templates: None,
            })
            .map(Val::Str)
        }
        Expr::Neg(e) => match eval(e, scope)? {
            Val::Int(i) => i.checked_neg().map(Val::Int).ok_or_else(overflow),
            Val::Float(f) => Ok(Val::Float(-f)),
            Val::Str(_) => Err("cannot negate a string".into()),
        },
        Expr::Bin(op, a, b) => binary(*op, eval(a, scope)?, eval(b, scope)?),
    }
}

fn overflow() -> String {
    "integer overflow".into()
}

fn binary(op: Op, a: Val, b: Val) -> Result<Val, String> {
    use Val::{Float, Int, Str};
    if op == Op::Concat {
        return Ok(Str(a.to_text() + &b.to_text()));
    }
    match (op, &a, &b) {
        (Op::Add, Str(x), Str(y)) => return Ok(Str(format!("{x}{y}"))),
        (_, Str(_), _) | (_, _, Str(_)) => {
            return Err(format!(
                "operator {op:?} does not apply to {} and {}",
                a.to_text(),
                b.to_text()
            ))
        }
        _ => {}
    }
    if let (Int(x), Int(y)) = (&a, &b) {
        let (x, y) = (*x, *y);
        return match op {
            Op::Add => x.checked_add(y).map(Int).ok_or_else(overflow),
            Op::Sub => x.checked_sub(y).map(Int).ok_or_else(overflow),
            Op::Mul => x.checked_mul(y).map(Int).ok_or_else(overflow),
            Op::Div if y == 0 => Err("division by zero".into()),
            Op::Div => Ok(Float(x as f64 / y as f64)),
            Op::FloorDiv | Op::Mod if y == 0 => Err("division by zero".into()),
            Op::FloorDiv => {
                let q = x.checked_div(y).ok_or_else(overflow)?;
                Ok(Int(if (x % y != 0) && ((x < 0) != (y < 0)) {
                    q - 1
                } else {
                    q
                }))
            }
            Op::Mod => {
                let r = x.checked_rem(y).ok_or_else(overflow)?;
                Ok(Int(if r != 0 && ((r < 0) != (y < 0)) {
                    r + y
                } else {
                    r
                }))
            }
            Op::Concat => unreachable_concat(),
        };
    }
    let (x, y) = (
        a.as_f64().ok_or_else(overflow)?,
        b.as_f64().ok_or_else(overflow)?,
    );
    match op {
        Op::Add => Ok(Float(x + y)),
        Op::Sub => Ok(Float(x - y)),
        Op::Mul => Ok(Float(x * y)),
        Op::Div | Op::FloorDiv | Op::Mod if y == 0.0 => Err("division by zero".into()),
        Op::Div => Ok(Float(x / y)),
        Op::FloorDiv => Ok(Float((x / y).floor())),
        Op::Mod => Ok(Float(x - y * (x / y).floor())),
        Op::Concat => unreachable_concat(),
    }
}

/// `~` is handled before numbers are looked at.
fn unreachable_concat() -> Result<Val, String> {
    Err("internal: concatenation of numbers".into())
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Int(i64),
    Float(f64),
    Str(String),
    Name(String),
    Op(&'static str),
}

fn tokenize(src: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = src.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '_') {
                i += 1;
            }
            let is_float = i + 1 < chars.len() && chars[i] == '.' && chars[i + 1].is_ascii_digit();
            if is_float {
                i += 1;
                while i < chars.len() && chars[i].is_ascii_digit() {
                    i += 1;
                }
            }
            let text: String = chars[start..i].iter().filter(|c| **c != '_').collect();
            tokens.push(if is_float {
                Token::Float(text.parse().map_err(|_| format!("bad number {text}"))?)
            } else {
                Token::Int(
                    text.parse()
                        .map_err(|_| format!("number {text} is too large"))?,
                )
            });
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(Token::Name(chars[start..i].iter().collect()));
        } else if c == '\'' || c == '"' {
            let mut s = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err("unclosed string".into()),
                    Some(&q) if q == c => break,
                    Some('\\') => {
                        let escaped = chars.get(i + 1).ok_or("unclosed string")?;
                        s.push(match escaped {
                            'n' => '\n',
                            't' => '\t',
                            other => *other,
                        });
                        i += 2;
                    }
                    Some(&other) => {
                        s.push(other);
                        i += 1;
                    }
                }
            }
            i += 1;
            tokens.push(Token::Str(s));
        } else {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            let op = if two == "//" {
                "//"
            } else {
                match c {
                    '+' => "+",
                    '-' => "-",
                    '*' => "*",
                    '/' => "/",
                    '%' => "%",
                    '~' => "~",
                    '(' => "(",
                    ')' => ")",
                    ',' => ",",
                    '=' => "=",
                    other => return Err(format!("{other:?} is not supported in an expression")),
                }
            };
            if two == "**" || two == "==" {
                return Err(format!("{two} is not supported in an expression"));
            }
            i += op.len();
            tokens.push(Token::Op(op));
        }
    }
    Ok(tokens)
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    depth: usize,
}

fn parse_expression(src: &str) -> Result<Expr, String> {
    let mut p = Parser {
        tokens: tokenize(src)?,
        pos: 0,
        depth: 0,
    };
    if p.tokens.is_empty() {
        return Err("empty {{ }}".into());
    }
    let e = p.sum()?;
    match p.tokens.get(p.pos) {
        None => Ok(e),
        Some(t) => Err(format!("unexpected {t:?} in {src:?}")),
    }
}

impl Parser {
    fn peek_op(&self) -> Option<&'static str> {
        match self.tokens.get(self.pos) {
            Some(Token::Op(op)) => Some(op),
            _ => None,
        }
    }

    fn expect(&mut self, op: &str) -> Result<(), String> {
        if self.peek_op() == Some(op) {
            self.pos += 1;
            Ok(())
        } else {
            Err(format!("expected {op}"))
        }
    }

    fn sum(&mut self) -> Result<Expr, String> {
        let mut left = self.product()?;
        loop {
            let op = match self.peek_op() {
                Some("+") => Op::Add,
                Some("-") => Op::Sub,
                Some("~") => Op::Concat,
                _ => return Ok(left),
            };
            self.pos += 1;
            let right = self.product()?;
            left = Expr::Bin(op, Box::new(left), Box::new(right));
        }
    }

    fn product(&mut self) -> Result<Expr, String> {
        let mut left = self.unary()?;
        loop {
            let op = match self.peek_op() {
                Some("*") => Op::Mul,
                Some("/") => Op::Div,
                Some("//") => Op::FloorDiv,
                Some("%") => Op::Mod,
                _ => return Ok(left),
            };
            self.pos += 1;
            let right = self.unary()?;
            left = Expr::Bin(op, Box::new(left), Box::new(right));
        }
    }

    fn unary(&mut self) -> Result<Expr, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err("expression is nested too deeply".into());
        }
        let e = match self.peek_op() {
            Some("-") => {
                self.pos += 1;
                Expr::Neg(Box::new(self.unary()?))
            }
            Some("+") => {
                self.pos += 1;
                self.unary()?
            }
            _ => self.primary()?,
        };
        self.depth -= 1;
        Ok(e)
    }

    fn primary(&mut self) -> Result<Expr, String> {
        let token = self
            .tokens
            .get(self.pos)
            .cloned()
            .ok_or("incomplete expression")?;
        self.pos += 1;
        match token {
            Token::Int(i) => Ok(Expr::Lit(Val::Int(i))),
            Token::Float(f) => Ok(Expr::Lit(Val::Float(f))),
            Token::Str(s) => Ok(Expr::Lit(Val::Str(s))),
            Token::Op("(") => {
                let e = self.sum()?;
                self.expect(")")?;
                Ok(e)
            }
            Token::Name(name) if self.peek_op() == Some("(") => {
                self.pos += 1;
                let mut args = Vec::new();
                while self.peek_op() != Some(")") {
                    let Some(Token::Name(arg)) = self.tokens.get(self.pos).cloned() else {
                        return Err(format!(
                            "arguments of {name}(...) must be keyword arguments (name=value)"
                        ));
                    };
                    self.pos += 1;
                    self.expect("=")?;
                    args.push((arg, self.sum()?));
                    if self.peek_op() == Some(",") {
                        self.pos += 1;
                    } else if self.peek_op() != Some(")") {
                        return Err(format!("expected , or ) in the call of {name}"));
                    }
                }
                self.pos += 1;
                Ok(Expr::Call(name, args))
            }
            Token::Name(name) => Ok(Expr::Var(name)),
            Token::Op(op) => Err(format!("unexpected {op}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn templates() -> Templates {
        Templates::new([("u", "server.domain/path"), ("f", "{{c}}")]).expect("compile")
    }

    fn render(src: &str, i: i64) -> Result<String, String> {
        let vars = move |n: &str| (n == "i").then_some(Val::Int(i));
        Template::compile(src)?.render(&vars, &templates())
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
            "{{ 'a' * 2 }}",
            "{{ f }}",
            "{{ u(c=1) }}",
            "{{ f(1) }}",
            "{{ 9223372036854775807 + 1 }}",
            "{{ }}",
            "{{ i ** 2 }}",
        ] {
            assert!(render(bad, 1).is_err(), "{bad} should fail");
        }
        let deep = format!("{{{{ {}1{} }}}}", "(".repeat(200), ")".repeat(200));
        assert!(render(&deep, 1).is_err());
        // Template calls see only their arguments.
        let t = Templates::new([("g", "{{i}}")]).expect("compile");
        let vars = |n: &str| (n == "i").then_some(Val::Int(1));
        assert!(Template::compile("{{g()}}")
            .expect("compiles")
            .render(&vars, &t)
            .is_err());
    }
}
