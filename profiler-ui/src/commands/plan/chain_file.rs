//! The chain file `memtrace plan` reads: a chain's per-stage costs as JSON, so that a user of
//! any framework can plan from costs measured there. The format is documented where
//! `memtrace plan --help` prints it ([`PLAN_HELP`](crate::cli::PLAN_HELP)); this file reads it,
//! refusing anything else with the file's name and the JSON path of the bad value, and bounds
//! the work a hostile file can cause before the planners see it.

use crate::format::parse_bytes;
use anyhow::Context as _;
use blockpool::checkpoint::StageCost;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt;
use std::io::Read as _;
use std::path::Path;

/// Most stages a chain file may have.
pub const MAX_STAGES: usize = 100_000;

/// Most bytes a chain file may have (64 MiB: about 300 bytes per stage at [`MAX_STAGES`]).
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// A chain file, read and checked.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainFile {
    /// The label of every time in the file.
    #[serde(default)]
    pub time_unit: Option<String>,
    /// Bytes of the chain's input.
    pub input_bytes: Bytes,
    /// The stages, in chain order: at least one, at most [`MAX_STAGES`].
    #[serde(deserialize_with = "bounded_stages")]
    pub stages: Vec<StageEntry>,
}

/// One stage of a chain file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageEntry {
    /// A label for reports.
    #[serde(default)]
    pub name: Option<String>,
    /// Bytes of the stage's output.
    pub output_bytes: Bytes,
    /// Time of one forward call, in the file's unit.
    pub forward_time: Time,
    /// Time of the backward step, in the file's unit.
    pub backward_time: Time,
    /// Scratch bytes of the forward.
    #[serde(default)]
    pub forward_workspace_bytes: Bytes,
    /// Scratch bytes of the backward.
    #[serde(default)]
    pub backward_workspace_bytes: Bytes,
}

impl ChainFile {
    /// Reads and checks the chain file at `path`. Every error names the file and, for a bad
    /// value, its JSON path (`stages[3].output_bytes`).
    pub fn read(path: &Path) -> anyhow::Result<ChainFile> {
        let shown = path.display();
        let file = std::fs::File::open(path)
            .with_context(|| format!("cannot read the chain file {shown}"))?;
        let mut text = Vec::new();
        file.take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut text)
            .with_context(|| format!("cannot read the chain file {shown}"))?;
        if text.len() as u64 > MAX_FILE_BYTES {
            anyhow::bail!(
                "{shown}: the chain file is larger than {} MiB, the most `memtrace plan` reads",
                MAX_FILE_BYTES >> 20
            );
        }
        ChainFile::parse(&text).map_err(|e| anyhow::anyhow!("{shown}: {e}"))
    }

    /// Parses a chain file's bytes; the error says where in the JSON, not which file.
    pub fn parse(text: &[u8]) -> Result<ChainFile, String> {
        let mut json = serde_json::Deserializer::from_slice(text);
        let chain: ChainFile = serde_path_to_error::deserialize(&mut json).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            // Syntax errors have no useful path; a top-level missing field's path is `.`.
            if path == "." || inner.is_syntax() || inner.is_eof() {
                inner.to_string()
            } else {
                format!("{path}: {inner}")
            }
        })?;
        json.end().map_err(|e| e.to_string())?;
        if chain.stages.is_empty() {
            return Err("stages: the chain has no stages; give at least one".to_owned());
        }
        Ok(chain)
    }

    /// The stages' costs, as the planners take them (before rounding).
    pub fn costs(&self) -> Vec<StageCost> {
        self.stages
            .iter()
            .map(|s| StageCost {
                output_bytes: s.output_bytes.0,
                forward_workspace_bytes: s.forward_workspace_bytes.0,
                backward_workspace_bytes: s.backward_workspace_bytes.0,
                forward_time: s.forward_time.0,
                backward_time: s.backward_time.0,
            })
            .collect()
    }

    /// Stage names, indexed by stage, when any stage has one.
    pub fn names(&self) -> Option<Vec<Option<&str>>> {
        self.stages
            .iter()
            .any(|s| s.name.is_some())
            .then(|| self.stages.iter().map(|s| s.name.as_deref()).collect())
    }
}

