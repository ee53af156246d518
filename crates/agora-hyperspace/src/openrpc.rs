//! Method descriptors: what each JSON-RPC method takes, returns and may fail with, as data
//! (spec §2.2 "JSON-RPC 2.0 Transport", §4–§6 signatures, §8 "Error Codes"). Each primitive
//! keeps a `DOCS` table of [`MethodDoc`]s keyed by its method constants, next to its dispatch;
//! the node assembles them into its OpenRPC 1.3 document.
//!
//! Schemas come from the param and result types (`schemars::JsonSchema`, doc comments as
//! descriptions), or from a schema function kept next to params parsed by hand.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::Value;

use crate::jsonrpc::RpcCode;

/// `rpc.discover`: the OpenRPC document of the face (OpenRPC's service discovery method).
pub const DISCOVER: &str = "rpc.discover";
/// `node.info`: the node's PeerId, wallet, faces and embedder (Agora's, not the spec's).
pub const NODE_INFO: &str = "node.info";
/// The `rpc.*` methods.
pub const RPC_METHODS: [&str; 1] = [DISCOVER];
/// The `node.*` methods.
pub const NODE_METHODS: [&str; 1] = [NODE_INFO];

/// Builds one schema, adding the types it refers to to the generator's definitions.
pub type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

/// One JSON-RPC method as documented.
#[derive(Debug, Clone, Copy)]
pub struct MethodDoc {
    /// The method's name: one of its primitive's method constants.
    pub name: &'static str,
    /// One line on what it does.
    pub summary: &'static str,
    /// The params object's schema (`properties` and `required`): the method takes them by name.
    pub params: SchemaFn,
    /// The result's schema.
    pub result: SchemaFn,
    /// The application errors it may answer besides −32600/−32601/−32602/−32603.
    pub errors: &'static [RpcCode],
    /// One valid params object (the spec's §11 example where there is one).
    pub example: fn() -> Value,
}

/// The params schema of a method decoded into `T`: `T`'s own schema, inline.
pub fn params_of<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    T::json_schema(generator)
}

/// The result schema of a method answering a `T`: a reference to `T`'s definition (or `T`'s
/// schema when it is inline, like `Value`'s).
pub fn result_of<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// The params schema of a method without params.
pub fn no_params(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "properties": {} })
}

/// The example of a method without params.
pub fn no_example() -> Value {
    Value::Object(serde_json::Map::new())
}

/// The errors every method may answer (JSON-RPC 2.0 §5.1): listed once per method by the
/// document, before its own.
pub const COMMON_ERRORS: [RpcCode; 4] = [
    RpcCode::INVALID_REQUEST,
    RpcCode::METHOD_NOT_FOUND,
    RpcCode::INVALID_PARAMS,
    RpcCode::INTERNAL_ERROR,
];

/// The generator every document uses: JSON Schema draft 7 (what OpenRPC 1.3 embeds), with
/// definitions under `#/components/schemas`, describing what a method accepts.
#[must_use]
pub fn generator() -> SchemaGenerator {
    schemars::generate::SchemaSettings::draft07()
        .with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.meta_schema = None;
        })
        .into_generator()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_primitive_documents_each_of_its_methods_once() {
        let tables: [(&[&str], &[MethodDoc]); 7] = [
            (&crate::state::METHODS, &crate::state::DOCS),
            (&crate::guard::METHODS, &crate::guard::DOCS),
            (&crate::recursive::METHODS, &crate::recursive::DOCS),
            (&crate::tool::METHODS, &crate::tool::DOCS),
            (&crate::memory::METHODS, &crate::memory::DOCS),
            (&crate::learning::METHODS, &crate::learning::DOCS),
            (&crate::improving::METHODS, &crate::improving::DOCS),
        ];
        let mut g = generator();
        for (methods, docs) in tables.iter().chain(
            [(
                &crate::payments::METHODS[..],
                &crate::payments::schema::DOCS[..],
            )]
            .iter(),
        ) {
            let names: Vec<&str> = docs.iter().map(|d| d.name).collect();
            assert_eq!(&names[..], *methods);
            for doc in *docs {
                let params = (doc.params)(&mut g);
                assert_eq!(
                    params.get("type"),
                    Some(&Value::from("object")),
                    "{}",
                    doc.name
                );
                assert!((doc.example)().is_object(), "{}", doc.name);
                let _ = (doc.result)(&mut g);
            }
        }
    }
}
