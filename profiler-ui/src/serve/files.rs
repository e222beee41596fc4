//! Which files one `memtrace serve` shows, and under which labels: the files named on the
//! command line, every trace file of a folder, or a rank pattern (`run-{rank}.pickle`: every
//! file of that folder whose name has digits in place of `{rank}`).
//!
//! A file is labelled by its name, or by its rank when the files are a rank series: they come
//! from one pattern, or their names differ only in the number after `rank` (`snapshot_rank0`,
//! `snapshot_rank1`, ...), as PyTorch DDP jobs name one snapshot per rank. A rank series is
//! shown in rank order; other files in the order given (a folder's by name).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Most files one page shows side by side.
pub const MAX_FILES: usize = 64;

/// Endings of the files a folder contributes (each also with `.gz`).
const TRACE_ENDINGS: [&str; 4] = [".pickle", ".pkl", ".jsonl", ".csv"];

/// What stands for the rank's digits in a pattern.
const RANK: &str = "{rank}";

/// A file to show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileEntry {
    /// Where it is.
    pub path: PathBuf,
    /// How the page names it: the file name, or `rank N`.
    pub label: String,
    /// Its rank, when the files are a rank series.
    pub rank: Option<u32>,
}

/// Why the files given cannot be shown together.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileListError {
    /// A path that does not exist.
    #[error("{0}: no such file or folder")]
    Missing(PathBuf),
    /// A folder that cannot be listed.
    #[error("cannot list the folder {path}: {source}")]
    Folder {
        /// The folder.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A folder without trace files.
    #[error(
        "{0}: no trace files in this folder (names ending in .pickle, .pkl, .jsonl or .csv, \
         each optionally .gz)"
    )]
    EmptyFolder(PathBuf),
    /// A rank pattern no file matches.
    #[error(
        "no file matches {pattern} ({{rank}} stands for the rank's digits, e.g. run-0.pickle)"
    )]
    NoRankFiles {
        /// The pattern as given.
        pattern: PathBuf,
    },
    /// One file given twice (also through a folder or a pattern).
    #[error("{0} is given twice")]
    SameFile(PathBuf),
    /// Two files with one name: the page could not tell them apart.
    #[error(
        "two files are named {name} ({first} and {second}); the page labels each file by its \
         name: rename or link one of them"
    )]
    SameName {
        /// The shared name.
        name: String,
        /// One file.
        first: PathBuf,
        /// The other.
        second: PathBuf,
    },
    /// Two files of one rank series with the same rank.
    #[error("rank {rank} is given twice ({first} and {second})")]
    SameRank {
        /// The rank.
        rank: u32,
        /// One file.
        first: PathBuf,
        /// The other.
        second: PathBuf,
    },
    /// More files than the command takes.
    #[error("{count} files given; {limit}")]
    TooMany {
        /// How many were given (after folders and patterns were expanded).
        count: usize,
        /// The limit, in words: "one page shows at most 64 side by side".
        limit: String,
    },
}

/// The files `args` name, labelled and in the order the page shows them, at most
/// [`MAX_FILES`]. Each argument names at least one file or is an error (a folder without
/// traces, a pattern that matches none), so the list is empty only when `args` is.
pub fn resolve(args: &[PathBuf]) -> Result<Vec<FileEntry>, FileListError> {
    resolve_at_most(
        args,
        MAX_FILES,
        &format!("one page shows at most {MAX_FILES} side by side"),
    )
}

