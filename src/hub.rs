//! Models by name from the Hugging Face Hub: `--model adibvafa/CodonTransformer[@revision]`.
//!
//! A path that exists wins over a Hub id of the same spelling. Downloads go through the `hf-hub`
//! crate into the cache layout of Python's `huggingface_hub` (so a model transformers already
//! fetched is reused without a request), honouring the variables Python users set:
//! `HF_ENDPOINT` (mirrors), `HF_HUB_CACHE` / `HF_HOME`, `HF_HUB_OFFLINE` and `HF_TOKEN`.
//! A snapshot already in the cache is used without any request.
use std::io::Read;
use std::path::{Path, PathBuf};

use hf_hub::api::sync::{ApiBuilder, ApiError};
use hf_hub::{Cache, Repo, RepoType};
use sha2::{Digest, Sha256};

/// The published model `predict` uses when no `--model` is given (upstream's `load_model()`).
pub const DEFAULT_MODEL: &str = "adibvafa/CodonTransformer";
/// The pretrained base `finetune` starts from (upstream's `finetune.py`).
pub const DEFAULT_BASE_MODEL: &str = "adibvafa/CodonTransformer-base";

/// The weight files a model folder may hold, in the order they are preferred.
const WEIGHT_FILES: [&str; 2] = ["model.safetensors", "pytorch_model.bin"];
const CONFIG_FILE: &str = "config.json";

/// What went wrong while finding a model on the Hub.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// Neither a local path nor a Hub repository id.
    #[error("--model {0}: no such file or folder, and not a Hub repository id (owner/name[@revision])")]
    NotAModel(String),
    /// Offline (`HF_HUB_OFFLINE`) and not in the cache.
    #[error(
        "{repo}@{revision} is not in the Hub cache {cache} and HF_HUB_OFFLINE is set: unset it to download, \
         or pass a local folder with --model DIR"
    )]
    Offline {
        /// Repository id.
        repo: String,
        /// Revision asked for.
        revision: String,
        /// The cache folder looked in.
        cache: PathBuf,
    },
    /// The Hub answered that the repository or revision does not exist (or needs a token).
    #[error("{repo}@{revision}: {endpoint} has no such model or revision (HTTP {status}); check the name, or set HF_TOKEN for a gated or private model")]
    NotFound {
        /// Repository id.
        repo: String,
        /// Revision asked for.
        revision: String,
        /// The endpoint asked.
        endpoint: String,
        /// HTTP status.
        status: u16,
    },
    /// The Hub could not be reached, and the model is not in the cache.
    #[error(
        "cannot download {repo}@{revision} from {endpoint} ({detail}); it is not in the Hub cache {cache}: \
         check the network or HF_ENDPOINT, or pass a local folder with --model DIR"
    )]
    Unreachable {
        /// Repository id.
        repo: String,
        /// Revision asked for.
        revision: String,
        /// The endpoint asked.
        endpoint: String,
        /// The cache folder looked in.
        cache: PathBuf,
        /// What the transfer reported.
        detail: String,
    },
    /// The repository holds no weight file this project reads.
    #[error("{repo}@{revision} has no {} file", WEIGHT_FILES.join(" or "))]
    NoWeights {
        /// Repository id.
        repo: String,
        /// Revision.
        revision: String,
    },
    /// A downloaded file does not hash to the sha256 the Hub sent as its etag.
    #[error("{file} of {repo} does not match the sha256 the Hub sent ({expected}, got {actual}): removed; run again")]
    Checksum {
        /// Repository id.
        repo: String,
        /// File name.
        file: String,
        /// The etag.
        expected: String,
        /// What the file hashes to.
        actual: String,
    },
    /// A file of the cache could not be read or removed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Where and how to reach the Hub: read from the environment as Python's `huggingface_hub` reads it.
#[derive(Debug, Clone)]
pub struct HubSettings {
    /// `HF_ENDPOINT`, default `https://huggingface.co`.
    pub endpoint: String,
    /// `HF_HUB_CACHE`, else `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`.
    pub cache: PathBuf,
    /// `HF_HUB_OFFLINE` set to 1, ON, YES or TRUE.
    pub offline: bool,
    /// `HF_TOKEN`, else the token file `huggingface-cli login` writes.
    pub token: Option<String>,
    /// Show a progress bar while downloading.
    pub progress: bool,
}

