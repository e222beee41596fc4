//! The `pytorch` line: what only PyTorch's snapshot files record
//! ([`PytorchDetails`]), so a PyTorch file converted to JSON Lines and back keeps it.
//!
//! ```text
//! {"pytorch":{"allocator_settings":[["max_split_size",-1],["roundup_power2_divisions",{"map":[["1",0]]}]],
//!             "segment_pools":[[device,address,id0,id1]],
//!             "compile_contexts":[["N/A",[0,1,2]]],
//!             "inserted_events":[3,9]}}
//! ```
//!
//! Settings are `[key, value]` pairs in the file's order; a value is `null`, a bool, an int,
//! a float (always with a fraction or exponent), a string, `{"list": [...]}` or `{"map":
//! [[key, value], ...]}`. Compile contexts are each text with the indices of its events.
//! Readers before this line was added skip it as an unknown key of an unknown line kind.

use super::error::JsonlError;
use crate::trace::{PytorchDetails, SegmentPool, SettingValue};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The line's value (the object under `pytorch`).
pub(super) fn to_json(details: &PytorchDetails) -> Value {
    let settings: Vec<Value> = details
        .allocator_settings
        .iter()
        .map(|(key, value)| json!([key, setting_to_json(value)]))
        .collect();
    let pools: Vec<Value> = details
        .segment_pools
        .iter()
        .map(|p| json!([p.device, p.address, p.pool_id.0, p.pool_id.1]))
        .collect();
    // Each text once, with its events in order.
    let mut by_text: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (index, text) in &details.compile_contexts {
        by_text.entry(text).or_default().push(*index);
    }
    let contexts: Vec<Value> = by_text
        .into_iter()
        .map(|(text, indices)| json!([text, indices]))
        .collect();
    let mut value = json!({
        "allocator_settings": settings,
        "segment_pools": pools,
        "compile_contexts": contexts,
    });
    if !details.inserted_events.is_empty() {
        value["inserted_events"] = json!(details.inserted_events);
    }
    value
}

fn setting_to_json(value: &SettingValue) -> Value {
    match value {
        SettingValue::None => Value::Null,
        SettingValue::Bool(flag) => Value::Bool(*flag),
        SettingValue::Int(n) => Value::from(*n),
        SettingValue::Float(x) => {
            serde_json::Number::from_f64(*x).map_or(Value::Null, Value::Number)
        }
        SettingValue::Text(text) => Value::String(text.clone()),
        SettingValue::List(items) => {
            json!({ "list": items.iter().map(setting_to_json).collect::<Vec<_>>() })
        }
        SettingValue::Map(pairs) => json!({
            "map": pairs.iter().map(|(k, v)| json!([k, setting_to_json(v)])).collect::<Vec<_>>()
        }),
    }
}