/// As [`resolve`], taking at most `max` files; `limit` says so in the error.
pub fn resolve_at_most(
    args: &[PathBuf],
    max: usize,
    limit: &str,
) -> Result<Vec<FileEntry>, FileListError> {
    let mut paths: Vec<(PathBuf, Option<u32>)> = Vec::new();
    let mut all_from_patterns = true;
    for arg in args {
        if is_pattern(arg) {
            paths.extend(rank_files(arg)?.into_iter().map(|(p, r)| (p, Some(r))));
        } else if arg.is_dir() {
            all_from_patterns = false;
            paths.extend(folder_traces(arg)?.into_iter().map(|p| (p, None)));
        } else if arg.exists() {
            all_from_patterns = false;
            paths.push((arg.clone(), None));
        } else {
            return Err(FileListError::Missing(arg.clone()));
        }
    }
    if paths.len() > max {
        return Err(FileListError::TooMany {
            count: paths.len(),
            limit: limit.to_owned(),
        });
    }
    // Each path resolved and named once: a thousand files cost a thousand lookups.
    let mut seen: HashSet<PathBuf> = HashSet::with_capacity(paths.len());
    for (path, _) in &paths {
        if !seen.insert(path.canonicalize().unwrap_or_else(|_| path.clone())) {
            return Err(FileListError::SameFile(path.clone()));
        }
    }
    let mut named: HashMap<String, &PathBuf> = HashMap::with_capacity(paths.len());
    for (path, _) in &paths {
        let name = file_name(path);
        if let Some(first) = named.get(&name) {
            return Err(FileListError::SameName {
                name,
                first: (*first).clone(),
                second: path.clone(),
            });
        }
        named.insert(name, path);
    }
    let ranks: Option<Vec<u32>> = if all_from_patterns && paths.len() > 1 {
        paths.iter().map(|(_, r)| *r).collect()
    } else if paths.len() > 1 {
        inferred_ranks(&paths.iter().map(|(p, _)| file_name(p)).collect::<Vec<_>>())
    } else {
        None
    };
    let mut entries: Vec<FileEntry> = match ranks {
        Some(ranks) => paths
            .into_iter()
            .zip(ranks)
            .map(|((path, _), rank)| FileEntry {
                path,
                label: format!("rank {rank}"),
                rank: Some(rank),
            })
            .collect(),
        None => paths
            .into_iter()
            .map(|(path, _)| FileEntry {
                label: file_name(&path),
                path,
                rank: None,
            })
            .collect(),
    };
    entries.sort_by_key(|e| e.rank);
    for pair in entries.windows(2) {
        if let (Some(rank), true) = (pair[0].rank, pair[0].rank == pair[1].rank) {
            return Err(FileListError::SameRank {
                rank,
                first: pair[0].path.clone(),
                second: pair[1].path.clone(),
            });
        }
    }
    Ok(entries)
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Whether `path` is a rank pattern (its file name holds `{rank}`).
pub fn is_pattern(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.to_string_lossy().contains(RANK))
}

/// The files of the folder of `pattern` whose names have digits where `{rank}` is, with those
/// digits read as the rank.
fn rank_files(pattern: &Path) -> Result<Vec<(PathBuf, u32)>, FileListError> {
    let name = file_name(pattern);
    let (prefix, suffix) = name.split_once(RANK).unwrap_or((&name, ""));
    let folder = match pattern.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut found = Vec::new();
    for path in list(&folder)? {
        let name = file_name(&path);
        let digits = name
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix(suffix));
        if let Some(rank) = digits
            .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|d| d.parse().ok())
        {
            found.push((path, rank));
        }
    }
    if found.is_empty() {
        return Err(FileListError::NoRankFiles {
            pattern: pattern.to_path_buf(),
        });
    }
    Ok(found)
}

/// The trace files of `folder`, by name.
fn folder_traces(folder: &Path) -> Result<Vec<PathBuf>, FileListError> {
    let traces: Vec<PathBuf> = list(folder)?
        .into_iter()
        .filter(|p| {
            let name = file_name(p).to_ascii_lowercase();
            let name = name.strip_suffix(".gz").unwrap_or(&name);
            TRACE_ENDINGS.iter().any(|e| name.ends_with(e))
        })
        .collect();
    if traces.is_empty() {
        return Err(FileListError::EmptyFolder(folder.to_path_buf()));
    }
    Ok(traces)
}

