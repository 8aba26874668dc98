//! What a user most likely did wrong when their handler does not load,
//! recognised from the archive's file names: a handler zipped inside its
//! folder, or code of the other runtime.

use sless_api::Runtime;

/// A hint for a handler that failed to load, if the archive's `names`
/// (its entries' paths) show a recognisable mistake.
pub fn load_hint(runtime: Runtime, entrypoint: &str, names: &[String]) -> Option<String> {
    let module = entrypoint.rsplit_once('.').map_or(entrypoint, |(module, _)| module);
    let (wanted, other_ext, other_runtime) = match runtime {
        Runtime::Python311 => (
            vec![
                format!("{}.py", module.replace('.', "/")),
                format!("{}/__init__.py", module.replace('.', "/")),
            ],
            "js",
            Runtime::Nodejs20,
        ),
        Runtime::Nodejs20 => (
            vec![format!("{module}.js"), format!("{module}/index.js")],
            "py",
            Runtime::Python311,
        ),
    };
    let files: Vec<&str> = names
        .iter()
        .map(|n| n.trim_start_matches("./"))
        .filter(|n| !n.ends_with('/'))
        .collect();
    if files.iter().any(|f| wanted.iter().any(|w| w == f)) {
        return None;
    }
    if let Some(nested) = files
        .iter()
        .filter(|f| wanted.iter().any(|w| f.ends_with(&format!("/{w}"))))
        .min_by_key(|f| f.len())
    {
        let folder = &nested[..nested.len() - wanted.iter().find(|w| nested.ends_with(*w)).map_or(0, |w| w.len()) - 1];
        return Some(format!(
            "found {nested}: zip the contents of {folder}/ rather than the folder itself, or set entrypoint to match"
        ));
    }
    let stem = module.rsplit('.').next().unwrap_or(module);
    let other = format!("{stem}.{other_ext}");
    if let Some(found) = files.iter().find(|f| f.rsplit('/').next() == Some(other.as_str())) {
        return Some(format!(
            "found {found}, which is {} code: create the function with runtime {other_runtime}",
            if other_ext == "js" { "Node.js" } else { "Python" }
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_handler_zipped_inside_its_folder() {
        let hint = load_hint(
            Runtime::Python311,
            "handler.handle",
            &names(&["hello-python/", "hello-python/handler.py"]),
        );
        assert_eq!(
            hint.as_deref(),
            Some("found hello-python/handler.py: zip the contents of hello-python/ rather than the folder itself, or set entrypoint to match")
        );
        let hint = load_hint(
            Runtime::Nodejs20,
            "handler.handle",
            &names(&["app/handler.js", "app/package.json"]),
        );
        assert!(hint
            .unwrap()
            .starts_with("found app/handler.js: zip the contents of app/"));
    }

    #[test]
    fn code_of_the_other_runtime() {
        let hint = load_hint(Runtime::Python311, "handler.handle", &names(&["handler.js"])).unwrap();
        assert_eq!(
            hint,
            "found handler.js, which is Node.js code: create the function with runtime nodejs20"
        );
        let hint = load_hint(Runtime::Nodejs20, "handler.handle", &names(&["handler.py"])).unwrap();
        assert!(
            hint.contains("Python code: create the function with runtime python3.11"),
            "{hint}"
        );
    }

    #[test]
    fn no_hint_when_the_module_is_where_it_belongs() {
        assert_eq!(
            load_hint(
                Runtime::Python311,
                "handler.handle",
                &names(&["handler.py", "x/handler.py"])
            ),
            None
        );
        assert_eq!(
            load_hint(Runtime::Python311, "pkg.mod.fn", &names(&["pkg/mod.py"])),
            None
        );
        assert_eq!(
            load_hint(Runtime::Python311, "app.handle", &names(&["app/__init__.py"])),
            None
        );
        assert_eq!(
            load_hint(Runtime::Python311, "handler.handle", &names(&["other.py"])),
            None
        );
    }
}
