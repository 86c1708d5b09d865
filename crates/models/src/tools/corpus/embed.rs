//! The sentence-embedding model behind hybrid corpus search: a BERT-family encoder in the
//! sentence-transformers layout (`config.json`, `tokenizer.json`, `model.safetensors`; for
//! example all-MiniLM-L6-v2), run in-process on the CPU with candle. A text's vector is the
//! mean of its tokens' last hidden states, scaled to length 1, so a dot product is a cosine.
//!
//! Built only with the `embeddings` feature; without it `Embedder::load` says so, and corpora
//! are searched by words alone.

use std::path::Path;

/// Why a model could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("embedding model {path}: {message}")]
    Load { path: String, message: String },
    #[error("embedding failed: {0}")]
    Run(String),
}

/// Texts embedded in one forward pass: larger batches pad more and gain little on a CPU.
const BATCH: usize = 16;

/// Tokens of a text the model reads (the tokenizer truncates there): a section's title and
/// opening, which is what it is about. More costs time linearly and the model was tuned on
/// short passages.
const MAX_TOKENS: usize = 128;

/// A loaded model, or a model server's.
pub struct Embedder {
    /// The model's directory, or `provider:model`.
    label: String,
    /// What the vectors were made with: a stored vector from another model is never compared.
    identity: String,
    backend: Backend,
}

enum Backend {
    #[cfg(feature = "embeddings")]
    InProcess(Box<runtime::Model>),
    Server(super::remote::Remote),
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("model", &self.label)
            .field("identity", &self.identity)
            .finish()
    }
}

impl Embedder {
    /// Loads the model in `dir` (a directory, or its `model.safetensors`).
    pub fn load(path: &Path) -> Result<Self, EmbedError> {
        let dir = if path.is_file() {
            path.parent().unwrap_or(path).to_path_buf()
        } else {
            path.to_path_buf()
        };
        let load_err = |message: String| EmbedError::Load {
            path: dir.display().to_string(),
            message,
        };
        let identity = identity(&dir).map_err(load_err)?;
        #[cfg(feature = "embeddings")]
        {
            let inner = runtime::Model::load(&dir, MAX_TOKENS).map_err(load_err)?;
            Ok(Self {
                label: dir.display().to_string(),
                identity,
                backend: Backend::InProcess(Box::new(inner)),
            })
        }
        #[cfg(not(feature = "embeddings"))]
        {
            let _ = identity;
            Err(load_err(
                "this build has no embedding runtime (built without the `embeddings` feature); \
                 remove [search.local] embedding_model to search by words alone"
                    .into(),
            ))
        }
    }

    /// `model` as served by `provider` (`name` in `[providers]`) at its `/embeddings`.
    pub fn served(
        name: &str,
        provider: crate::llm::ProviderConfig,
        model: &str,
    ) -> Result<Self, EmbedError> {
        use sha2::Digest;
        let label = format!("{name}:{model}");
        // The server's address and the model's name: the same name elsewhere may be other
        // weights, so moving the server embeds again.
        let digest = sha2::Sha256::digest(format!("served\0{}\0{model}", provider.base_url));
        let identity = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
        let remote =
            super::remote::Remote::start(provider, model).map_err(|message| EmbedError::Load {
                path: label.clone(),
                message,
            })?;
        Ok(Self {
            label,
            identity,
            backend: Backend::Server(remote),
        })
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The model's directory, or `provider:model`.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// One unit-length vector a text, in order. Many texts are embedded by one worker a core,
    /// each taking every other batch: candle spreads only the matrix products over the cores,
    /// and the rest of a forward pass (attention's softmax, layer norms, GELU) would otherwise
    /// keep one core busy and leave the others idle.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if let Backend::Server(remote) = &self.backend {
            return remote.embed(texts).map_err(EmbedError::Run);
        }
        // Texts of like length side by side: a batch is padded to its longest text, and a
        // short text batched with long ones would cost as much as they do.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let sorted: Vec<&str> = order.iter().map(|&i| texts[i]).collect();
        let made = self.embed_on_every_core(&sorted)?;
        if made.len() != texts.len() {
            return Err(EmbedError::Run(format!(
                "{} vectors for {} texts",
                made.len(),
                texts.len()
            )));
        }
        let mut out = vec![Vec::new(); texts.len()];
        for (slot, vector) in order.into_iter().zip(made) {
            out[slot] = vector;
        }
        Ok(out)
    }

    /// `texts` embedded in order, one worker a core.
    fn embed_on_every_core(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let batches: Vec<&[&str]> = texts.chunks(BATCH).collect();
        let workers = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .min(MAX_WORKERS)
            .min(batches.len());
        if workers <= 1 {
            let mut out = Vec::with_capacity(texts.len());
            for batch in batches {
                out.extend(self.embed_batch(batch)?);
            }
            return Ok(out);
        }
        let done: Vec<Result<Numbered, EmbedError>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..workers)
                .map(|w| {
                    let batches = &batches;
                    s.spawn(move || {
                        let mut mine = Vec::new();
                        for (i, batch) in batches.iter().enumerate().skip(w).step_by(workers) {
                            mine.push((i, self.embed_batch(batch)?));
                        }
                        Ok(mine)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(EmbedError::Run("an embedding worker panicked".into()))
                    })
                })
                .collect()
        });
        let mut numbered = Vec::with_capacity(batches.len());
        for worker in done {
            numbered.extend(worker?);
        }
        numbered.sort_by_key(|(i, _)| *i);
        Ok(numbered.into_iter().flat_map(|(_, v)| v).collect())
    }

    fn embed_batch(&self, batch: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        match &self.backend {
            #[cfg(feature = "embeddings")]
            Backend::InProcess(model) => model.embed(batch).map_err(EmbedError::Run),
            Backend::Server(remote) => remote.embed(batch).map_err(EmbedError::Run),
        }
    }
}

