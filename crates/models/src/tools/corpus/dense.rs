//! The dense side of hybrid search: a vector for each part of a section (the model reads 128
//! tokens, and a long section's answer is often past them), kept in `vectors.bin` beside the
//! corpus's index; a section is as near a query as its nearest part. And the fusion of ranked
//! lists.
//!
//! A vector is keyed by its section (file and position in it) and carries a digest of the text
//! it was made from, so a section whose text changed, or a file that is gone, is embedded again
//! or dropped by comparing with the index; nothing else has to stay in step. Vectors made by
//! another model are discarded when the file is read.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::path::Path;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{IndexRecordOption, Value};
use tantivy::{DocAddress, TantivyDocument, Term};

const FILE: &str = "vectors.bin";
/// Version 2: several vectors a section (version 1 held one; its file is embedded again).
const MAGIC: &[u8; 8] = b"DRVEC02\n";

/// A section: its file (relative to the corpus root) and its place among the file's sections.
pub type Key = (String, u64);

/// The first bytes of a section text's SHA-256.
pub type Digest = [u8; 8];

pub fn digest(text: &str) -> Digest {
    use sha2::Digest as _;
    let full = sha2::Sha256::digest(text.as_bytes());
    let mut out = [0u8; 8];
    out.copy_from_slice(&full[..8]);
    out
}

/// The vectors of one corpus, made by one model: each section's parts, in order.
#[derive(Debug, Default)]
pub struct Vectors {
    model: String,
    by_key: HashMap<Key, (Digest, Vec<Vec<f32>>)>,
}

impl Vectors {
    pub fn empty(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            by_key: HashMap::new(),
        }
    }

    /// The vectors kept in `dir` for `model`; none when there is no file, it cannot be read,
    /// or another model made it.
    pub fn load(dir: &Path, model: &str) -> Self {
        match read(&dir.join(FILE)) {
            Ok(kept) if kept.model == model => kept,
            Ok(_) => {
                tracing::info!(dir = %dir.display(), "corpus vectors from another model: embedding again");
                Self::empty(model)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Self::empty(model),
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
                tracing::info!(dir = %dir.display(), "corpus vectors of an older version: embedding again");
                Self::empty(model)
            }
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "corpus vectors unreadable: embedding again");
                Self::empty(model)
            }
        }
    }

    /// Written beside the index, whole, through a temporary file (a crash leaves the old one).
    pub fn save(&self, dir: &Path) -> std::io::Result<()> {
        let tmp = dir.join(format!("{FILE}.tmp"));
        let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        out.write_all(MAGIC)?;
        write_bytes(&mut out, self.model.as_bytes())?;
        out.write_all(&(self.by_key.len() as u64).to_le_bytes())?;
        for ((rel, ordinal), (digest, parts)) in &self.by_key {
            write_bytes(&mut out, rel.as_bytes())?;
            out.write_all(&ordinal.to_le_bytes())?;
            out.write_all(digest)?;
            out.write_all(&(parts.len() as u32).to_le_bytes())?;
            for vector in parts {
                out.write_all(&(vector.len() as u32).to_le_bytes())?;
                for x in vector {
                    out.write_all(&x.to_le_bytes())?;
                }
            }
        }
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(tmp, dir.join(FILE))
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Whether `key` has a vector made from the text with `digest`.
    pub fn holds(&self, key: &Key, digest: &Digest) -> bool {
        self.by_key.get(key).is_some_and(|(d, _)| d == digest)
    }

    /// Keeps a section's vectors, one a part, in the parts' order.
    pub fn insert(&mut self, key: Key, digest: Digest, parts: Vec<Vec<f32>>) {
        self.by_key.insert(key, (digest, parts));
    }

    /// Drops every vector whose key `keep` refuses; says how many went.
    pub fn retain(&mut self, keep: impl Fn(&Key) -> bool) -> usize {
        let before = self.by_key.len();
        self.by_key.retain(|k, _| keep(k));
        before - self.by_key.len()
    }

    /// The `n` sections nearest `query` (a unit vector), nearest first, each with the cosine
    /// of its nearest part.
    pub fn nearest(&self, query: &[f32], n: usize) -> Vec<(f32, &Key)> {
        let cosine = |v: &Vec<f32>| dot(v, query);
        let mut scored: Vec<(f32, &Key)> = self
            .by_key
            .iter()
            .filter_map(|(k, (_, parts))| {
                parts
                    .iter()
                    .filter(|v| v.len() == query.len())
                    .map(cosine)
                    .reduce(f32::max)
                    .map(|best| (best, k))
            })
            .collect();
        let n = n.min(scored.len());
        if n == 0 {
            return vec![];
        }
        scored.select_nth_unstable_by(n - 1, |a, b| b.0.total_cmp(&a.0));
        scored.truncate(n);
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
        scored
    }
}

