//! Reading the objects of a manifest file as `kubectl` writes them: several YAML documents,
//! and `kind: List` objects whose items are the real objects. `muster validate`, `muster fit`
//! and the simulator's manifest workloads read files through it.

use serde::Deserialize;
use serde_json::Value;

/// One object and where it stands in its file: the document number (from 1), and for an item of
/// a `kind: List`, its index (`2:items[5]`).
#[derive(Clone, Debug)]
pub struct Located {
    /// Where it stands: `3`, or `2:items[5]`.
    pub label: String,
    /// The object.
    pub value: Value,
}

/// A YAML syntax error and the document it is in.
#[derive(Clone, Debug)]
pub struct SyntaxError {
    /// The document (from 1).
    pub label: String,
    /// The parser's message, with the line and column.
    pub message: String,
}

/// Every object in `text`, in order, with empty documents skipped and lists flattened. Reading
/// stops at the first syntax error, since the rest of the stream cannot be trusted; the objects
/// before it are still returned.
pub fn objects(text: &str) -> (Vec<Located>, Option<SyntaxError>) {
    let mut out = Vec::new();
    for (i, document) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let label = (i + 1).to_string();
        match Value::deserialize(document) {
            Ok(Value::Null) => {}
            Ok(value) => flatten(label, value, &mut out),
            Err(err) => {
                let message = err.to_string();
                return (out, Some(SyntaxError { label, message }));
            }
        }
    }
    (out, None)
}

fn flatten(label: String, value: Value, out: &mut Vec<Located>) {
    if value.get("kind").and_then(Value::as_str) == Some("List") {
        if let Some(Value::Array(items)) = value.get("items") {
            for (i, item) in items.iter().enumerate() {
                flatten(format!("{label}:items[{i}]"), item.clone(), out);
            }
        }
        return;
    }
    out.push(Located { label, value });
}