/// A worker's batches, each with its place among all the batches.
type Numbered = Vec<(usize, Vec<Vec<f32>>)>;

/// Threads one `embed` call uses at most: past the cores they only contend.
const MAX_WORKERS: usize = 4;

/// The model's identity: its configuration and tokenizer, and the weights' size (hashing 90 MB
/// of weights at every start would cost more than it tells).
fn identity(dir: &Path) -> Result<String, String> {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    for name in ["config.json", "tokenizer.json"] {
        let bytes = std::fs::read(dir.join(name)).map_err(|e| format!("{name}: {e}"))?;
        hash.update(&bytes);
    }
    let weights = std::fs::metadata(dir.join("model.safetensors"))
        .map_err(|e| format!("model.safetensors: {e}"))?;
    hash.update(weights.len().to_le_bytes());
    let digest = hash.finalize();
    Ok(digest[..12].iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(feature = "embeddings")]
mod runtime {
    use candle_core::{DType, Device, Tensor};
    use candle_nn::VarBuilder;
    use candle_transformers::models::bert::{BertModel, Config};
    use std::path::Path;
    use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

    pub struct Model {
        bert: BertModel,
        tokenizer: Tokenizer,
    }

    impl Model {
        pub fn load(dir: &Path, max_tokens: usize) -> Result<Self, String> {
            let config = std::fs::read_to_string(dir.join("config.json"))
                .map_err(|e| format!("config.json: {e}"))?;
            let config: Config =
                serde_json::from_str(&config).map_err(|e| format!("config.json: {e}"))?;
            let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
                .map_err(|e| format!("tokenizer.json: {e}"))?;
            // The file pads every text to its fixed length; a batch needs only its longest.
            tokenizer.with_padding(Some(PaddingParams {
                strategy: PaddingStrategy::BatchLongest,
                ..Default::default()
            }));
            tokenizer
                .with_truncation(Some(TruncationParams {
                    max_length: max_tokens,
                    ..Default::default()
                }))
                .map_err(|e| format!("tokenizer.json: {e}"))?;
            // Read, not mapped: a file changed under a mapping is undefined behaviour.
            let weights = std::fs::read(dir.join("model.safetensors"))
                .map_err(|e| format!("model.safetensors: {e}"))?;
            let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
                .map_err(|e| format!("model.safetensors: {e}"))?;
            let bert = BertModel::load(vb, &config)
                .map_err(|e| format!("not a BERT model this runtime reads: {e}"))?;
            Ok(Self { bert, tokenizer })
        }

        pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
            if texts.is_empty() {
                return Ok(vec![]);
            }
            let owned: Vec<String> = texts.iter().map(|t| (*t).to_owned()).collect();
            let encoded = self
                .tokenizer
                .encode_batch(owned, true)
                .map_err(|e| e.to_string())?;
            let column = |f: fn(&tokenizers::Encoding) -> &[u32]| {
                let rows: Vec<Vec<u32>> = encoded.iter().map(|e| f(e).to_vec()).collect();
                Tensor::new(rows, &Device::Cpu)
            };
            let run = || -> candle_core::Result<Vec<Vec<f32>>> {
                let ids = column(tokenizers::Encoding::get_ids)?;
                let mask = column(tokenizers::Encoding::get_attention_mask)?;
                let types = ids.zeros_like()?;
                let hidden = self.bert.forward(&ids, &types, Some(&mask))?;
                // Mean over the real tokens, not the padding.
                let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
                let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
                let mean = summed.broadcast_div(&mask.sum(1)?)?;
                let norm = mean.sqr()?.sum_keepdim(1)?.sqrt()?;
                mean.broadcast_div(&norm)?.to_vec2()
            };
            run().map_err(|e| e.to_string())
        }
    }
}