/// The dot product of two vectors of one length, summed in eight lanes: a single running sum
/// is one long chain of dependent additions the compiler may not reorder, and a search scores
/// some ten thousand parts.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8
        .remainder()
        .iter()
        .zip(b8.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a8.zip(b8) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

fn write_bytes(out: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    out.write_all(&(bytes.len() as u32).to_le_bytes())?;
    out.write_all(bytes)
}

/// The longest path or model name a file may hold: a damaged length must not allocate gigabytes.
const MAX_NAME: usize = 64 * 1024;

/// The widest vector a file may hold.
const MAX_DIM: usize = 8192;

/// The most parts a file may hold for one section (more than `MAX_PARTS`, so a file written
/// with a larger limit still reads).
const MAX_STORED_PARTS: usize = 256;

fn read(path: &Path) -> std::io::Result<Vectors> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let mut input = std::io::BufReader::new(std::fs::File::open(path)?);
    let mut magic = [0u8; 8];
    input.read_exact(&mut magic)?;
    if &magic != MAGIC {
        let kind = if magic.starts_with(b"DRVEC") {
            std::io::ErrorKind::Unsupported
        } else {
            std::io::ErrorKind::InvalidData
        };
        return Err(std::io::Error::new(
            kind,
            "not a vectors file of this version",
        ));
    }
    let model = read_string(&mut input)?;
    let count = read_u64(&mut input)?;
    let mut by_key = HashMap::new();
    for _ in 0..count {
        let rel = read_string(&mut input)?;
        let ordinal = read_u64(&mut input)?;
        let mut digest = [0u8; 8];
        input.read_exact(&mut digest)?;
        let count = read_u32(&mut input)? as usize;
        if count > MAX_STORED_PARTS {
            return Err(bad("more parts to a section than any pass makes"));
        }
        let mut parts = Vec::with_capacity(count);
        for _ in 0..count {
            let dim = read_u32(&mut input)? as usize;
            if dim > MAX_DIM {
                return Err(bad("a vector wider than any model's"));
            }
            let mut raw = vec![0u8; dim * 4];
            input.read_exact(&mut raw)?;
            parts.push(
                raw.chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            );
        }
        by_key.insert((rel, ordinal), (digest, parts));
    }
    Ok(Vectors { model, by_key })
}

fn read_u32(input: &mut impl Read) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    input.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

fn read_u64(input: &mut impl Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    input.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn read_string(input: &mut impl Read) -> std::io::Result<String> {
    let len = read_u32(input)? as usize;
    if len > MAX_NAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "a name longer than any path",
        ));
    }
    let mut bytes = vec![0u8; len];
    input.read_exact(&mut bytes)?;
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "a name not UTF-8"))
}

/// Reciprocal-rank fusion of ranked lists (k = 60): a section high in any list ranks high,
/// one in several higher. The score a hit carries is its fused score.
pub fn fused<A: PartialEq>(lists: Vec<Vec<(f32, A)>>) -> Vec<(f32, A)> {
    let mut scores: Vec<(f32, A)> = Vec::new();
    for list in lists {
        for (rank, (_, address)) in list.into_iter().enumerate() {
            let add = 1.0 / (RRF_K + rank as f32 + 1.0);
            match scores.iter_mut().find(|(_, a)| *a == address) {
                Some((score, _)) => *score += add,
                None => scores.push((add, address)),
            }
        }
    }
    scores.sort_by(|a, b| b.0.total_cmp(&a.0));
    scores
}