/// A byte count: a non-negative integer, or a string as `--capacity` takes it (`"64MiB"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bytes(pub usize);

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Bytes, D::Error> {
        deserializer.deserialize_any(BytesVisitor)
    }
}

struct BytesVisitor;

impl Visitor<'_> for BytesVisitor {
    type Value = Bytes;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a byte count: a whole number of bytes or a string like \"64MiB\"")
    }

    fn visit_u64<E: de::Error>(self, bytes: u64) -> Result<Bytes, E> {
        usize::try_from(bytes)
            .map(Bytes)
            .map_err(|_| E::custom(format!("{bytes} bytes is more than this machine counts")))
    }

    fn visit_i64<E: de::Error>(self, bytes: i64) -> Result<Bytes, E> {
        match u64::try_from(bytes) {
            Ok(bytes) => self.visit_u64(bytes),
            Err(_) => Err(E::custom(format!(
                "{bytes} is negative: a byte count is 0 or more"
            ))),
        }
    }

    fn visit_f64<E: de::Error>(self, bytes: f64) -> Result<Bytes, E> {
        match whole(bytes) {
            Some(bytes) => self.visit_u64(bytes),
            None if bytes < 0.0 => Err(E::custom(format!(
                "{bytes} is negative: a byte count is 0 or more"
            ))),
            None => Err(E::custom(format!(
                "{bytes} is not a whole number of bytes below 2^53; write bytes as an integer \
                 or a string like \"1.5MiB\""
            ))),
        }
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Bytes, E> {
        parse_bytes(text)
            .map_err(E::custom)
            .and_then(|b| self.visit_u64(b))
    }
}

/// A time: a non-negative whole number in the file's unit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Time(pub u64);

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Time, D::Error> {
        deserializer.deserialize_any(TimeVisitor)
    }
}

struct TimeVisitor;

impl Visitor<'_> for TimeVisitor {
    type Value = Time;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a time: a whole number, 0 or more, in the file's time_unit")
    }

    fn visit_u64<E: de::Error>(self, time: u64) -> Result<Time, E> {
        Ok(Time(time))
    }

    fn visit_i64<E: de::Error>(self, time: i64) -> Result<Time, E> {
        u64::try_from(time)
            .map(Time)
            .map_err(|_| E::custom(format!("{time} is negative: a time is 0 or more")))
    }

    fn visit_f64<E: de::Error>(self, time: f64) -> Result<Time, E> {
        match whole(time) {
            Some(time) => Ok(Time(time)),
            None if time < 0.0 => Err(E::custom(format!(
                "{time} is negative: a time is 0 or more"
            ))),
            None => Err(E::custom(format!(
                "{time} is not a whole number below 2^53: times are integers, so give them in \
                 a finer time_unit (e.g. \"us\" instead of \"ms\")"
            ))),
        }
    }
}

/// `value` as an integer when JSON wrote one as a float (`1e6`) and it is exact: whole, not
/// negative, below 2^53.
fn whole(value: f64) -> Option<u64> {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    (value.fract() == 0.0 && (0.0..EXACT).contains(&value)).then_some(value as u64)
}

