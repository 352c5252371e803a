//! Function names a person can read in one line: demangled C++ and Rust
//! names without template arguments, parameter lists, return types and
//! compiler suffixes, the way `perf report` and pprof shorten them
//! (`v8::internal::FactoryBase<v8::internal::Factory>::NewFixedArrayWithFiller(…)`
//! becomes `v8::internal::FactoryBase::NewFixedArrayWithFiller`). Reports
//! keep the full name in JSON; this is for tables. Pure string work.

/// The short form of a demangled function name (see the module documentation).
/// Plain C names come back unchanged.
pub fn short_name(full: &str) -> String {
    let name = strip_rust_hash(full.trim());
    // pagewise's own placeholders (`[unknown] 0x1234`, `[inlined]`).
    if name.starts_with('[') {
        return name.to_owned();
    }
    let (out, splits) = simplify(name);
    let mut out = out.trim().to_owned();
    // Qualifiers left behind by the parameter list: `fill() const &`.
    loop {
        let before = out.len();
        for q in [" const", " volatile", " noexcept", "&&", "&"] {
            if let Some(rest) = out.strip_suffix(q) {
                out = rest.trim_end().to_owned();
            }
        }
        if out.len() == before {
            break;
        }
    }
    // The return type: everything before the last top-level space, unless the
    // name is an operator (`operator new`, `operator delete[]`).
    let start = match out.rfind("operator") {
        Some(op) => out[..op].rfind(' ').map_or(0, |sp| sp + 1),
        None => splits
            .iter()
            .rev()
            .find(|&&sp| sp < out.len())
            .map_or(0, |&sp| sp + 1),
    };
    let short = out[start..].trim();
    if short.is_empty() {
        full.to_owned()
    } else {
        short.to_owned()
    }
}