/// The constant of reciprocal-rank fusion: how little the first ranks outweigh the next.
const RRF_K: f32 = 60.0;

/// Characters of a section's body in one part: about what the model reads of a text
/// (`embed::MAX_TOKENS`, 128 tokens) once the title is in front of it.
const PART_CHARS: usize = 440;

/// Parts of one section embedded at most, so its first ≈1,300 characters are read in meaning.
/// Each part is a forward pass of its own: three keep a 3,500-section manual's first pass near
/// five minutes on 2 cores (four took six, for two points of recall); what lies past them is
/// found by words alone.
const MAX_PARTS: usize = 3;

/// Sections embedded between two saves of the vectors, so a long first pass that is stopped
/// keeps most of its work.
const SAVE_EVERY: usize = 512;

/// A section to embed: its key, its parts' digest and the parts.
type Pending = (Key, Digest, Vec<String>);

/// What a section's vectors are made from: its body in parts of about `PART_CHARS`, each cut
/// at a sentence's end (or a space) and led by the title, which says what the part is about.
fn embedded_parts(title: &str, body: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut rest = body.trim();
    loop {
        let part = head_within(rest, PART_CHARS);
        parts.push(format!("{title}\n{part}"));
        rest = rest[part.len()..].trim_start();
        if rest.is_empty() || parts.len() == MAX_PARTS {
            return parts;
        }
    }
}

/// The longest head of `text` within `max` characters that ends a sentence in its second half,
/// else at its last space, else at `max` characters.
fn head_within(text: &str, max: usize) -> &str {
    let Some((cut, _)) = text.char_indices().nth(max) else {
        return text;
    };
    let head = &text[..cut];
    if let Some(end) = head.rfind(". ").filter(|&i| i >= head.len() / 2) {
        return &text[..=end];
    }
    match head.rfind(char::is_whitespace) {
        Some(space) if space > 0 => &text[..space],
        _ => head,
    }
}

/// One digest of a section's parts.
fn parts_digest(parts: &[String]) -> Digest {
    digest(&parts.join("\u{0}"))
}

impl super::Corpus {
    /// Whether this corpus is searched in meaning as well as by words.
    pub fn is_hybrid(&self) -> bool {
        self.embedder.is_some()
    }

    /// Sections with a vector.
    pub fn vectors(&self) -> usize {
        self.vectors.read().map(|v| v.len()).unwrap_or(0)
    }

    /// Makes the vectors the index lacks (new or changed sections) and drops those of sections
    /// gone, then saves them; returns how many were made. Searches go on meanwhile, with the
    /// vectors made so far. Without a model, nothing.
    pub fn embed_pending(&self) -> Result<usize, super::CorpusError> {
        let Some(embedder) = &self.embedder else {
            return Ok(0);
        };
        let err = |message: String| super::CorpusError::Index {
            name: self.name.clone(),
            path: self.index_dir.display().to_string(),
            message,
        };
        let _one_pass = self
            .embedding
            .lock()
            .map_err(|_| err("an embedding pass panicked".into()))?;
        let (present, missing) = self.sections_to_embed().map_err(err)?;
        let dropped = self
            .vectors
            .write()
            .map_err(|_| err("the vectors were poisoned by a panic".into()))?
            .retain(|k| present.contains(k));
        let started = std::time::Instant::now();
        let mut made = 0;
        let mut parts_made = 0;
        for chunk in missing.chunks(SAVE_EVERY) {
            let texts: Vec<&str> = chunk
                .iter()
                .flat_map(|(_, _, parts)| parts.iter().map(String::as_str))
                .collect();
            let mut vectors = embedder
                .embed(&texts)
                .map_err(|e| err(e.to_string()))?
                .into_iter();
            let mut kept = self
                .vectors
                .write()
                .map_err(|_| err("the vectors were poisoned by a panic".into()))?;
            for (key, digest, parts) in chunk {
                let made: Vec<Vec<f32>> = vectors.by_ref().take(parts.len()).collect();
                if made.len() != parts.len() {
                    return Err(err(
                        "the model returned fewer vectors than it was given texts".into(),
                    ));
                }
                kept.insert(key.clone(), *digest, made);
            }
            kept.save(&self.index_dir).map_err(|e| err(e.to_string()))?;
            made += chunk.len();
            parts_made += texts.len();
            tracing::info!(corpus = %self.name, made, of = missing.len(), parts = parts_made,
                secs = started.elapsed().as_secs_f64(), "corpus vectors");
        }
        if made == 0 && dropped > 0 {
            let kept = self
                .vectors
                .read()
                .map_err(|_| err("the vectors were poisoned by a panic".into()))?;
            kept.save(&self.index_dir).map_err(|e| err(e.to_string()))?;
        }
        Ok(made)
    }