impl HubSettings {
    /// The settings of this process's environment.
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let hf_home = var("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            let cache_home = var("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(var("HOME").unwrap_or_else(|| "/tmp".into())).join(".cache"));
            cache_home.join("huggingface")
        });
        let cache = var("HF_HUB_CACHE").or_else(|| var("HUGGINGFACE_HUB_CACHE")).map(PathBuf::from);
        let cache = cache.unwrap_or_else(|| hf_home.join("hub"));
        let offline = var("HF_HUB_OFFLINE")
            .is_some_and(|v| matches!(v.to_ascii_uppercase().as_str(), "1" | "ON" | "YES" | "TRUE"));
        let token = var("HF_TOKEN").or_else(|| {
            std::fs::read_to_string(hf_home.join("token")).ok().map(|t| t.trim().to_string()).filter(|t| !t.is_empty())
        });
        Self {
            endpoint: var("HF_ENDPOINT")
                .unwrap_or_else(|| "https://huggingface.co".into())
                .trim_end_matches('/')
                .into(),
            cache,
            offline,
            token,
            progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        }
    }
}

/// A Hub repository id with its revision (`owner/name@revision`, default `main`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubModel {
    /// `owner/name`.
    pub repo: String,
    /// Branch, tag or commit.
    pub revision: String,
}

impl HubModel {
    /// Parse `owner/name[@revision]`; `None` for anything else.
    pub fn parse(spec: &str) -> Option<Self> {
        let (repo, revision) = match spec.rsplit_once('@') {
            Some((repo, revision)) if !revision.is_empty() => (repo, revision),
            Some(_) => return None,
            None => (spec, "main"),
        };
        let (owner, name) = repo.split_once('/')?;
        let part_ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 96
                && !s.starts_with(['.', '-'])
                && !s.contains("..")
                && !s.contains("--")
                && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        (part_ok(owner) && part_ok(name)).then(|| Self { repo: repo.to_string(), revision: revision.to_string() })
    }

    /// The repository's folder in the cache (`models--owner--name`).
    fn cache_dir(&self, cache: &Path) -> PathBuf {
        cache.join(format!("models--{}", self.repo.replace('/', "--")))
    }

    /// The cached snapshot of this revision, if it holds a configuration and weights.
    fn cached_snapshot(&self, cache: &Path) -> Option<PathBuf> {
        let dir = self.cache_dir(cache);
        let is_commit = self.revision.len() == 40 && self.revision.chars().all(|c| c.is_ascii_hexdigit());
        let commit = if is_commit {
            self.revision.clone()
        } else {
            std::fs::read_to_string(dir.join("refs").join(&self.revision)).ok()?.trim().to_string()
        };
        let snapshot = dir.join("snapshots").join(commit);
        let complete = snapshot.join(CONFIG_FILE).is_file() && WEIGHT_FILES.iter().any(|w| snapshot.join(w).is_file());
        complete.then_some(snapshot)
    }
}

/// The model folder `--model` names: the path itself when it exists, else a Hub model from the
/// cache or downloaded into it.
pub fn resolve_model(spec: &Path) -> Result<PathBuf, HubError> {
    resolve_model_with(spec, &HubSettings::from_env())
}

/// [`resolve_model`] with explicit settings.
pub fn resolve_model_with(spec: &Path, settings: &HubSettings) -> Result<PathBuf, HubError> {
    if spec.exists() {
        return Ok(spec.to_path_buf());
    }
    let text = spec.to_string_lossy();
    let model = HubModel::parse(&text).ok_or_else(|| HubError::NotAModel(text.to_string()))?;
    if let Some(snapshot) = model.cached_snapshot(&settings.cache) {
        return Ok(snapshot);
    }
    if settings.offline {
        return Err(HubError::Offline { repo: model.repo, revision: model.revision, cache: settings.cache.clone() });
    }
    download(&model, settings)
}

