//! How serde stores [`Contexts`]: each distinct string and frame once, contexts as indices
//! into them, so a table of a hundred thousand stacks that share their frames stays as small
//! stored as in memory, and reads back with its strings shared again. Ids are kept: context
//! `n` is read back as `ContextId(n)`; a table that would not be (a repeated context) is an
//! error.

use super::Contexts;
use crate::event::{Context, Frame};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::HashMap;
use std::sync::Arc;

/// The stored form.
#[derive(Serialize, Deserialize)]
struct Table<S> {
    /// Every tag, function name and file name, once.
    strings: Vec<S>,
    /// Every frame: name, file name (indices into `strings`) and line.
    frames: Vec<(u32, u32, u32)>,
    /// Every context in id order: its tags (into `strings`) and frames (into `frames`).
    contexts: Vec<(Vec<u32>, Vec<u32>)>,
}

/// Numbers distinct values in the order first met.
struct Numbering<'a, T: ?Sized + Eq + std::hash::Hash> {
    index: HashMap<&'a T, u32>,
    list: Vec<&'a T>,
}

impl<'a, T: ?Sized + Eq + std::hash::Hash> Numbering<'a, T> {
    fn new() -> Self {
        Numbering {
            index: HashMap::new(),
            list: Vec::new(),
        }
    }

    /// The number of `value`; past `u32::MAX` distinct values, an error.
    fn number<E: serde::ser::Error>(&mut self, value: &'a T) -> Result<u32, E> {
        if let Some(&n) = self.index.get(value) {
            return Ok(n);
        }
        let n = u32::try_from(self.list.len())
            .map_err(|_| E::custom("more than 2^32 distinct strings or frames"))?;
        self.index.insert(value, n);
        self.list.push(value);
        Ok(n)
    }
}

impl Serialize for Contexts {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut strings: Numbering<str> = Numbering::new();
        let mut frames: Numbering<Frame> = Numbering::new();
        let mut stored_frames = Vec::new();
        let mut contexts = Vec::with_capacity(self.len());
        for (_, context) in self.iter() {
            let tags = context
                .tags
                .iter()
                .map(|tag| strings.number(tag))
                .collect::<Result<Vec<u32>, S::Error>>()?;
            let mut frame_numbers = Vec::with_capacity(context.frames.len());
            for frame in &context.frames {
                let before = frames.list.len();
                let n = frames.number(frame)?;
                if frames.list.len() > before {
                    stored_frames.push((
                        strings.number(&frame.name)?,
                        strings.number(&frame.filename)?,
                        frame.line,
                    ));
                }
                frame_numbers.push(n);
            }
            contexts.push((tags, frame_numbers));
        }
        Table {
            strings: strings.list,
            frames: stored_frames,
            contexts,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Contexts {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Contexts, D::Error> {
        let table: Table<String> = Table::deserialize(deserializer)?;
        let strings: Vec<Arc<str>> = table.strings.into_iter().map(Arc::from).collect();
        let string = |n: u32| {
            strings
                .get(n as usize)
                .cloned()
                .ok_or_else(|| D::Error::custom(format!("string {n} of {}", strings.len())))
        };
        let frames = table
            .frames
            .iter()
            .map(|&(name, filename, line)| {
                Ok(Frame {
                    name: string(name)?,
                    filename: string(filename)?,
                    line,
                })
            })
            .collect::<Result<Vec<Frame>, D::Error>>()?;
        let mut contexts = Contexts::new();
        for (index, (tags, frame_numbers)) in table.contexts.into_iter().enumerate() {
            let context = Context {
                tags: tags
                    .into_iter()
                    .map(string)
                    .collect::<Result<_, D::Error>>()?,
                frames: frame_numbers
                    .into_iter()
                    .map(|n| {
                        frames.get(n as usize).cloned().ok_or_else(|| {
                            D::Error::custom(format!("frame {n} of {}", frames.len()))
                        })
                    })
                    .collect::<Result<_, D::Error>>()?,
            };
            let id = contexts.intern(context);
            if id.0 as usize != index + 1 {
                return Err(D::Error::custom(format!(
                    "context {} repeats context {}",
                    index + 1,
                    id.0
                )));
            }
        }
        Ok(contexts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::ContextId;

    fn frame(name: &str, line: u32) -> Frame {
        Frame {
            name: name.into(),
            filename: "model.py".into(),
            line,
        }
    }

    #[test]
    fn contexts_read_back_with_their_ids_and_shared_strings() {
        let contexts: Contexts = [
            Context {
                tags: vec!["step0".into()],
                frames: vec![frame("forward", 3), frame("main", 9)],
            },
            Context {
                tags: vec![],
                frames: vec![frame("backward", 5), frame("main", 9)],
            },
        ]
        .into_iter()
        .collect();
        let text = serde_json::to_string(&contexts).expect("serializes");
        // "main" and its frame are stored once, the file name once.
        assert_eq!(
            text,
            r#"{"strings":["step0","forward","model.py","main","backward"],"frames":[[1,2,3],[3,2,9],[4,2,5]],"contexts":[[[0],[0,1]],[[],[2,1]]]}"#
        );
        let back: Contexts = serde_json::from_str(&text).expect("deserializes");
        assert_eq!(back, contexts);
        let (first, second) = (
            back.get(ContextId(1)).expect("1"),
            back.get(ContextId(2)).expect("2"),
        );
        assert!(Arc::ptr_eq(
            &first.frames[0].filename,
            &second.frames[0].filename
        ));
    }

    #[test]
    fn a_table_that_would_renumber_or_points_nowhere_is_an_error() {
        for (table, message) in [
            (
                r#"{"strings":["a"],"frames":[],"contexts":[[[0],[]],[[0],[]]]}"#,
                "context 2 repeats context 1",
            ),
            (
                r#"{"strings":["a"],"frames":[],"contexts":[[[1],[]]]}"#,
                "string 1 of 1",
            ),
            (
                r#"{"strings":["a"],"frames":[[0,0,1]],"contexts":[[[],[1]]]}"#,
                "frame 1 of 1",
            ),
        ] {
            let error = serde_json::from_str::<Contexts>(table).expect_err(table);
            assert!(error.to_string().contains(message), "{error}");
        }
    }
}
