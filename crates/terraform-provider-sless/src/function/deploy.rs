//! Putting a function's planned code on the server: the zip read, checked
//! against the planned `code_hash`, uploaded and built.

use sless_api::{Function, Phase};
use sless_client::Client;
use tf_provider::Diagnostics;

use super::state::FunctionState;
use super::FunctionResource;
use crate::code::{read_archive, upload_and_build};
use crate::diagnostics::{api_error, error};
use crate::number::Number;
use crate::resource::{settable, Key};

/// Reads the zip, checks it is the one planned, uploads it and waits for the
/// build. Returns the function as the server then reports it (None when the
/// upload never happened); errors are in `diags`.
pub async fn deploy_code(
    diags: &mut Diagnostics,
    client: &Client,
    planned: &FunctionState,
    key: &Key,
) -> Option<Function> {
    let filename = planned.filename.as_deref_option().unwrap_or_default();
    let archive = match read_archive(filename).await {
        Ok(archive) => archive,
        Err(message) => {
            error(diags, "Cannot read the function's code", message, Some("filename"));
            return None;
        }
    };
    if let Some(planned_hash) = planned.code_hash.as_ref_option() {
        if !planned_hash.eq_ignore_ascii_case(&archive.sha256) {
            error(
                diags,
                "The zip is not the one planned",
                format!(
                    "{filename:?} has sha256 {} but code_hash is {planned_hash}: set code_hash = filesha256({filename:?}), \
                     and plan again if the file changed after planning.",
                    archive.sha256
                ),
                Some("code_hash"),
            );
            return None;
        }
    }
    let hash = archive.sha256.clone();
    let timeout = (planned.build_timeout_sec.as_ref_option())
        .and_then(Number::whole)
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(300);
    let (namespace, name) = (&key.namespace, &key.name);
    match upload_and_build(client, namespace, name, archive, timeout).await {
        Ok(function) if function.status.phase == Phase::Failed => {
            let serving = match function.status.version {
                0 => String::new(),
                n => format!("\n\nVersion {n} keeps serving."),
            };
            error(
                diags,
                format!("The build of function {key} failed"),
                format!(
                    "sless could not build {filename:?} (code_hash {hash}). The build log ends with:\n\n{}{serving}",
                    function.status.message.trim_end()
                ),
                Some("filename"),
            );
            Some(function)
        }
        Ok(function) => Some(function),
        Err(e) => {
            let summary = format!("Cannot deploy the code of function {key}");
            api_error(diags, summary, &e, &settable::<FunctionResource>());
            client.get_function(namespace, name).await.ok()
        }
    }
}
