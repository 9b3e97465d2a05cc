//! Models by name from the Hugging Face Hub: `--model adibvafa/CodonTransformer[@revision]`.
//!
//! A path that exists wins over a Hub id of the same spelling. Downloads go through a small
//! client of our own over ureq (the `hf-hub` crate trusted a mirror's headers as cache paths, sent
//! the token along redirects to other hosts, kept short files and failed on a busy lock) into the
//! cache layout of Python's `huggingface_hub` (so a model transformers already
//! fetched is reused without a request), honouring the variables Python users set:
//! `HF_ENDPOINT` (mirrors), `HF_HUB_CACHE` / `HF_HOME`, `HF_HUB_OFFLINE` and `HF_TOKEN`.
//! A snapshot already in the cache is used without any request.
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

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
    /// The endpoint sent something that cannot be trusted as a path or a length.
    #[error("{endpoint} sent an invalid {what} ({value}): refused; check HF_ENDPOINT")]
    Untrusted {
        /// The endpoint.
        endpoint: String,
        /// What it sent (`etag`, `x-repo-commit`, `commit`, `redirect`, `length`).
        what: String,
        /// The value, cut short.
        value: String,
    },
    /// A file's transfer ended before its announced length: nothing was kept.
    #[error("{file}: the download ended after {received} of {expected} bytes; nothing was kept: run again")]
    Short {
        /// File name.
        file: String,
        /// Bytes announced.
        expected: u64,
        /// Bytes received.
        received: u64,
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
        let token = var("HF_TOKEN").map(|t| t.trim().to_string()).filter(|t| !t.is_empty()).or_else(|| {
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
        let ok = part_ok(owner) && part_ok(name) && revision_ok(revision);
        // A commit is spelled in lower case in the cache and by the Hub.
        let revision = if is_commit(revision) { revision.to_ascii_lowercase() } else { revision.to_string() };
        ok.then(|| Self { repo: repo.to_string(), revision })
    }

    /// The repository's folder in the cache (`models--owner--name`).
    fn cache_dir(&self, cache: &Path) -> PathBuf {
        cache.join(format!("models--{}", self.repo.replace('/', "--")))
    }

    /// The cached snapshot of this revision, if it holds a configuration and weights.
    fn cached_snapshot(&self, cache: &Path) -> Option<PathBuf> {
        let dir = self.cache_dir(cache);
        let commit = if is_commit(&self.revision) {
            self.revision.clone()
        } else {
            let commit = std::fs::read_to_string(dir.join("refs").join(&self.revision)).ok()?.trim().to_string();
            // The ref file becomes a path: anything but a commit id is not trusted.
            is_commit(&commit).then_some(commit)?
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

/// Most redirects followed for one file (the Hub sends one, to its CDN).
const MAX_REDIRECTS: usize = 5;
/// Largest JSON answer read from the Hub's API.
const MAX_API_BYTES: u64 = 16 << 20;
/// Largest file taken from the Hub (CodonTransformer's weights are 360 MB).
const MAX_FILE_BYTES: u64 = 64 << 30;

/// Download the configuration and the weights of `model` into the cache; the snapshot folder.
///
/// Everything the endpoint sends is untrusted (`HF_ENDPOINT` is often a third-party mirror):
/// commits and etags become cache paths only when they have the Hub's format (hex), every file
/// is checked against its announced length (and the weights against their sha256), redirects are
/// followed by hand and the token goes only to the endpoint's own origin, and a second process
/// downloading the same model waits for the first.
fn download(model: &HubModel, settings: &HubSettings) -> Result<PathBuf, HubError> {
    let hub = Downloader::new(model, settings);
    let repo_dir = model.cache_dir(&settings.cache);
    let _lock = hub.lock(&settings.cache)?;
    // Another process may have finished this download while this one waited.
    if let Some(snapshot) = model.cached_snapshot(&settings.cache) {
        return Ok(snapshot);
    }
    let info = hub.info()?;
    if is_commit(&model.revision) && info.sha != model.revision {
        return Err(hub.untrusted("commit", &info.sha));
    }
    let weights = WEIGHT_FILES
        .into_iter()
        .find(|w| info.siblings.iter().any(|s| s.rfilename == *w))
        .ok_or_else(|| HubError::NoWeights { repo: model.repo.clone(), revision: model.revision.clone() })?;
    let snapshot = repo_dir.join("snapshots").join(&info.sha);
    for file in [CONFIG_FILE, weights] {
        let etag = hub.fetch(&info.sha, file, &repo_dir.join("blobs"))?;
        link_into_snapshot(&snapshot, file, &etag)?;
    }
    if model.revision != info.sha {
        let refs = repo_dir.join("refs").join(&model.revision);
        let dir = codon_files::parent_dir(&refs);
        std::fs::create_dir_all(dir).map_err(|source| HubError::Io { path: dir.to_path_buf(), source })?;
        codon_files::write_atomically(&refs, |w| std::io::Write::write_all(w, info.sha.as_bytes()))
            .map_err(|e| HubError::Io { path: refs.clone(), source: std::io::Error::other(e.to_string()) })?;
    }
    Ok(snapshot)
}

/// `GET /api/models/{repo}/revision/{revision}`: the commit and the files.
#[derive(Debug, serde::Deserialize)]
struct RepoInfo {
    sha: String,
    siblings: Vec<Sibling>,
}

#[derive(Debug, serde::Deserialize)]
struct Sibling {
    rfilename: String,
}

/// One model's transfers from one endpoint.
struct Downloader<'a> {
    model: &'a HubModel,
    settings: &'a HubSettings,
    agent: ureq::Agent,
}

impl<'a> Downloader<'a> {
    fn new(model: &'a HubModel, settings: &'a HubSettings) -> Self {
        let agent = ureq::AgentBuilder::new()
            .redirects(0)
            .try_proxy_from_env(true)
            .timeout_connect(std::time::Duration::from_secs(20))
            .timeout_read(std::time::Duration::from_secs(60))
            .user_agent(concat!("codon-ascend/", env!("CARGO_PKG_VERSION")))
            .build();
        Self { model, settings, agent }
    }

    /// A transfer failure as the user should read it.
    fn unreachable(&self, detail: impl std::fmt::Display) -> HubError {
        HubError::Unreachable {
            repo: self.model.repo.clone(),
            revision: self.model.revision.clone(),
            endpoint: self.settings.endpoint.clone(),
            cache: self.settings.cache.clone(),
            detail: detail.to_string(),
        }
    }

    /// Something the endpoint sent that this client does not trust.
    fn untrusted(&self, what: &str, value: &str) -> HubError {
        let value: String = value.chars().take(80).collect();
        HubError::Untrusted { endpoint: self.settings.endpoint.clone(), what: what.to_string(), value }
    }

    /// Hold the repository's download lock, waiting (with a message) while another process holds it.
    fn lock(&self, cache: &Path) -> Result<std::fs::File, HubError> {
        let dir = cache.join(".locks");
        std::fs::create_dir_all(&dir).map_err(|source| HubError::Io { path: dir.clone(), source })?;
        let path = dir.join(format!("models--{}.lock", self.model.repo.replace('/', "--")));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|source| HubError::Io { path: path.clone(), source })?;
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) => {
                // Best effort: a closed stderr must not stop the download.
                let _ = writeln!(
                    std::io::stderr(),
                    "waiting for another process downloading {} (lock {})",
                    self.model.repo,
                    path.display()
                );
            }
            Err(std::fs::TryLockError::Error(source)) => return Err(HubError::Io { path, source }),
        }
        file.lock().map_err(|source| HubError::Io { path, source })?;
        Ok(file)
    }

    /// GET `url`, following redirects by hand: the token goes only to the endpoint's own origin.
    /// Also the headers of the last answer from that origin: the Hub's own word on a file's commit,
    /// etag and size (a CDN it redirects to sends etags of its own).
    fn get(&self, url: &str) -> Result<(ureq::Response, HubHeaders), HubError> {
        let own_origin = origin(&self.settings.endpoint);
        if let Some(token) = &self.settings.token {
            // ureq's error for a bad header value would print the token.
            if !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(self.unreachable("HF_TOKEN holds characters an HTTP header cannot carry"));
            }
        }
        let mut url = url.to_string();
        let mut hub_headers = HubHeaders::default();
        for _ in 0..=MAX_REDIRECTS {
            let from_hub = own_origin.is_some() && origin(&url) == own_origin;
            let mut request = self.agent.get(&url);
            if let (Some(token), true) = (&self.settings.token, from_hub) {
                request = request.set("Authorization", &format!("Bearer {token}"));
            }
            let response = match request.call() {
                Ok(response) => response,
                // Only the Hub itself says that a model is missing or needs a token.
                Err(ureq::Error::Status(status @ (401 | 403 | 404), _)) if from_hub => {
                    return Err(HubError::NotFound {
                        repo: self.model.repo.clone(),
                        revision: self.model.revision.clone(),
                        endpoint: self.settings.endpoint.clone(),
                        status,
                    })
                }
                Err(ureq::Error::Status(status, _)) => {
                    return Err(self.unreachable(format!("HTTP {status} from {url}")))
                }
                Err(e) => return Err(self.unreachable(e)),
            };
            if from_hub {
                hub_headers = HubHeaders::of(&response);
            }
            if !(300..400).contains(&response.status()) {
                return Ok((response, hub_headers));
            }
            let location = response.header("location").ok_or_else(|| self.untrusted("redirect", "no location"))?;
            url = url::Url::parse(&url)
                .and_then(|base| base.join(location))
                .ok()
                .filter(|next| next.scheme() == "https" || (next.scheme() == "http" && !url.starts_with("https:")))
                .ok_or_else(|| self.untrusted("redirect", location))?
                .into();
        }
        Err(self.unreachable(format!("more than {MAX_REDIRECTS} redirects")))
    }

    /// The commit the revision names now, and its files.
    fn info(&self) -> Result<RepoInfo, HubError> {
        let url = format!(
            "{}/api/models/{}/revision/{}",
            self.settings.endpoint,
            self.model.repo,
            encode_revision(&self.model.revision)
        );
        let mut body = String::new();
        self.get(&url)?
            .0
            .into_reader()
            .take(MAX_API_BYTES)
            .read_to_string(&mut body)
            .map_err(|e| self.unreachable(e))?;
        let info: RepoInfo = serde_json::from_str(&body).map_err(|_| self.untrusted("repository answer", &body))?;
        if !is_commit(&info.sha) {
            return Err(self.untrusted("commit", &info.sha));
        }
        Ok(info)
    }

    /// Download `file` at `commit` into `blobs` under its etag, unless a blob of that etag is
    /// there; the etag.
    fn fetch(&self, commit: &str, file: &str, blobs: &Path) -> Result<String, HubError> {
        let url = format!("{}/{}/resolve/{commit}/{file}", self.settings.endpoint, self.model.repo);
        let (response, hub) = self.get(&url)?;
        if let Some(sent) = &hub.commit {
            if sent != commit {
                return Err(self.untrusted("x-repo-commit", sent));
            }
        }
        let raw_etag = hub.etag.as_deref().unwrap_or("");
        let etag = normalize_etag(raw_etag).ok_or_else(|| self.untrusted("etag", raw_etag))?;
        let sent_length = announced_length(&response);
        let length = hub.size.or(sent_length).ok_or_else(|| self.untrusted("length", "none"))?;
        if length > MAX_FILE_BYTES {
            return Err(self.untrusted("length", &length.to_string()));
        }
        if sent_length.is_some_and(|sent| sent != length) {
            return Err(self.untrusted("length", &format!("{} against {length}", sent_length.unwrap_or(0))));
        }
        let blob = blobs.join(&etag);
        if blob.is_file() && blob.metadata().is_ok_and(|m| m.len() == length) && blob_matches(&blob, &etag) {
            return Ok(etag);
        }
        std::fs::create_dir_all(blobs).map_err(|source| HubError::Io { path: blobs.to_path_buf(), source })?;
        let io = |source| HubError::Io { path: blobs.to_path_buf(), source };
        let tmp = codon_files::temp_file_in(blobs, &format!("{etag}.incomplete.")).map_err(io)?;
        let bar = (self.settings.progress && length > 1 << 20).then(|| {
            let style = indicatif::ProgressStyle::with_template("{msg} {bar:40} {bytes}/{total_bytes} {eta}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            indicatif::ProgressBar::new(length).with_style(style)
        });
        if let Some(bar) = &bar {
            bar.set_message(file.to_string());
        }
        let mut hasher = Sha256::new();
        let mut reader = response.into_reader().take(length + 1);
        let mut out = std::io::BufWriter::new(tmp.as_file());
        let mut buffer = vec![0u8; 1 << 16];
        let mut received = 0u64;
        loop {
            let n = reader.read(&mut buffer).map_err(|e| self.unreachable(format!("{file}: {e}")))?;
            if n == 0 {
                break;
            }
            hasher.update(&buffer[..n]);
            std::io::Write::write_all(&mut out, &buffer[..n]).map_err(io)?;
            received += n as u64;
            if let Some(bar) = &bar {
                bar.set_position(received);
            }
        }
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        std::io::Write::flush(&mut out).map_err(io)?;
        drop(out);
        if received != length {
            return Err(HubError::Short { file: file.to_string(), expected: length, received });
        }
        let actual: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
        // Large (LFS) files are named by their sha256; small ones by a git object id.
        if etag.len() == 64 && actual != etag {
            return Err(HubError::Checksum {
                repo: self.model.repo.clone(),
                file: file.to_string(),
                expected: etag,
                actual,
            });
        }
        tmp.as_file().sync_all().map_err(io)?;
        tmp.persist(&blob).map_err(|e| io(e.error))?;
        Ok(etag)
    }
}