/// The details a `pytorch` line on `line` holds.
pub(super) fn from_json(value: &Value, line: u64) -> Result<PytorchDetails, JsonlError> {
    let bad = |expected: &'static str, found: &Value| JsonlError::BadValue {
        line,
        field: "pytorch",
        value: super::line::quote(&found.to_string()),
        expected,
    };
    let Value::Object(fields) = value else {
        return Err(bad(
            "an object of allocator_settings, segment_pools and compile_contexts",
            value,
        ));
    };
    let list = |key: &str| -> Result<&[Value], JsonlError> {
        match fields.get(key) {
            None => Ok(&[]),
            Some(Value::Array(items)) => Ok(items),
            Some(other) => Err(bad(
                "lists under allocator_settings, segment_pools, compile_contexts and inserted_events",
                other,
            )),
        }
    };
    let mut details = PytorchDetails::default();
    for pair in list("allocator_settings")? {
        details
            .allocator_settings
            .push(setting_pair(pair).ok_or_else(|| bad("a [key, value] setting", pair))?);
    }
    for pool in list("segment_pools")? {
        let ints: Option<Vec<u64>> = match pool {
            Value::Array(items) if items.len() == 4 => items.iter().map(Value::as_u64).collect(),
            _ => None,
        };
        let Some([device, address, a, b]) =
            ints.as_deref().and_then(|i| <[u64; 4]>::try_from(i).ok())
        else {
            return Err(bad("a [device, address, id, id] pool", pool));
        };
        let device =
            u32::try_from(device).map_err(|_| bad("a device index that fits in 32 bits", pool))?;
        details.segment_pools.push(SegmentPool {
            device,
            address,
            pool_id: (a, b),
        });
    }
    details.segment_pools.sort_by_key(|p| (p.device, p.address));
    for entry in list("compile_contexts")? {
        let (Some(text), Some(indices)) = (
            entry.get(0).and_then(Value::as_str),
            entry.get(1).and_then(Value::as_array),
        ) else {
            return Err(bad("a [text, [event index, ...]] compile context", entry));
        };
        let text: Arc<str> = Arc::from(text);
        for index in indices {
            let index = index
                .as_u64()
                .and_then(|i| usize::try_from(i).ok())
                .ok_or_else(|| bad("an event index", index))?;
            details.compile_contexts.push((index, Arc::clone(&text)));
        }
    }
    details.compile_contexts.sort_by_key(|(index, _)| *index);
    for index in list("inserted_events")? {
        let index = index
            .as_u64()
            .and_then(|i| usize::try_from(i).ok())
            .ok_or_else(|| bad("an event index", index))?;
        details.inserted_events.push(index);
    }
    details.inserted_events.sort_unstable();
    details.inserted_events.dedup();
    Ok(details)
}

fn setting_pair(pair: &Value) -> Option<(String, SettingValue)> {
    match pair {
        Value::Array(items) if items.len() == 2 => Some((
            items[0].as_str()?.to_string(),
            setting_from_json(&items[1])?,
        )),
        _ => None,
    }
}

fn setting_from_json(value: &Value) -> Option<SettingValue> {
    Some(match value {
        Value::Null => SettingValue::None,
        Value::Bool(flag) => SettingValue::Bool(*flag),
        Value::Number(n) if n.is_f64() => SettingValue::Float(n.as_f64()?),
        Value::Number(n) => SettingValue::Int(n.as_i64()?),
        Value::String(text) => SettingValue::Text(text.clone()),
        Value::Object(map) => container(map)?,
        Value::Array(_) => return None,
    })
}

fn container(map: &Map<String, Value>) -> Option<SettingValue> {
    match (map.get("list"), map.get("map")) {
        (Some(Value::Array(items)), None) => Some(SettingValue::List(
            items.iter().map(setting_from_json).collect::<Option<_>>()?,
        )),
        (None, Some(Value::Array(pairs))) => Some(SettingValue::Map(
            pairs.iter().map(setting_pair).collect::<Option<_>>()?,
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_go_through_the_line_and_back() {
        let details = PytorchDetails {
            allocator_settings: vec![
                (
                    "PYTORCH_CUDA_ALLOC_CONF".into(),
                    SettingValue::Text("".into()),
                ),
                ("max_split_size".into(), SettingValue::Int(-1)),
                (
                    "garbage_collection_threshold".into(),
                    SettingValue::Float(0.0),
                ),
                ("expandable_segments".into(), SettingValue::Bool(false)),
                (
                    "roundup_power2_divisions".into(),
                    SettingValue::Map(vec![("1".into(), SettingValue::Int(4))]),
                ),
                ("odd".into(), SettingValue::List(vec![SettingValue::None])),
            ],
            segment_pools: vec![SegmentPool {
                device: 1,
                address: 1 << 40,
                pool_id: (1, 5),
            }],
            compile_contexts: vec![(0, Arc::from("N/A")), (2, Arc::from("N/A"))],
            inserted_events: vec![1, 4],
        };
        assert_eq!(from_json(&to_json(&details), 9).expect("reads"), details);
    }

    #[test]
    fn a_malformed_line_names_its_line_and_what_was_expected() {
        let line = json!({"segment_pools": [[0, 4096]]});
        let error = from_json(&line, 7).unwrap_err();
        assert_eq!(
            error.to_string(),
            "line 7: `pytorch` is \"[0,4096]\"; expected a [device, address, id, id] pool"
        );
    }
}
