//! Wire types of the sless REST API: what the server sends and accepts, shared
//! by the server, the CLI and the Terraform provider. No I/O lives here.

mod error;
mod function;
mod names;
mod token;

pub use error::ErrorBody;
pub use function::{Function, FunctionCreate, FunctionSpec, FunctionStatus, Phase, Runtime};
pub use names::{validate_name, NameError};
pub use token::{Token, TokenCreate, TokenCreated};

/// A list response: `{"items": [...]}`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct List<T> {
    pub items: Vec<T>,
}