/// What the Hub itself says of a file (see [`Downloader::get`]).
#[derive(Debug, Default)]
struct HubHeaders {
    /// `x-repo-commit`.
    commit: Option<String>,
    /// `x-linked-etag` (a large file's sha256), else `etag`.
    etag: Option<String>,
    /// `x-linked-size` (a large file's size, sent with its redirect), else the whole length of
    /// this answer's file.
    size: Option<u64>,
}

impl HubHeaders {
    fn of(response: &ureq::Response) -> Self {
        let header = |name| response.header(name).map(str::to_string);
        let linked_size = response.header("x-linked-size").and_then(|s| s.trim().parse().ok());
        let own_size = (response.status() < 300).then(|| announced_length(response)).flatten();
        Self {
            commit: header("x-repo-commit"),
            etag: header("x-linked-etag").or_else(|| header("etag")),
            size: linked_size.or(own_size),
        }
    }
}

/// Whether a cached blob still holds what its name says: a sha256 name is hashed again (a
/// damaged blob is then fetched anew); a git object id cannot be checked this way.
fn blob_matches(blob: &Path, etag: &str) -> bool {
    if etag.len() != 64 {
        return true;
    }
    let Ok(mut file) = std::fs::File::open(blob) else { return false };
    let mut hasher = Sha256::new();
    if std::io::copy(&mut file, &mut hasher).is_err() {
        return false;
    }
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect::<String>() == etag
}