/// Download the configuration and the weights of `model` into the cache; the snapshot folder.
fn download(model: &HubModel, settings: &HubSettings) -> Result<PathBuf, HubError> {
    let transfer_error = |e: ApiError| match e {
        ApiError::RequestError(boxed) if matches!(*boxed, ureq::Error::Status(..)) => {
            let status = match *boxed {
                ureq::Error::Status(code, _) => code,
                _ => 0,
            };
            HubError::NotFound {
                repo: model.repo.clone(),
                revision: model.revision.clone(),
                endpoint: settings.endpoint.clone(),
                status,
            }
        }
        other => HubError::Unreachable {
            repo: model.repo.clone(),
            revision: model.revision.clone(),
            endpoint: settings.endpoint.clone(),
            cache: settings.cache.clone(),
            detail: other.to_string(),
        },
    };
    let api = ApiBuilder::from_cache(Cache::new(settings.cache.clone()))
        .with_endpoint(settings.endpoint.clone())
        .with_token(settings.token.clone())
        .with_progress(settings.progress)
        .build()
        .map_err(transfer_error)?;
    let repo = api.repo(Repo::with_revision(model.repo.clone(), RepoType::Model, model.revision.clone()));
    let info = repo.info().map_err(transfer_error)?;
    let weights = WEIGHT_FILES
        .into_iter()
        .find(|w| info.siblings.iter().any(|s| s.rfilename == *w))
        .ok_or_else(|| HubError::NoWeights { repo: model.repo.clone(), revision: model.revision.clone() })?;
    let config = repo.get(CONFIG_FILE).map_err(transfer_error)?;
    let weights_path = repo.get(weights).map_err(transfer_error)?;
    verify_sha256(model, weights, &weights_path)?;
    Ok(config.parent().map_or_else(|| model.cache_dir(&settings.cache), Path::to_path_buf))
}

/// Large (LFS) files are stored under their sha256, which the Hub sends as the etag: hash the
/// downloaded file against it, and remove it (blob and snapshot link) if it differs.
fn verify_sha256(model: &HubModel, file: &str, pointer: &Path) -> Result<(), HubError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| HubError::Io { path, source }
    };
    let blob = std::fs::canonicalize(pointer).map_err(io(pointer))?;
    let Some(expected) = blob.file_name().and_then(|n| n.to_str()).map(str::to_ascii_lowercase) else {
        return Ok(());
    };
    if expected.len() != 64 || !expected.chars().all(|c| c.is_ascii_hexdigit()) {
        return Ok(()); // a git object id (small files): not a sha256 of the content
    }
    let mut hasher = Sha256::new();
    let mut reader = std::fs::File::open(&blob).map_err(io(&blob))?;
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = reader.read(&mut buffer).map_err(io(&blob))?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    let actual: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
    if actual == expected {
        return Ok(());
    }
    std::fs::remove_file(pointer).map_err(io(pointer))?;
    std::fs::remove_file(&blob).map_err(io(&blob))?;
    Err(HubError::Checksum { repo: model.repo.clone(), file: file.to_string(), expected, actual })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_ids_and_revisions_parse_and_paths_do_not() {
        let m = HubModel::parse("adibvafa/CodonTransformer-base@v1.0").unwrap();
        assert_eq!((m.repo.as_str(), m.revision.as_str()), ("adibvafa/CodonTransformer-base", "v1.0"));
        assert_eq!(HubModel::parse("adibvafa/CodonTransformer").unwrap().revision, "main");
        for not_an_id in ["model", "./ckpt/step-36", "/abs/dir", "a/b/c", "a/", "/b", "a/b@", "a/../b", "a/--b"] {
            assert_eq!(HubModel::parse(not_an_id), None, "{not_an_id}");
        }
    }

    #[test]
    fn an_existing_path_wins_over_a_hub_id_of_the_same_spelling() {
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("owner/name");
        std::fs::create_dir_all(&local).unwrap();
        let settings = HubSettings {
            endpoint: "http://127.0.0.1:9".into(),
            cache: dir.path().join("cache"),
            offline: true,
            token: None,
            progress: false,
        };
        assert_eq!(resolve_model_with(&local, &settings).unwrap(), local);
        let err = resolve_model_with(Path::new("owner/name"), &settings).unwrap_err();
        assert!(matches!(err, HubError::Offline { .. }), "{err}");
    }
}
