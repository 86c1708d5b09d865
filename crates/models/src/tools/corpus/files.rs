//! A corpus's files on disk: which are listed for indexing (documents, not the sources of
//! pages also held rendered, within size limits) and the manifest of what the index holds.

use super::extract::Format;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Text files larger than this are not indexed (a corpus of documents, not of data dumps).
const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// A PDF, Word, OpenDocument or EPUB file larger than this is not indexed (their images weigh
/// more than their text).
const MAX_BINARY_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// At most this many files per corpus.
const MAX_FILES: usize = 200_000;

/// What an index remembers of each file it holds: (modified, seconds since the epoch; size).
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct Manifest {
    pub(super) version: u32,
    pub(super) root: String,
    pub(super) files: BTreeMap<String, (u64, u64)>,
}

/// The files of a corpus: (path relative to the root with '/', absolute path, stamp), in a
/// stable order. Hidden files and directories and symbolic links are passed over.
pub(super) fn list_files(root: &Path) -> Vec<(String, PathBuf, (u64, u64))> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() {
                stack.push(path);
            } else if let Some(format) = Format::of(&path).filter(|_| kind.is_file()) {
                let Ok(meta) = entry.metadata() else {
                    continue;
                };
                let limit = size_limit(format);
                if meta.len() > limit {
                    // Debug, not warn: every refresh lists the files again.
                    tracing::debug!(file = %path.display(), bytes = meta.len(), limit,
                        "file too large to index");
                    continue;
                }
                let modified = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_secs());
                let Ok(rel) = path.strip_prefix(root) else {
                    continue;
                };
                let rel = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("/");
                out.push((rel, path, (modified, meta.len())));
                if out.len() >= MAX_FILES {
                    out.sort();
                    return out;
                }
            }
        }
    }
    out.sort();
    without_source_copies(out)
}

/// The files without the sources of pages the corpus also holds rendered: a documentation
/// build keeps `_sources/x.rst.txt` beside `x.html`, a site `x.md` beside `x.html`. The same
/// text twice would take two places in every result list, the second with raw markup.
fn without_source_copies(
    files: Vec<(String, PathBuf, (u64, u64))>,
) -> Vec<(String, PathBuf, (u64, u64))> {
    let rendered: HashSet<String> = files
        .iter()
        .filter(|(rel, abs, _)| Format::of(abs) == Some(Format::Html) && !rel.is_empty())
        .map(|(rel, _, _)| rel.clone())
        .collect();
    files
        .into_iter()
        .filter(|(rel, abs, _)| {
            Format::of(abs) == Some(Format::Html) || !is_source_copy(rel, &rendered)
        })
        .collect()
}

fn size_limit(format: Format) -> u64 {
    if format.is_text() {
        MAX_FILE_BYTES
    } else {
        MAX_BINARY_FILE_BYTES
    }
}

/// A listed file's bytes, read through one open handle that is not a symbolic link
/// (`O_NOFOLLOW`), its type and size checked on that handle: what was listed can be swapped
/// for a link to elsewhere, or grow, before it is read.
pub(super) fn read_listed(path: &Path, format: Format) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let meta = file.metadata()?;
    let limit = size_limit(format);
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len().min(limit)).unwrap_or(0));
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(std::io::Error::other(format!(
            "larger than the {limit} bytes a file of this kind may have"
        )));
    }
    Ok(bytes)
}

/// Whether `rel` (a Markdown or text file) is the source of one of the `rendered` pages.
fn is_source_copy(rel: &str, rendered: &HashSet<String>) -> bool {
    let unsourced = match rel.split_once("_sources/") {
        Some((before, after)) if before.is_empty() || before.ends_with('/') => {
            format!("{before}{after}")
        }
        _ => rel.to_owned(),
    };
    // `x.rst.txt` → `x`, `x.md` → `x`.
    let mut stem = unsourced.as_str();
    for _ in 0..2 {
        match stem.rsplit_once('.') {
            Some((head, ext))
                if ["txt", "rst", "md", "markdown", "text"].contains(&ext)
                    && !head.ends_with('/') =>
            {
                stem = head;
            }
            _ => break,
        }
    }
    ["html", "htm"]
        .iter()
        .any(|ext| rendered.contains(&format!("{stem}.{ext}")))
}

/// Makes `dir` ready for the index of `root`; true when the index in it can be reused. A
/// directory is emptied only when it holds an index of this service (its manifest), so a
/// misconfigured index directory never deletes someone's files.
pub(super) fn prepare_index_dir(dir: &Path, root: &Path, version: u32) -> Result<bool, String> {
    let root = root.display().to_string();
    match read_manifest(dir) {
        Some(m) if m.version == version && m.root == root => return Ok(true),
        // Another version, or another directory under the same name: start over.
        Some(_) => std::fs::remove_dir_all(dir).map_err(|e| e.to_string())?,
        None => {
            let held = std::fs::read_dir(dir).map_or(0, |entries| entries.count());
            if held > 0 {
                return Err(format!(
                    "the directory holds {held} file(s) but no index of this service; \
                     empty it or choose another [search.local] index_dir"
                ));
            }
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    // A manifest from the start, so a crash before the first one is written leaves a
    // directory this service still knows as its own (version 0: rebuilt at the next start).
    let fresh = Manifest {
        version: 0,
        root,
        files: BTreeMap::new(),
    };
    write_manifest(dir, &fresh).map_err(|e| e.to_string())?;
    Ok(false)
}

pub(super) fn read_manifest(dir: &Path) -> Option<Manifest> {
    let bytes = std::fs::read(dir.join("manifest.json")).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Written to a temporary file and renamed, so a crash leaves the old manifest or the new one.
pub(super) fn write_manifest(dir: &Path, manifest: &Manifest) -> std::io::Result<()> {
    let tmp = dir.join("manifest.json.tmp");
    std::fs::write(
        &tmp,
        serde_json::to_vec(manifest).map_err(std::io::Error::other)?,
    )?;
    std::fs::rename(tmp, dir.join("manifest.json"))
}

/// A path with the characters a URL cannot hold as they are percent-encoded.
pub(super) fn percent_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// An anchor as a URL fragment: an `id` may hold quotes, spaces, brackets or `#`, which
/// would end a Markdown link or an HTML attribute in a report or an MCP resource link.
pub(super) fn percent_fragment(anchor: &str) -> String {
    let mut out = String::with_capacity(anchor.len());
    for b in anchor.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~:=".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
