//! `${NAME}` templates in suite strings. `$$` writes a literal `$`.

use std::collections::BTreeMap;

/// Variables every cell defines.
pub const CELL_VARIABLES: &[&str] = &[
    "PORT",
    "PORT2",
    "PORT3",
    "PORT4",
    "METRICS_PORT",
    "DATA_DIR",
    "CELL_DIR",
    "SOAK_NODE",
    "SUITE_DIR",
    "RUN_DIR",
];

/// Splits a template into literal text and variable names.
fn pieces(text: &str) -> Result<Vec<(bool, &str)>, String> {
    let mut out = vec![];
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push((false, &rest[..i]));
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push((false, "$"));
            rest = tail;
        } else if let Some(body) = after.strip_prefix('{') {
            let end = body.find('}').ok_or_else(|| {
                format!("unclosed `${{` in {text:?}: write `${{NAME}}` (or `$$` for a literal `$`)")
            })?;
            let name = &body[..end];
            if name.is_empty() {
                return Err(format!("empty `${{}}` in {text:?}"));
            }
            out.push((true, name));
            rest = &body[end + 1..];
        } else {
            out.push((false, "$"));
            rest = after;
        }
    }
    out.push((false, rest));
    Ok(out)
}

/// Checks that every variable in `text` is one of `known`.
pub fn check(text: &str, known: &[&str]) -> Result<(), String> {
    for (is_var, name) in pieces(text)? {
        if is_var && !known.contains(&name) {
            return Err(format!(
                "unknown variable `${{{name}}}`{}; variables here: {}",
                super::values::did_you_mean(name, known.iter().copied()),
                known
                    .iter()
                    .map(|k| format!("${{{k}}}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    Ok(())
}

/// Replaces every `${NAME}` with its value.
pub fn render(text: &str, vars: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    for (is_var, name) in pieces(text)? {
        if is_var {
            let v = vars
                .get(name)
                .ok_or_else(|| format!("unknown variable `${{{name}}}` in {text:?}"))?;
            out.push_str(v);
        } else {
            out.push_str(name);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_and_checks() {
        let vars: BTreeMap<String, String> = [("PORT".to_string(), "4000".to_string())].into();
        assert_eq!(
            render("127.0.0.1:${PORT}", &vars).unwrap(),
            "127.0.0.1:4000"
        );
        assert_eq!(render("cost $$5 $x", &vars).unwrap(), "cost $5 $x");
        let e = check("${PROT}", CELL_VARIABLES).unwrap_err();
        assert!(e.contains("did you mean `PORT`"), "{e}");
        assert!(check("${PORT", CELL_VARIABLES).is_err());
    }
}