/// Reads the `stages` array, refusing it as soon as it passes [`MAX_STAGES`], before the rest
/// is read.
fn bounded_stages<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<StageEntry>, D::Error> {
    struct Stages;

    impl<'de> Visitor<'de> for Stages {
        type Value = Vec<StageEntry>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an array of stages")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<StageEntry>, A::Error> {
            let mut stages = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(MAX_STAGES));
            while let Some(stage) = seq.next_element()? {
                if stages.len() == MAX_STAGES {
                    return Err(de::Error::custom(format!(
                        "more than {MAX_STAGES} stages (the most `memtrace plan` reads)"
                    )));
                }
                stages.push(stage);
            }
            Ok(stages)
        }
    }

    deserializer.deserialize_seq(Stages)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(json: &str) -> String {
        ChainFile::parse(json.as_bytes()).expect_err("refused")
    }

    #[test]
    fn sizes_read_as_integers_or_strings_and_optional_fields_default() {
        let chain = ChainFile::parse(
            br#"{"input_bytes": "1.5K", "stages": [
                {"output_bytes": 4096, "forward_time": 1, "backward_time": 2,
                 "backward_workspace_bytes": "2 MiB", "name": "a"}]}"#,
        )
        .unwrap();
        assert_eq!(chain.input_bytes, Bytes(1536));
        assert_eq!(chain.time_unit, None);
        assert_eq!(
            chain.costs(),
            vec![StageCost {
                output_bytes: 4096,
                forward_workspace_bytes: 0,
                backward_workspace_bytes: 2 << 20,
                forward_time: 1,
                backward_time: 2,
            }]
        );
        assert_eq!(chain.names(), Some(vec![Some("a")]));
    }

    #[test]
    fn bad_values_are_named_by_their_json_path() {
        let stage = r#"{"output_bytes": 1, "forward_time": 1, "backward_time": 1}"#;
        let with = |second: &str| format!(r#"{{"input_bytes": 1, "stages": [{stage}, {second}]}}"#);
        let negative = error(&with(
            r#"{"output_bytes": -5, "forward_time": 1, "backward_time": 1}"#,
        ));
        assert!(
            negative.starts_with(
                "stages[1].output_bytes: -5 is negative: a byte count is 0 or more at line 1"
            ),
            "{negative}"
        );
        let missing = error(&with(r#"{"output_bytes": 1, "forward_time": 1}"#));
        assert!(
            missing.starts_with("stages[1]: missing field `backward_time`"),
            "{missing}"
        );
        let unknown = error(&with(
            r#"{"output_bytes": 1, "forward_time": 1, "backward_time": 1, "outptu": 2}"#,
        ));
        assert!(
            unknown.contains("stages[1]") && unknown.contains("unknown field `outptu`"),
            "{unknown}"
        );
        let fraction = error(&with(
            r#"{"output_bytes": 1, "forward_time": 1.5, "backward_time": 1}"#,
        ));
        assert!(
            fraction.starts_with("stages[1].forward_time: 1.5 is not a whole number"),
            "{fraction}"
        );
        let unit = error(r#"{"input_bytes": "12 parsecs", "stages": []}"#);
        assert!(
            unit.starts_with("input_bytes: `12 parsecs` is not a byte count"),
            "{unit}"
        );
        assert!(error(r#"{"stages": []}"#).starts_with("missing field `input_bytes`"));
        assert_eq!(
            error(r#"{"input_bytes": 0, "stages": []}"#),
            "stages: the chain has no stages; give at least one"
        );
        assert!(error("{").contains("EOF"), "{}", error("{"));
        assert!(error(r#"{"input_bytes": 0, "stages": [], "x": 1}"#).contains("unknown field `x`"));
        let trailing = error(&format!(r#"{{"input_bytes": 0, "stages": [{stage}]}} []"#));
        assert!(trailing.contains("trailing characters"), "{trailing}");
    }

    #[test]
    fn a_chain_past_the_stage_limit_is_refused_while_reading() {
        let stage = r#"{"output_bytes":0,"forward_time":0,"backward_time":0},"#;
        let mut json = String::from(r#"{"input_bytes": 0, "stages": ["#);
        json.push_str(&stage.repeat(MAX_STAGES + 1));
        json.pop();
        json.push_str("]}");
        let err = error(&json);
        assert!(
            err.starts_with("stages: more than 100000 stages"),
            "{}",
            &err[..err.len().min(200)]
        );
        let exact = json.replacen(stage, "", 1);
        assert_eq!(
            ChainFile::parse(exact.as_bytes()).unwrap().stages.len(),
            MAX_STAGES
        );
    }
}