/// The files (not folders) directly in `folder`, by name.
fn list(folder: &Path) -> Result<Vec<PathBuf>, FileListError> {
    let failed = |source| FileListError::Folder {
        path: folder.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(folder).map_err(failed)? {
        let path = entry.map_err(failed)?.path();
        if path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// The ranks of `names` when they differ only in the number after `rank` (any case, then an
/// optional `_`, `-` or `.`); `None` otherwise.
fn inferred_ranks(names: &[String]) -> Option<Vec<u32>> {
    let mut shape = None;
    let mut ranks = Vec::with_capacity(names.len());
    for name in names {
        let (without, rank) = rank_in(name)?;
        match &shape {
            None => shape = Some(without),
            Some(s) if *s == without => {}
            Some(_) => return None,
        }
        ranks.push(rank);
    }
    Some(ranks)
}

/// `name` without the digits of its last `rank<digits>`, and those digits.
fn rank_in(name: &str) -> Option<(String, u32)> {
    let lower = name.to_ascii_lowercase();
    let at = lower.rfind("rank")?;
    let mut digits_at = at + "rank".len();
    if lower[digits_at..].starts_with(['_', '-', '.']) {
        digits_at += 1;
    }
    let digits = lower[digits_at..]
        .bytes()
        .take_while(u8::is_ascii_digit)
        .count();
    if digits == 0 {
        return None;
    }
    let rank = lower[digits_at..digits_at + digits].parse().ok()?;
    let without = format!("{}{}", &name[..digits_at], &name[digits_at + digits..]);
    Some((without, rank))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn ranks_are_the_number_after_rank_when_only_it_differs() {
        assert_eq!(
            inferred_ranks(&names(&["snapshot_rank1.pickle", "snapshot_rank0.pickle"])),
            Some(vec![1, 0])
        );
        assert_eq!(
            inferred_ranks(&names(&["Rank-3.jsonl.gz", "Rank-12.jsonl.gz"])),
            Some(vec![3, 12])
        );
        assert_eq!(
            inferred_ranks(&names(&["rank0_step5.pickle", "rank1_step5.pickle"])),
            Some(vec![0, 1])
        );
        for differ in [
            &["before.pickle", "after.pickle"][..],
            &["run1.pickle", "run2.pickle"],
            &["rank0.pickle", "rank1.jsonl"],
            &["rank0_a.pickle", "rank1_b.pickle"],
            &["rank.pickle", "rank.pkl"],
        ] {
            assert_eq!(inferred_ranks(&names(differ)), None, "{differ:?}");
        }
    }

    fn folder(name: &str, files: &[&str]) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("memtrace-files-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("folder");
        for f in files {
            std::fs::write(dir.join(f), "x").expect("file");
        }
        dir
    }

    #[test]
    fn patterns_and_folders_expand_in_rank_or_name_order() {
        let dir = folder(
            "expand",
            &[
                "run-10.pickle",
                "run-2.pickle",
                "run-x.pickle",
                "notes.txt",
                "b.jsonl.gz",
                "a.csv",
            ],
        );
        let ranked = resolve(&[dir.join("run-{rank}.pickle")]).expect("resolves");
        let labels: Vec<_> = ranked.iter().map(|e| (e.label.as_str(), e.rank)).collect();
        assert_eq!(labels, [("rank 2", Some(2)), ("rank 10", Some(10))]);
        let all = resolve(std::slice::from_ref(&dir)).expect("resolves");
        let labels: Vec<_> = all.iter().map(|e| e.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "a.csv",
                "b.jsonl.gz",
                "run-10.pickle",
                "run-2.pickle",
                "run-x.pickle"
            ],
            "trace endings only, by name; no rank series without `rank` in the names"
        );
        let one = resolve(&[dir.join("a.csv")]).expect("resolves");
        assert_eq!((one[0].label.as_str(), one[0].rank), ("a.csv", None));
    }

    #[test]
    fn bad_lists_name_what_is_wrong() {
        let dir = folder("bad", &["rank-1.pickle", "rank-01.pickle", "x.txt"]);
        let other = folder("bad-other", &["rank-1.pickle"]);
        let message = |args: &[PathBuf]| resolve(args).expect_err("refused").to_string();
        let p = |s: &str| dir.join(s);
        assert_eq!(
            message(&[p("missing.pickle")]),
            format!("{}: no such file or folder", p("missing.pickle").display())
        );
        assert_eq!(
            message(&[p("rank-1.pickle"), p("./rank-1.pickle")]),
            format!("{} is given twice", p("./rank-1.pickle").display())
        );
        assert_eq!(
            message(&[p("rank-1.pickle"), other.join("rank-1.pickle")]),
            format!(
                "two files are named rank-1.pickle ({} and {}); the page labels each file by \
                 its name: rename or link one of them",
                p("rank-1.pickle").display(),
                other.join("rank-1.pickle").display()
            )
        );
        assert!(
            message(&[p("rank-{rank}.pickle")]).starts_with("rank 1 is given twice ("),
            "rank-1 and rank-01"
        );
        assert_eq!(
            message(&[p("step-{rank}.pickle")]),
            format!(
                "no file matches {} ({{rank}} stands for the rank's digits, e.g. run-0.pickle)",
                p("step-{rank}.pickle").display()
            )
        );
        let empty = folder("empty", &["x.txt"]);
        assert!(message(&[empty]).ends_with(
            ": no trace files in this folder (names ending in .pickle, .pkl, .jsonl or .csv, \
             each optionally .gz)"
        ));
        let many: Vec<String> = (0..=MAX_FILES).map(|i| format!("t{i}.jsonl")).collect();
        let many = folder("many", &many.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(
            message(&[many]),
            "65 files given; one page shows at most 64 side by side"
        );
    }
}
