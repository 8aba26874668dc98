//! What a user most likely did wrong when their handler does not load,
//! recognised from the archive's file names: a handler zipped inside its
//! folder, code of the other runtime, TypeScript not compiled, or a module
//! named otherwise than the entrypoint says (Lambda's `lambda_function.py`
//! and `index.js` among them).

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
            vec![
                format!("{module}.js"),
                format!("{module}.mjs"),
                format!("{module}.cjs"),
                format!("{module}/index.js"),
            ],
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
    let top: Vec<&str> = files.iter().copied().filter(|f| !f.contains('/')).collect();
    if runtime == Runtime::Nodejs20 {
        if let Some(ts) = top.iter().find(|f| f.ends_with(".ts")) {
            return Some(format!(
                "found {ts}: TypeScript runs once compiled; upload the JavaScript it compiles to (tsc, esbuild)"
            ));
        }
    }
    let lambda_default = match runtime {
        Runtime::Python311 => [("lambda_function.py", "lambda_function.lambda_handler")].as_slice(),
        Runtime::Nodejs20 => [("index.js", "index.handler"), ("index.mjs", "index.handler")].as_slice(),
    };
    if let Some((file, entrypoint)) = lambda_default.iter().find(|(file, _)| top.contains(file)) {
        return Some(format!(
            "found {file}, AWS Lambda's default: set entrypoint to {entrypoint} (or what its function is called)"
        ));
    }
    let code: &[&str] = match runtime {
        Runtime::Python311 => &[".py"],
        Runtime::Nodejs20 => &[".js", ".mjs", ".cjs"],
    };
    let modules: Vec<&str> = top
        .iter()
        .copied()
        .filter(|f| code.iter().any(|ext| f.ends_with(ext)))
        .take(5)
        .collect();
    if !modules.is_empty() {
        return Some(format!(
            "the archive has no {}; its top-level modules are {}: set entrypoint to module.function naming one",
            wanted[0],
            modules.join(", ")
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
            load_hint(Runtime::Nodejs20, "index.handler", &names(&["index.mjs"])),
            None
        );
    }

    #[test]
    fn a_module_named_otherwise_than_the_entrypoint() {
        let hint = load_hint(
            Runtime::Python311,
            "handler.handle",
            &names(&["lambda_function.py", "lib/util.py"]),
        );
        assert_eq!(
            hint.as_deref(),
            Some("found lambda_function.py, AWS Lambda's default: set entrypoint to lambda_function.lambda_handler (or what its function is called)")
        );
        let hint = load_hint(
            Runtime::Nodejs20,
            "handler.handle",
            &names(&["index.js", "package.json"]),
        )
        .unwrap();
        assert!(hint.contains("set entrypoint to index.handler"), "{hint}");
        let hint = load_hint(
            Runtime::Python311,
            "handler.handle",
            &names(&["main.py", "util.py", "x/y.py"]),
        );
        assert_eq!(
            hint.as_deref(),
            Some("the archive has no handler.py; its top-level modules are main.py, util.py: set entrypoint to module.function naming one")
        );
        assert_eq!(
            load_hint(Runtime::Python311, "handler.handle", &names(&["README.md"])),
            None
        );
    }

    #[test]
    fn typescript_not_compiled() {
        let hint = load_hint(
            Runtime::Nodejs20,
            "index.handler",
            &names(&["index.ts", "package.json"]),
        )
        .unwrap();
        assert_eq!(
            hint,
            "found index.ts: TypeScript runs once compiled; upload the JavaScript it compiles to (tsc, esbuild)"
        );
    }
}