/// `…::h0123456789abcdef` (a legacy Rust symbol hash) removed.
fn strip_rust_hash(name: &str) -> &str {
    match name.rsplit_once("::h") {
        Some((head, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            head
        }
        _ => name,
    }
}

/// Drops template arguments and parameter lists, keeping Rust qualified paths
/// (`<A as B>::f`, `<impl T>::f`) in short form. Returns the text and the
/// positions of the spaces that separate a return type from the name.
fn simplify(s: &str) -> (String, Vec<usize>) {
    let mut out = String::with_capacity(s.len());
    let mut splits = vec![];
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let rest: String = chars[i..].iter().take(21).collect();
        if rest.starts_with("(anonymous namespace)") {
            out.push_str("(anonymous namespace)");
            i += "(anonymous namespace)".len();
            continue;
        }
        if rest.starts_with("operator")
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'))
        {
            i = copy_operator(&chars, i, &mut out);
            continue;
        }
        match c {
            // gcc clone suffixes and ABI tags: `[clone .isra.0]`, `[abi:cxx11]`.
            '[' if rest.starts_with("[clone") || rest.starts_with("[abi:") => {
                i = matching(&chars, i, '[', ']') + 1;
            }
            '<' if out.is_empty() || out.ends_with("::") => {
                // A Rust qualified path: keep it, shortened inside.
                let end = matching(&chars, i, '<', '>');
                let inner: String = chars[i + 1..end].iter().collect();
                out.push('<');
                out.push_str(&qualified_path(&inner));
                out.push('>');
                i = end + 1;
            }
            '<' => i = matching(&chars, i, '<', '>') + 1,
            '(' => i = matching(&chars, i, '(', ')') + 1,
            ' ' => {
                if !out.is_empty() && !out.ends_with(' ') {
                    splits.push(out.len());
                    out.push(' ');
                }
                i += 1;
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    (out, splits)
}

/// `A as B` or `impl A for B` inside a Rust qualified path, each side short.
fn qualified_path(inner: &str) -> String {
    let shorten = |p: &str| {
        let (s, _) = simplify(p.trim());
        s.trim().to_owned()
    };
    if let Some((a, b)) = inner.split_once(" as ") {
        format!("{} as {}", shorten(a), shorten(b))
    } else if let Some(t) = inner.strip_prefix("impl ") {
        match t.split_once(" for ") {
            Some((a, b)) => format!("impl {} for {}", shorten(a), shorten(b)),
            None => format!("impl {}", shorten(t)),
        }
    } else {
        shorten(inner)
    }
}

/// Copies `operator…` at `i` (`operator()`, `operator<<`, `operator new[]`,
/// a conversion `operator bool`) and returns the index after it.
fn copy_operator(chars: &[char], mut i: usize, out: &mut String) -> usize {
    out.push_str("operator");
    i += "operator".len();
    if chars.get(i) == Some(&'(') && chars.get(i + 1) == Some(&')') {
        out.push_str("()");
        return i + 2;
    }
    const SYMBOLS: &str = "<>=!+-*/%^&|~,[]";
    if chars.get(i).is_some_and(|c| SYMBOLS.contains(*c)) {
        while let Some(&c) = chars.get(i) {
            if !SYMBOLS.contains(c) {
                break;
            }
            out.push(c);
            i += 1;
        }
        return i;
    }
    // `operator new`, `operator delete[]`, `operator unsigned long`: up to the
    // parameter list or template arguments.
    while let Some(&c) = chars.get(i) {
        if c == '(' || c == '<' {
            break;
        }
        out.push(c);
        i += 1;
    }
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    i
}

/// The index of the bracket that closes the one at `open` (or the last index
/// when it never closes). Angle brackets inside parentheses do not count
/// (`foo<(a > b)>`), nor `->`.
fn matching(chars: &[char], open: usize, left: char, right: char) -> usize {
    let mut depth = 0usize;
    let mut parens = 0usize;
    for (j, &c) in chars.iter().enumerate().skip(open) {
        if left == '<' {
            match c {
                '(' => parens += 1,
                ')' => parens = parens.saturating_sub(1),
                '<' if parens == 0 => depth += 1,
                '>' if parens == 0 && !(j > 0 && chars[j - 1] == '-') => {
                    depth -= 1;
                    if depth == 0 {
                        return j;
                    }
                }
                _ => {}
            }
        } else if c == left {
            depth += 1;
        } else if c == right {
            depth -= 1;
            if depth == 0 {
                return j;
            }
        }
    }
    chars.len() - 1
}

/// `text` cut to `width` characters, ending in `…` when it was longer.
pub fn clip(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_names_are_unchanged() {
        assert_eq!(short_name("touch_buffer"), "touch_buffer");
        assert_eq!(
            short_name("__memset_avx512_unaligned_erms"),
            "__memset_avx512_unaligned_erms"
        );
        assert_eq!(short_name("libc.so.6+0x16e0ba"), "libc.so.6+0x16e0ba");
        assert_eq!(short_name("[unknown] 0x1234"), "[unknown] 0x1234");
    }

    #[test]
    fn cpp_templates_arguments_and_return_types_go() {
        let cases = [
            (
                "v8::internal::FactoryBase<v8::internal::Factory>::NewFixedArrayWithFiller(\
                 v8::internal::Handle<v8::internal::Map>, int, \
                 v8::internal::Handle<v8::internal::HeapObject>, v8::internal::AllocationType)",
                "v8::internal::FactoryBase::NewFixedArrayWithFiller",
            ),
            (
                "void std::__fill_a1<double*, double>(double*, double*, double const&)",
                "std::__fill_a1",
            ),
            (
                "grid::Matrix<double, 3ul>::fill(double const&) const",
                "grid::Matrix::fill",
            ),
            (
                "std::vector<double, std::allocator<double> >::_M_default_append(unsigned long)",
                "std::vector::_M_default_append",
            ),
            (
                "v8::internal::(anonymous namespace)::Invoke(v8::internal::Isolate*, \
                 v8::internal::(anonymous namespace)::InvokeParams const&)",
                "v8::internal::(anonymous namespace)::Invoke",
            ),
            (
                "grid::run()::{lambda(int)#1}::operator()(int) const",
                "grid::run::{lambda#1}::operator()",
            ),
            ("operator new(unsigned long)", "operator new"),
            ("operator delete[](void*)", "operator delete[]"),
            (
                "std::basic_ostream<char, std::char_traits<char> >& std::operator<< \
                 <std::char_traits<char> >(std::basic_ostream<char, std::char_traits<char> >&, char const*)",
                "std::operator<<",
            ),
            (
                "std::_Function_handler<void (), main::{lambda()#1}>::_M_invoke(std::_Any_data const&)",
                "std::_Function_handler::_M_invoke",
            ),
            (
                "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >\
                 ::_M_create[abi:cxx11](unsigned long&, unsigned long)",
                "std::__cxx11::basic_string::_M_create",
            ),
            ("foo(int) [clone .isra.0]", "foo"),
            ("unsigned long count_items(std::vector<int> const&)", "count_items"),
            ("Node::operator->() const", "Node::operator->"),
            ("bool operator< <Key>(Key const&, Key const&)", "operator<"),
        ];
        for (full, short) in cases {
            assert_eq!(short_name(full), short, "{full}");
        }
    }

    #[test]
    fn rust_hashes_generics_and_qualified_paths() {
        let cases = [
            (
                "alloc::raw_vec::RawVec<T,A>::grow_one::h0123456789abcdef",
                "alloc::raw_vec::RawVec::grow_one",
            ),
            (
                "<alloc::vec::Vec<T,A> as core::ops::drop::Drop>::drop",
                "<alloc::vec::Vec as core::ops::drop::Drop>::drop",
            ),
            (
                "core::ptr::drop_in_place<pagewise::observe::StatReport>",
                "core::ptr::drop_in_place",
            ),
            (
                "pagewise::observe::session::start::{{closure}}",
                "pagewise::observe::session::start::{{closure}}",
            ),
            (
                "hashbrown::map::<impl hashbrown::map::HashMap<K,V,S,A>>::insert",
                "hashbrown::map::<impl hashbrown::map::HashMap>::insert",
            ),
        ];
        for (full, short) in cases {
            assert_eq!(short_name(full), short, "{full}");
        }
    }

    #[test]
    fn clipping_marks_what_was_cut() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcdef", 4), "abc…");
    }
}