/// `snapshots/<commit>/<file>` as a relative link to `blobs/<etag>`, as Python's cache lays it out.
fn link_into_snapshot(snapshot: &Path, file: &str, etag: &str) -> Result<(), HubError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| HubError::Io { path, source }
    };
    std::fs::create_dir_all(snapshot).map_err(io(snapshot))?;
    let link = snapshot.join(file);
    let target = Path::new("..").join("..").join("blobs").join(etag);
    match std::fs::symlink_metadata(&link) {
        Ok(m) if m.file_type().is_symlink() || m.is_file() => std::fs::remove_file(&link).map_err(io(&link))?,
        Ok(_) => return Err(HubError::Io { path: link, source: std::io::Error::other("not a file or a link") }),
        Err(_) => {}
    }
    #[cfg(unix)]
    std::os::unix::fs::symlink(&target, &link).map_err(io(&link))?;
    #[cfg(not(unix))]
    std::fs::copy(snapshot.join(&target), &link).map(drop).map_err(io(&link))?;
    Ok(())
}

/// A branch, tag or commit name that is safe as a cache path and in a URL: letters, digits,
/// `-`, `_`, `.` and `/` between non-empty parts, with no `..` (so no `?`, `#`, `%` or escape).
fn revision_ok(revision: &str) -> bool {
    revision.len() <= 255
        && revision.split('/').all(|part| !part.is_empty() && !part.starts_with('.') && !part.ends_with(".lock"))
        && !revision.contains("..")
        && revision.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/'))
}

