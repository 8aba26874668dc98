//! What the provider block resolved to (endpoint, token, namespace), shared
//! between the provider and its resources: Terraform configures the provider
//! after the resources exist, so they hold a handle that `configure` fills.

use std::sync::{Arc, RwLock};

use sless_client::Client;
use tf_provider::value::Value;
use tf_provider::Diagnostics;

use crate::diagnostics::error;

/// A configured provider: who to talk to and the default namespace.
#[derive(Debug, Clone)]
pub struct Connection {
    pub client: Client,
    pub namespace: String,
}

#[derive(Debug, Clone, Default)]
enum Slot {
    /// `configure` has not run (e.g. during `terraform validate`).
    #[default]
    Unconfigured,
    Ready(Connection),
    /// The namespace is known but the endpoint or token was unknown while
    /// planning (they come from another resource): plans still work.
    Deferred {
        namespace: Value<String>,
        why: String,
    },
}

/// Handle to the provider's connection, cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Shared(Arc<RwLock<Slot>>);

impl Shared {
    pub fn set(&self, connection: Connection) {
        *self.0.write().expect("connection lock") = Slot::Ready(connection);
    }

    pub fn defer(&self, namespace: Value<String>, why: String) {
        *self.0.write().expect("connection lock") = Slot::Deferred { namespace, why };
    }

    /// The provider's namespace, for resources that do not set one (unknown
    /// until the provider is configured).
    pub fn namespace(&self) -> Value<String> {
        match &*self.0.read().expect("connection lock") {
            Slot::Ready(connection) => Value::Value(connection.namespace.clone()),
            Slot::Deferred { namespace, .. } => namespace.clone(),
            Slot::Unconfigured => Value::Unknown,
        }
    }

    /// The client, or an error diagnostic saying why there is none.
    pub fn client(&self, diags: &mut Diagnostics) -> Option<Client> {
        match &*self.0.read().expect("connection lock") {
            Slot::Ready(connection) => Some(connection.client.clone()),
            Slot::Deferred { why, .. } => {
                error(diags, "The sless provider is not configured", why.clone(), None);
                None
            }
            Slot::Unconfigured => {
                error(
                    diags,
                    "The sless provider is not configured",
                    "Terraform called the provider before configuring it; this is a bug in the provider.",
                    None,
                );
                None
            }
        }
    }
}