    /// `embed_pending`, its failure logged (a background pass has no one to tell).
    pub fn embed_pending_logged(&self) {
        if let Err(e) = self.embed_pending() {
            tracing::warn!(corpus = %self.name, error = %e, "corpus vectors not made");
        }
    }

    /// Every section of the index, and those of them without a vector of their current text.
    fn sections_to_embed(&self) -> Result<(HashSet<Key>, Vec<Pending>), String> {
        let searcher = self.reader.searcher();
        let vectors = self
            .vectors
            .read()
            .map_err(|_| "the vectors were poisoned by a panic".to_owned())?;
        let mut present = HashSet::new();
        let mut missing = Vec::new();
        for (segment, reader) in searcher.segment_readers().iter().enumerate() {
            for doc in reader.doc_ids_alive() {
                let address = tantivy::DocAddress::new(segment as u32, doc);
                let doc: TantivyDocument = searcher.doc(address).map_err(|e| e.to_string())?;
                let text = |f| {
                    doc.get_first(f)
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default()
                };
                let ordinal = doc
                    .get_first(self.fields.ordinal)
                    .and_then(|v| v.as_u64())
                    .unwrap_or_default();
                let key = (text(self.fields.path), ordinal);
                let parts = embedded_parts(&text(self.fields.title), &text(self.fields.body));
                let digest = parts_digest(&parts);
                if !vectors.holds(&key, &digest) {
                    missing.push((key.clone(), digest, parts));
                }
                present.insert(key);
            }
        }
        Ok((present, missing))
    }