/// A commit id: 40 hex digits.
fn is_commit(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// An etag as the Hub sends it (`"…"`, maybe weak: `W/"…"`), if it is a git object id (40 hex)
/// or a sha256 (64 hex); lower case.
fn normalize_etag(raw: &str) -> Option<String> {
    let etag = raw.trim().trim_start_matches("W/").trim_matches('"');
    (matches!(etag.len(), 40 | 64) && etag.bytes().all(|b| b.is_ascii_hexdigit())).then(|| etag.to_ascii_lowercase())
}

/// The length of a response's whole file: `content-range`'s total, else `content-length`.
fn announced_length(response: &ureq::Response) -> Option<u64> {
    let total = response.header("content-range").and_then(|r| r.rsplit_once('/')).and_then(|(_, t)| t.parse().ok());
    total.or_else(|| response.header("content-length").and_then(|l| l.trim().parse().ok()))
}

/// A URL's origin (scheme, host and port, the default port made explicit), for comparing hosts.
fn origin(url: &str) -> Option<url::Origin> {
    url::Url::parse(url).ok().map(|u| u.origin()).filter(url::Origin::is_tuple)
}

/// A revision in a URL path: a branch such as `refs/pr/1` keeps its slashes encoded.
fn encode_revision(revision: &str) -> String {
    revision.replace('/', "%2F")
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
        assert_eq!(HubModel::parse("o/n@refs/pr/1").unwrap().revision, "refs/pr/1");
        let upper = "ABCDEF0123456789ABCDEF0123456789ABCDEF01";
        assert_eq!(HubModel::parse(&format!("o/n@{upper}")).unwrap().revision, upper.to_ascii_lowercase());
        for revision in
            ["../../../../hub/revtrav", "main?x=1", "main#frag", "a//b", "/main", "main/", "m%2F..", "a b", ".x"]
        {
            assert_eq!(HubModel::parse(&format!("o/n@{revision}")), None, "{revision}");
        }
    }

    #[test]
    fn only_hex_etags_and_commits_become_cache_paths() {
        let sha = "a".repeat(64);
        assert_eq!(normalize_etag(&format!("\"{sha}\"")).as_deref(), Some(sha.as_str()));
        assert_eq!(normalize_etag(&format!("W/\"{}\"", "B".repeat(40))), Some("b".repeat(40)));
        for bad in ["../../../../../../tmp/x/evil", "\"abc\"", "", &"g".repeat(40), &format!("{}/", "a".repeat(40))] {
            assert_eq!(normalize_etag(bad), None, "{bad}");
        }
        assert!(is_commit(&"0".repeat(40)) && !is_commit("../../..") && !is_commit(&"0".repeat(41)));
        let hub = origin("http://127.0.0.1:8000/x");
        assert_eq!(origin("http://127.0.0.1:8000/other"), hub);
        assert_ne!(origin("http://127.0.0.1:8001/x"), hub, "another port is another host");
        assert_eq!(origin("https://huggingface.co/a"), origin("https://huggingface.co:443/b"));
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
