//! Where policies are found by name: the process-wide registry ([`register_policy`]), a channel's own
//! ([`PolicyRegistry`], which wins over it), and the built-ins (pick_first, round_robin, the xDS cluster
//! manager), which a registered policy of the same name replaces.
//!
//! Not here: the policies themselves (`builtins.rs`, the traits in `api.rs`), and the service config's
//! choice among `loadBalancingConfig` entries (grpc-service-config, which looks names up here).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock, RwLock};

use crate::api::LoadBalancerBuilder;
use crate::builtins::{
    PickFirstBuilder, RoundRobinBuilder, XdsClusterManagerBuilder, PICK_FIRST, ROUND_ROBIN,
    XDS_CLUSTER_MANAGER,
};

type Builders = BTreeMap<String, Arc<dyn LoadBalancerBuilder>>;

fn global() -> &'static RwLock<Builders> {
    static GLOBAL: OnceLock<RwLock<Builders>> = OnceLock::new();
    GLOBAL.get_or_init(|| RwLock::new(BTreeMap::new()))
}

/// Registers `builder` for the whole process under its name, replacing any registered before under the
/// same name (a built-in's name included). Channels built afterwards (and service configs parsed
/// afterwards) see it; a channel's own registry wins over it.
pub fn register_policy(builder: impl LoadBalancerBuilder) {
    let builder: Arc<dyn LoadBalancerBuilder> = Arc::new(builder);
    // A poisoned lock still holds a whole map: registration only inserts.
    let mut map = global().write().unwrap_or_else(|e| e.into_inner());
    map.insert(builder.name().to_owned(), builder);
}

/// The built-in policy named `name`.
pub fn builtin_policy(name: &str) -> Option<Arc<dyn LoadBalancerBuilder>> {
    match name {
        PICK_FIRST => Some(Arc::new(PickFirstBuilder)),
        ROUND_ROBIN => Some(Arc::new(RoundRobinBuilder)),
        XDS_CLUSTER_MANAGER => Some(Arc::new(XdsClusterManagerBuilder)),
        _ => None,
    }
}

/// A channel's policies: its own builders, then the process-wide ones ([`register_policy`]), then the
/// built-ins. Cheap to clone. Two registries are equal when they hold the same builders.
#[derive(Clone, Default)]
pub struct PolicyRegistry {
    local: Arc<Builders>,
}

impl PolicyRegistry {
    /// A registry with no policies of its own (the process-wide ones and the built-ins only).
    pub fn new() -> PolicyRegistry {
        PolicyRegistry::default()
    }

    /// Adds `builder` to this registry under its name (replacing one of the same name).
    pub fn register(&mut self, builder: Arc<dyn LoadBalancerBuilder>) {
        Arc::make_mut(&mut self.local).insert(builder.name().to_owned(), builder);
    }

    /// Adds `other`'s own policies to this registry (replacing those of the same names).
    pub fn extend(&mut self, other: &PolicyRegistry) {
        if other.local.is_empty() {
            return;
        }
        let local = Arc::make_mut(&mut self.local);
        for (name, builder) in other.local.iter() {
            local.insert(name.clone(), builder.clone());
        }
    }

    /// This registry with `builder` added.
    pub fn with(mut self, builder: impl LoadBalancerBuilder) -> PolicyRegistry {
        self.register(Arc::new(builder));
        self
    }

    /// The policy named `name`: this registry's, else the process-wide one, else the built-in.
    pub fn get(&self, name: &str) -> Option<Arc<dyn LoadBalancerBuilder>> {
        self.registered(name).or_else(|| builtin_policy(name))
    }

    /// The policy named `name` in this registry or the process-wide one, not counting the built-ins.
    pub fn registered(&self, name: &str) -> Option<Arc<dyn LoadBalancerBuilder>> {
        if let Some(b) = self.local.get(name) {
            return Some(b.clone());
        }
        let map = global().read().unwrap_or_else(|e| e.into_inner());
        map.get(name).cloned()
    }

    /// The names of this registry's own policies.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.local.keys().map(String::as_str)
    }
}

impl PartialEq for PolicyRegistry {
    fn eq(&self, other: &PolicyRegistry) -> bool {
        self.local.len() == other.local.len()
            && self.local.iter().zip(other.local.iter()).all(|(a, b)| {
                a.0 == b.0
                    && std::ptr::eq(Arc::as_ptr(a.1) as *const u8, Arc::as_ptr(b.1) as *const u8)
            })
    }
}

impl Eq for PolicyRegistry {}

impl fmt::Debug for PolicyRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PolicyRegistry")
            .field(&self.local.keys().collect::<Vec<_>>())
            .finish()
    }
}