    /// The sections nearest `query` in meaning, as a ranked list of the index's documents;
    /// none without a model or vectors.
    pub(super) fn nearest(
        &self,
        searcher: &tantivy::Searcher,
        query: &str,
        n: usize,
    ) -> Result<Option<Vec<(f32, DocAddress)>>, super::CorpusError> {
        let err = |message: String| super::CorpusError::Search {
            name: self.name.clone(),
            message,
        };
        let Some(embedder) = &self.embedder else {
            return Ok(None);
        };
        let keys: Vec<(f32, Key)> = {
            let vectors = self
                .vectors
                .read()
                .map_err(|_| err("the vectors were poisoned by a panic".into()))?;
            if vectors.is_empty() || query.trim().is_empty() {
                return Ok(None);
            }
            // A model server that fails now costs this search its meaning side, not its
            // answer: the words still rank.
            let asked = match embedder.embed(&[query]) {
                Ok(asked) => asked,
                Err(e) => {
                    tracing::warn!(corpus = %self.name, error = %e,
                        "query not embedded: searched by words alone");
                    return Ok(None);
                }
            };
            let Some(asked) = asked.first() else {
                return Ok(None);
            };
            vectors
                .nearest(asked, n)
                .into_iter()
                .map(|(score, key)| (score, key.clone()))
                .collect()
        };
        let mut list = Vec::with_capacity(keys.len());
        for (score, (rel, ordinal)) in keys {
            let section: Vec<(Occur, Box<dyn Query>)> = vec![
                (
                    Occur::Must,
                    Box::new(TermQuery::new(
                        Term::from_field_text(self.fields.path, &rel),
                        IndexRecordOption::Basic,
                    )),
                ),
                (
                    Occur::Must,
                    Box::new(TermQuery::new(
                        Term::from_field_u64(self.fields.ordinal, ordinal),
                        IndexRecordOption::Basic,
                    )),
                ),
            ];
            let found = searcher
                .search(
                    &BooleanQuery::new(section),
                    &TopDocs::with_limit(1).order_by_score(),
                )
                .map_err(|e| err(e.to_string()))?;
            // A vector of a section a refresh has just replaced finds nothing: skipped.
            if let Some((_, address)) = found.first() {
                list.push((score, *address));
            }
        }
        Ok(Some(list))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_survive_a_save_and_another_models_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let mut v = Vectors::empty("m1");
        v.insert(("a.html".into(), 0), digest("alpha"), vec![vec![1.0, 0.0]]);
        v.insert(
            ("b.html".into(), 3),
            digest("beta"),
            vec![vec![0.0, 1.0], vec![0.6, 0.8]],
        );
        v.save(dir.path()).unwrap();
        let back = Vectors::load(dir.path(), "m1");
        assert_eq!(back.len(), 2);
        assert!(back.holds(&("b.html".into(), 3), &digest("beta")));
        assert!(!back.holds(&("b.html".into(), 3), &digest("changed")));
        let near = back.nearest(&[0.9, 0.1], 1);
        assert_eq!(near[0].1, &("a.html".to_string(), 0));
        // b's first part is farther from this query than a, its second nearer: b ranks first.
        let near = back.nearest(&[0.8, 0.6], 2);
        assert_eq!(near[0].1, &("b.html".to_string(), 3));
        assert!((near[0].0 - 0.96).abs() < 1e-6);
        assert!(Vectors::load(dir.path(), "m2").is_empty());
    }

    #[test]
    fn the_dot_product_in_lanes_is_the_plain_one() {
        for len in [0, 3, 8, 13, 384] {
            let a: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..len).map(|i| (i as f32 * 0.11).cos()).collect();
            let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - plain).abs() < 1e-4, "{len}");
        }
    }

    #[test]
    fn a_long_section_is_embedded_in_parts_that_each_carry_its_title() {
        let sentence = "The setting takes effect at the next connection. ";
        let body = sentence.repeat(100);
        let parts = embedded_parts("Client Connection Defaults", &body);
        assert_eq!(parts.len(), MAX_PARTS);
        for part in &parts {
            let (title, text) = part.split_once('\n').unwrap();
            assert_eq!(title, "Client Connection Defaults");
            assert!(text.chars().count() <= PART_CHARS, "{}", text.len());
            assert!(
                text.starts_with("The setting") && text.ends_with("connection."),
                "{text}"
            );
        }
        // A short section is one part, as it was before parts; an empty body still has its title.
        assert_eq!(
            embedded_parts("T", "Short text."),
            vec!["T\nShort text.".to_owned()]
        );
        assert_eq!(embedded_parts("T", ""), vec!["T\n".to_owned()]);
        // No sentence end: cut at a space; no space either: cut at the limit, on a char boundary.
        let words = "wörd ".repeat(200);
        let first = &embedded_parts("T", &words)[0];
        assert!(first.ends_with("wörd"), "{first}");
        let solid = "é".repeat(1000);
        assert_eq!(
            embedded_parts("T", &solid)[0].chars().count(),
            2 + PART_CHARS
        );
    }

    #[test]
    fn a_damaged_vectors_file_is_read_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let mut v = Vectors::empty("m1");
        v.insert(("a.html".into(), 0), digest("alpha"), vec![vec![1.0; 384]]);
        v.save(dir.path()).unwrap();
        let path = dir.path().join(FILE);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 7]).unwrap();
        assert!(Vectors::load(dir.path(), "m1").is_empty());
        // A length that would allocate gigabytes is refused, not trusted.
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(&path, huge).unwrap();
        assert!(Vectors::load(dir.path(), "m1").is_empty());
    }
}
