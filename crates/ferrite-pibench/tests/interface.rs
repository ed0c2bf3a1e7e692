//! The PiBench interface, compared as declarations: `tests/interface/tree_api.hpp`
//! (our statement of the pinned commit's interface, which the dlopen test's
//! driver is compiled against when no PiBench checkout is available) must say
//! the same as the adapter's `include/tree_api.hpp`, name the commit
//! `scripts/pibench/run.sh` pins and, when a checkout is available
//! ($PIBENCH_SRC, or run.sh's default clone), say the same as PiBench's own
//! header. "The same" is: every virtual slot in order with its return and
//! parameter types, the `tree_options_t` fields in order with their types, and
//! the `create_tree` signature. Parameter names, default bodies, initialisers
//! and comments do not matter to the binary interface and are ignored.

use std::path::{Path, PathBuf};

fn crate_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Punct(char),
    Str,
    Num,
}

/// C++ tokens with comments dropped; `a::b` is one identifier.
fn tokens(src: &str) -> Vec<Tok> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            i += 2;
            while i + 1 < c.len() && !(c[i] == '*' && c[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if ch == '#' {
            // Preprocessor lines (include guards, includes) are not declarations.
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '"' || ch == '\'' {
            i += 1;
            while i < c.len() && c[i] != ch {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(Tok::Str);
        } else if ch.is_ascii_alphabetic() || ch == '_' || (ch == ':' && next == Some(':')) {
            let start = i;
            while i < c.len()
                && (c[i].is_ascii_alphanumeric()
                    || c[i] == '_'
                    || (c[i] == ':' && c.get(i + 1) == Some(&':'))
                    || (c[i] == ':' && i > 0 && c[i - 1] == ':'))
            {
                i += 1;
            }
            out.push(Tok::Ident(c[start..i].iter().collect()));
        } else if ch.is_ascii_digit() {
            while i < c.len() && (c[i].is_ascii_alphanumeric() || c[i] == '.') {
                i += 1;
            }
            out.push(Tok::Num);
        } else {
            if !ch.is_whitespace() {
                out.push(Tok::Punct(ch));
            }
            i += 1;
        }
    }
    out
}

fn is(t: &Tok, s: &str) -> bool {
    matches!(t, Tok::Ident(x) if x == s)
}

/// The tokens between the brace at `open` and its match, and the index after it.
fn braced(t: &[Tok], open: usize) -> (&[Tok], usize) {
    let mut depth = 0;
    for (j, tok) in t.iter().enumerate().skip(open) {
        match tok {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return (&t[open + 1..j], j + 1);
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced braces")
}

const BUILTIN: &[&str] = &[
    "void", "bool", "char", "short", "int", "long", "unsigned", "signed", "float", "double",
];

/// A type (or type + name) as text: `std::size_t` is `size_t`; `*`/`&` bind left.
fn type_text(t: &[Tok]) -> String {
    let mut s = String::new();
    for tok in t {
        match tok {
            Tok::Ident(x) => {
                if !s.is_empty() {
                    s.push(' ');
                }
                s.push_str(if x == "std::size_t" { "size_t" } else { x });
            }
            Tok::Punct(p) => s.push(*p),
            Tok::Str => s.push_str("\"\""),
            Tok::Num => s.push('0'),
        }
    }
    s
}

/// A parameter's or field's type: without a default/initialiser and the name.
fn strip_name(t: &[Tok]) -> &[Tok] {
    let t = match t
        .iter()
        .position(|x| matches!(x, Tok::Punct('=') | Tok::Punct('{')))
    {
        Some(p) => &t[..p],
        None => t,
    };
    match t.last() {
        Some(Tok::Ident(x)) if t.len() > 1 && !BUILTIN.contains(&x.as_str()) => &t[..t.len() - 1],
        _ => t,
    }
}

/// `(void)`: a parameter list of none.
fn only_void(p: &[Tok]) -> bool {
    p.len() == 1 && is(&p[0], "void")
}

/// `ret name(types) quals` of the declaration in `t` (starting after
/// `virtual`/`extern "C"`); the index just past the parameter list's `)`.
fn signature(t: &[Tok]) -> (String, usize) {
    let open = t
        .iter()
        .position(|x| *x == Tok::Punct('('))
        .expect("a parameter list");
    let mut head = &t[..open];
    let name = match head {
        [.., Tok::Punct('~'), Tok::Ident(n)] => {
            head = &head[..head.len() - 2];
            format!("~{n}")
        }
        [.., Tok::Ident(n)] => {
            head = &head[..head.len() - 1];
            n.clone()
        }
        _ => panic!("no function name in {t:?}"),
    };
    let mut depth = 0;
    let mut close = open;
    for (j, tok) in t.iter().enumerate().skip(open) {
        match tok {
            Tok::Punct('(') => depth += 1,
            Tok::Punct(')') => {
                depth -= 1;
                if depth == 0 {
                    close = j;
                    break;
                }
            }
            _ => {}
        }
    }
    let params: Vec<String> = t[open + 1..close]
        .split(|x| *x == Tok::Punct(','))
        .filter(|p| !p.is_empty() && !only_void(p))
        .map(|p| type_text(strip_name(p)))
        .collect();
    let mut quals = String::new();
    for tok in &t[close + 1..] {
        match tok {
            Tok::Ident(q) if q == "const" || q == "noexcept" => {
                quals.push(' ');
                quals.push_str(q);
            }
            Tok::Ident(_) => {} // override, final
            _ => break,
        }
    }
    let ret = type_text(head);
    let sep = if ret.is_empty() { "" } else { " " };
    (
        format!("{ret}{sep}{name}({}){quals}", params.join(", ")),
        close + 1,
    )
}

/// The binary interface a tree_api.hpp declares, one line per item.
fn interface(src: &str) -> Vec<String> {
    let t = tokens(src);
    let mut lines = Vec::new();

    let s = (0..t.len().saturating_sub(2))
        .find(|&i| {
            is(&t[i], "struct") && is(&t[i + 1], "tree_options_t") && t[i + 2] == Tok::Punct('{')
        })
        .expect("struct tree_options_t { ... }");
    let (fields, _) = braced(&t, s + 2);
    for f in fields
        .split(|x| *x == Tok::Punct(';'))
        .filter(|f| !f.is_empty())
    {
        let no_init = match f
            .iter()
            .position(|x| matches!(x, Tok::Punct('=') | Tok::Punct('{')))
        {
            Some(p) => &f[..p],
            None => f,
        };
        lines.push(format!(
            "field {} {}",
            type_text(strip_name(f)),
            type_text(&no_init[no_init.len() - 1..])
        ));
    }

    let c = t
        .iter()
        .position(|x| is(x, "create_tree"))
        .expect("a create_tree declaration");
    let start = t[..c]
        .iter()
        .rposition(|x| matches!(x, Tok::Punct(';') | Tok::Punct('}') | Tok::Punct('{')))
        .map_or(0, |p| p + 1);
    let decl: Vec<Tok> = t[start..]
        .iter()
        .filter(|x| !is(x, "extern") && **x != Tok::Str)
        .cloned()
        .collect();
    lines.push(format!("extern \"C\" {}", signature(&decl).0));

    let k = (0..t.len().saturating_sub(2))
        .find(|&i| is(&t[i], "class") && is(&t[i + 1], "tree_api") && t[i + 2] == Tok::Punct('{'))
        .expect("class tree_api { ... }");
    let (body, _) = braced(&t, k + 2);
    let mut i = 0;
    while i < body.len() {
        match &body[i] {
            Tok::Punct('{') => i = braced(body, i).1,
            x if is(x, "virtual") => {
                let (sig, end) = signature(&body[i + 1..]);
                lines.push(format!("slot {sig}"));
                i += 1 + end;
            }
            _ => i += 1,
        }
    }
    lines
}

fn stated() -> String {
    read(&crate_file("tests/interface/tree_api.hpp"))
}

/// The interface as this file states it, independently of both headers: the
/// parser must turn each header into exactly these lines.
const PINNED: &[&str] = &[
    "field size_t key_size",
    "field size_t value_size",
    "field std::string pool_path",
    "field size_t pool_size",
    "field size_t num_threads",
    "field void* data",
    "extern \"C\" tree_api* create_tree(const tree_options_t&)",
    "slot ~tree_api()",
    "slot bool bulk_load(const char*, size_t, size_t, size_t)",
    "slot bool find(const char*, size_t, char*)",
    "slot bool insert(const char*, size_t, const char*, size_t)",
    "slot bool update(const char*, size_t, const char*, size_t)",
    "slot bool remove(const char*, size_t)",
    "slot int scan(const char*, size_t, int, char*&)",
    "slot void tls_setup()",
];

#[test]
fn the_statement_declares_the_pinned_interface() {
    assert_eq!(interface(&stated()), PINNED);
}

#[test]
fn the_adapter_header_declares_the_stated_interface() {
    let adapter = read(&crate_file("include/tree_api.hpp"));
    assert_eq!(
        interface(&adapter),
        interface(&stated()),
        "include/tree_api.hpp (left) differs from tests/interface/tree_api.hpp (right)"
    );
}

#[test]
fn the_statement_names_the_commit_run_sh_pins() {
    let script = read(&crate_file("../../scripts/pibench/run.sh"));
    let pinned = script
        .lines()
        .find_map(|l| l.strip_prefix("PIBENCH_COMMIT=${PIBENCH_COMMIT:-"))
        .and_then(|rest| rest.split('}').next())
        .expect("run.sh sets PIBENCH_COMMIT=${PIBENCH_COMMIT:-<sha>}");
    assert_eq!(pinned.len(), 40, "{pinned}");
    assert!(
        stated().contains(pinned),
        "the statement does not name {pinned}"
    );
    let adapter = read(&crate_file("include/tree_api.hpp"));
    assert!(
        adapter.contains(pinned),
        "include/tree_api.hpp does not name {pinned}"
    );
}

#[test]
fn the_statement_matches_pibench_s_header_when_a_checkout_is_available() {
    let upstream = env!("FERRITE_PIBENCH_UPSTREAM_HEADER");
    if upstream.is_empty() {
        eprintln!(
            "no PiBench checkout at build time: not compared (set PIBENCH_SRC to a checkout \
             of the pinned commit, or run scripts/pibench/run.sh, and rebuild)"
        );
        return;
    }
    let theirs = interface(&read(Path::new(upstream)));
    assert_eq!(
        theirs,
        interface(&stated()),
        "PiBench's {upstream} (left) differs from tests/interface/tree_api.hpp (right): \
         is the checkout at the commit run.sh pins?"
    );
}

/// The comparison can fail: each kind of drift changes what the parser reads.
#[test]
fn a_drifted_header_reads_differently() {
    let base = stated();
    let want = interface(&base);
    let drifts = [
        ("    virtual void tls_setup() {}\n", ""),
        (
            "    virtual bool remove(const char* key, size_t key_len) = 0;\n",
            "",
        ),
        ("size_t value_size = 8;", "int value_size = 8;"),
        ("    void* data;", ""),
        (
            "int count, char*& records_out",
            "int count, char* records_out",
        ),
        (
            "create_tree(const tree_options_t& options)",
            "create_tree(tree_options_t options)",
        ),
    ];
    for (from, to) in drifts {
        assert!(base.contains(from), "statement no longer contains {from:?}");
        let drifted = base.replacen(from, to, 1);
        assert_ne!(
            interface(&drifted),
            want,
            "drift {from:?} -> {to:?} went unnoticed"
        );
    }
    // Swapping two slots keeps the set but not the order.
    let find = "    virtual bool find(const char* key, size_t key_len, char* value_out) = 0;\n";
    let scan = "    virtual int scan(const char* key, size_t key_len, int count, char*& records_out) = 0;\n";
    let swapped = base
        .replacen(find, "@@", 1)
        .replacen(scan, find, 1)
        .replacen("@@", scan, 1);
    assert_ne!(interface(&swapped), want);
    // Names, comments, initialisers and default bodies do not matter.
    let cosmetic = base
        .replace("key_len", "k")
        .replace(
            "size_t key_size = 8;",
            "std::size_t key_size{8}; // renamed nothing",
        )
        .replace(
            "virtual void tls_setup() {}",
            "virtual void tls_setup() { /* x */ }",
        );
    assert_eq!(interface(&cosmetic), want);
}
