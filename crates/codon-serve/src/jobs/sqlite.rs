//! The jobs in an SQLite file ([`SqliteJobStore`]): its schema, size cap and transactions.
use super::*;

/// The jobs in an SQLite file (WAL mode; one transaction per part). Nothing of a job is kept in
/// memory: its proteins and results are read back from the file when needed.
pub struct SqliteJobStore {
    connection: Mutex<Connection>,
    /// The file's size cap, bytes.
    max_bytes: u64,
}

/// The default database: `$XDG_DATA_HOME/codon/jobs.sqlite3`, else
/// `~/.local/share/codon/jobs.sqlite3` (the platform's data folder elsewhere).
pub fn default_db_path() -> Option<PathBuf> {
    dirs::data_dir().map(|dir| dir.join("codon").join("jobs.sqlite3"))
}

fn query(op: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
    move |source| StoreError::Query { op, source }
}

/// SQLite's answer when another connection holds the file.
fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
}

/// SQLite's answer when a write would take the file past its page cap.
fn is_full(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::DiskFull))
}

/// What a path that is not a regular file is, in words.
fn kind_of(metadata: &std::fs::Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = metadata.file_type();
        if t.is_char_device() || t.is_block_device() {
            return "a device";
        }
        if t.is_fifo() {
            return "a pipe";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if metadata.is_dir() {
        "a folder"
    } else {
        "not a plain file"
    }
}

/// Create the folders of `folder` missing, private to their owner (0700 on Unix).
fn create_folder(folder: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(folder)
}

/// Make `path` readable and writable by its owner alone (0600 on Unix), when it exists.
fn make_private(path: &Path) -> Result<(), StoreError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let Ok(metadata) = std::fs::metadata(path) else { return Ok(()) };
        if metadata.is_file() && metadata.permissions().mode() & 0o077 != 0 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(|source| StoreError::Permissions { path: path.to_path_buf(), source })?;
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// `path` with `suffix` added to its file name (`jobs.sqlite3-wal`).
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

impl SqliteJobStore {
    /// Open (or create, with its folder) the jobs database at `path`, of at most `max_bytes`.
    /// Only the server holds it while it runs: a second server on the same file is refused at
    /// once ([`StoreError::Held`]). Nothing is written to a file that is not a jobs database,
    /// nor to anything but a regular file; a new file (and its `-wal` and `-shm`) is readable
    /// by its owner alone.
    pub fn open(path: &Path, max_bytes: u64) -> Result<Self, StoreError> {
        match std::fs::metadata(path) {
            Ok(metadata) if !metadata.is_file() => {
                return Err(StoreError::NotAFile { path: path.to_path_buf(), kind: kind_of(&metadata) })
            }
            Ok(_) => {}
            Err(_) => {
                if let Some(folder) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    create_folder(folder).map_err(|source| StoreError::Folder { path: path.to_path_buf(), source })?;
                }
                // Created here, private: SQLite gives its -wal and -shm the database's mode.
                let mut options = std::fs::OpenOptions::new();
                options.write(true).create_new(true);
                #[cfg(unix)]
                std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
                match options.open(path) {
                    Ok(_) => {}
                    // Another process made it meanwhile: checked below like any file.
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(source) => return Err(StoreError::Folder { path: path.to_path_buf(), source }),
                }
            }
        }
        let open = |source| StoreError::Open { path: path.to_path_buf(), source };
        let connection = Connection::open(path).map_err(open)?;
        // Another server's lock is an answer at once, not after five seconds.
        connection.busy_timeout(Duration::ZERO).map_err(open)?;
        // Exclusive: a second server on the file would run the same jobs twice. The lock is
        // taken by the first read below and kept.
        connection.pragma_update(None, "locking_mode", "EXCLUSIVE").map_err(open)?;
        // Read before anything is written: another program's file is left as it was.
        Self::check(&connection, path)?;
        for file in [path.to_path_buf(), with_suffix(path, "-wal"), with_suffix(path, "-shm")] {
            make_private(&file)?;
        }
        let mode: String = connection.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).map_err(|e| {
            if is_busy(&e) {
                StoreError::Held { path: path.to_path_buf() }
            } else {
                open(e)
            }
        })?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(open(rusqlite::Error::InvalidParameterName(format!("journal mode {mode}, not WAL"))));
        }
        // WAL with NORMAL survives a killed process (not a power cut), at a fraction of FULL's cost.
        connection.pragma_update(None, "synchronous", "NORMAL").map_err(open)?;
        connection.pragma_update(None, "journal_size_limit", WAL_LIMIT_BYTES).map_err(open)?;
        Self::set_up(connection, path, max_bytes)
    }

    /// A private database in a temporary file that goes when the store is dropped (jobs do not
    /// survive the server), of at most `max_bytes`.
    pub fn temporary(max_bytes: u64) -> Result<Self, StoreError> {
        let path = Path::new("");
        let connection = Connection::open(path).map_err(|source| StoreError::Open { path: path.into(), source })?;
        Self::set_up(connection, path, max_bytes)
    }

    /// Check, by reading alone, that the file is a jobs database or empty: another program's
    /// database, or one another server holds, is refused.
    fn check(connection: &Connection, path: &Path) -> Result<(), StoreError> {
        let failed = |e: rusqlite::Error| {
            if is_busy(&e) {
                StoreError::Held { path: path.to_path_buf() }
            } else {
                StoreError::Open { path: path.to_path_buf(), source: e }
            }
        };
        let app: i32 = connection.query_row("PRAGMA application_id", [], |r| r.get(0)).map_err(failed)?;
        let version: i32 = connection.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(failed)?;
        let objects: i64 =
            connection.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0)).map_err(failed)?;
        // Someone else's database: leave it alone.
        if (app != 0 && app != APPLICATION_ID) || (app == 0 && objects > 0) {
            return Err(StoreError::Foreign { path: path.to_path_buf() });
        }
        if app == APPLICATION_ID && version != SCHEMA_VERSION {
            let why = format!("schema version {version}; this server reads version {SCHEMA_VERSION}");
            return Err(failed(rusqlite::Error::InvalidParameterName(why)));
        }
        Ok(())
    }

    fn set_up(mut connection: Connection, path: &Path, max_bytes: u64) -> Result<Self, StoreError> {
        let open = |source| StoreError::Open { path: path.to_path_buf(), source };
        let tx = connection.transaction_with_behavior(TransactionBehavior::Exclusive).map_err(|e| {
            if is_busy(&e) {
                StoreError::Held { path: path.to_path_buf() }
            } else {
                open(e)
            }
        })?;
        if tx.query_row("PRAGMA application_id", [], |r| r.get::<_, i32>(0)).map_err(open)? != APPLICATION_ID {
            let objects: i64 = tx.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0)).map_err(open)?;
            if objects > 0 {
                return Err(StoreError::Foreign { path: path.to_path_buf() });
            }
        }
        tx.execute_batch(&format!(
            "CREATE TABLE IF NOT EXISTS jobs (
                 id TEXT PRIMARY KEY,
                 status TEXT NOT NULL,
                 total INTEGER NOT NULL,
                 done INTEGER NOT NULL,
                 options TEXT NOT NULL,
                 error TEXT,
                 created INTEGER NOT NULL,
                 finished INTEGER
             );
             CREATE TABLE IF NOT EXISTS proteins (
                 job TEXT NOT NULL,
                 idx INTEGER NOT NULL,
                 item TEXT NOT NULL,
                 result TEXT,
                 PRIMARY KEY (job, idx)
             ) WITHOUT ROWID;
             PRAGMA application_id = {APPLICATION_ID};
             PRAGMA user_version = {SCHEMA_VERSION};"
        ))
        .map_err(open)?;
        tx.commit().map_err(open)?;
        // The cap as SQLite's own: a write past it fails (SQLITE_FULL) rather than grow the
        // file. A file already larger keeps its size (SQLite sets no cap below it).
        let page_size: i64 = connection.query_row("PRAGMA page_size", [], |r| r.get(0)).map_err(open)?;
        let pages = (max_bytes / page_size.max(512) as u64).clamp(1, i64::MAX as u64) as i64;
        let _: i64 =
            connection.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |r| r.get(0)).map_err(open)?;
        Ok(Self { connection: Mutex::new(connection), max_bytes })
    }

    fn connection(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.connection.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Drop the jobs finished before `before` (seconds), with their proteins.
fn drop_finished_before(tx: &rusqlite::Transaction<'_>, before: i64) -> Result<usize, StoreError> {
    tx.execute(
        "DELETE FROM proteins WHERE job IN (SELECT id FROM jobs WHERE finished IS NOT NULL AND finished < ?1)",
        [before],
    )
    .map_err(query("dropping expired jobs"))?;
    tx.execute("DELETE FROM jobs WHERE finished IS NOT NULL AND finished < ?1", [before])
        .map_err(query("dropping expired jobs"))
}

/// Drop job `id` with its proteins.
fn drop_job(tx: &rusqlite::Transaction<'_>, id: &str) -> Result<(), StoreError> {
    tx.execute("DELETE FROM proteins WHERE job = ?1", [id]).map_err(query("dropping a job"))?;
    tx.execute("DELETE FROM jobs WHERE id = ?1", [id]).map_err(query("dropping a job"))?;
    Ok(())
}

/// Drop the finished job that finished first (never `except`); whether there was one.
fn drop_oldest_finished(tx: &rusqlite::Transaction<'_>, except: &str) -> Result<bool, StoreError> {
    let oldest: Option<String> = tx
        .query_row(
            "SELECT id FROM jobs WHERE finished IS NOT NULL AND id != ?1 ORDER BY finished, rowid LIMIT 1",
            [except],
            |r| r.get(0),
        )
        .optional()
        .map_err(query("finding the oldest finished job"))?;
    match oldest {
        Some(id) => drop_job(tx, &id).map(|()| true),
        None => Ok(false),
    }
}

/// Bytes the database's pages in use take (free pages excluded).
fn used_bytes(tx: &rusqlite::Transaction<'_>) -> Result<u64, StoreError> {
    let read = |pragma: &str| tx.query_row(pragma, [], |r| r.get::<_, i64>(0)).map_err(query("measuring the database"));
    let pages = read("PRAGMA page_count")? - read("PRAGMA freelist_count")?;
    Ok(pages.max(0) as u64 * read("PRAGMA page_size")?.max(0) as u64)
}

impl SqliteJobStore {
    /// Save a new job in `tx`, making room first.
    fn insert_job(
        &self,
        tx: &rusqlite::Transaction<'_>,
        options: &str,
        items: &[String],
    ) -> Result<String, StoreError> {
        drop_finished_before(tx, now_secs() - keep_secs())?;
        loop {
            let held: i64 =
                tx.query_row("SELECT count(*) FROM jobs", [], |r| r.get(0)).map_err(query("counting jobs"))?;
            if (held as usize) < MAX_JOBS {
                break;
            }
            if !drop_oldest_finished(tx, "")? {
                return Err(StoreError::TooManyJobs);
            }
        }
        // The job's rows take about twice their text (the table and its key); the rest of
        // the room is for results, which make room again as they come if need be.
        let needed = 2 * items.iter().map(|i| i.len() as u64 + 16).sum::<u64>();
        while used_bytes(tx)?.saturating_add(needed) > self.max_bytes {
            if !drop_oldest_finished(tx, "")? {
                return Err(StoreError::Full { cap: self.max_bytes });
            }
        }
        let id = loop {
            let id = new_id(items.len());
            let taken: bool = tx
                .query_row("SELECT EXISTS (SELECT 1 FROM jobs WHERE id = ?1)", [&id], |r| r.get(0))
                .map_err(query("choosing an id"))?;
            if !taken {
                break id;
            }
        };
        let full = |op| {
            let cap = self.max_bytes;
            move |e: rusqlite::Error| if is_full(&e) { StoreError::Full { cap } } else { query(op)(e) }
        };
        tx.execute(
            "INSERT INTO jobs (id, status, total, done, options, created) VALUES (?1, 'running', ?2, 0, ?3, ?4)",
            params![id, items.len() as i64, options, now_secs()],
        )
        .map_err(full("saving a job"))?;
        let mut insert = tx
            .prepare("INSERT INTO proteins (job, idx, item) VALUES (?1, ?2, ?3)")
            .map_err(query("saving a job's proteins"))?;
        for (i, item) in items.iter().enumerate() {
            insert.execute(params![id, i as i64, item]).map_err(full("saving a job's proteins"))?;
        }
        Ok(id)
    }

    /// Save a part's results in `tx`.
    fn save_results(
        tx: &rusqlite::Transaction<'_>,
        id: &str,
        first: usize,
        results: &[String],
    ) -> Result<Recorded, rusqlite::Error> {
        let status: Option<String> =
            tx.query_row("SELECT status FROM jobs WHERE id = ?1", [id], |r| r.get(0)).optional()?;
        match status.as_deref() {
            Some("running") => {}
            // Finished by another run of its parts: every result was there already.
            Some("done") => return Ok(Recorded::of(results.len(), 0)),
            _ => return Ok(Recorded::default()),
        }
        let mut saved = 0;
        {
            let mut update =
                tx.prepare("UPDATE proteins SET result = ?1 WHERE job = ?2 AND idx = ?3 AND result IS NULL")?;
            for (i, text) in results.iter().enumerate() {
                saved += update.execute(params![text, id, (first + i) as i64])?;
            }
        }
        tx.execute("UPDATE jobs SET done = done + ?1 WHERE id = ?2", params![saved as i64, id])?;
        tx.execute(
            "UPDATE jobs SET status = 'done', finished = ?1 WHERE id = ?2 AND status = 'running' AND done >= total",
            params![now_secs(), id],
        )?;
        Ok(Recorded::of(results.len(), saved))
    }
}

impl JobStore for SqliteJobStore {
    fn create(&self, options: &serde_json::Value, proteins: &[JobProtein]) -> Result<String, StoreError> {
        let options =
            serde_json::to_string(options).map_err(|source| StoreError::Json { op: "saving the options", source })?;
        let items = proteins
            .iter()
            .map(|p| serde_json::to_string(p).map_err(|source| StoreError::Json { op: "saving a protein", source }))
            .collect::<Result<Vec<String>, _>>()?;
        let mut connection = self.connection();
        let tx = connection.transaction().map_err(query("starting a job"))?;
        // Dropped, and so rolled back, on an error: the jobs made room for stay.
        let id = self.insert_job(&tx, &options, &items)?;
        tx.commit().map_err(query("saving a job"))?;
        Ok(id)
    }

    fn next_part(&self, id: &str, from: usize, bounds: PartBounds) -> Result<Option<PartInput>, StoreError> {
        let connection = self.connection();
        let options: Option<String> = connection
            .query_row("SELECT options FROM jobs WHERE id = ?1 AND status = 'running'", [id], |r| r.get(0))
            .optional()
            .map_err(query("reading a job"))?;
        let Some(options) = options else { return Ok(None) };
        let first: Option<i64> = connection
            .query_row(
                "SELECT min(idx) FROM proteins WHERE job = ?1 AND idx >= ?2 AND result IS NULL",
                params![id, from.min(i64::MAX as usize) as i64],
                |r| r.get(0),
            )
            .map_err(query("reading a part"))?;
        let Some(first) = first else { return Ok(None) };
        let options = serde_json::from_str(&options)
            .map_err(|source| StoreError::Json { op: "reading a job's options", source })?;
        let mut select = connection
            .prepare(
                "SELECT idx, item, result IS NULL FROM proteins WHERE job = ?1 AND idx >= ?2 ORDER BY idx LIMIT ?3",
            )
            .map_err(query("reading a part"))?;
        let mut rows =
            select.query(params![id, first, bounds.proteins.max(1) as i64]).map_err(query("reading a part"))?;
        let (mut proteins, mut residues) = (Vec::new(), 0usize);
        while let Some(row) = rows.next().map_err(query("reading a part"))? {
            let (idx, item, open): (i64, String, bool) = (
                row.get(0).map_err(query("reading a part"))?,
                row.get(1).map_err(query("reading a part"))?,
                row.get(2).map_err(query("reading a part"))?,
            );
            if !open || idx != first + proteins.len() as i64 {
                break;
            }
            let protein: JobProtein =
                serde_json::from_str(&item).map_err(|source| StoreError::Json { op: "reading a protein", source })?;
            let n = residues_of(&protein);
            if !proteins.is_empty() && residues + n > bounds.residues {
                break;
            }
            residues += n;
            proteins.push(protein);
        }
        Ok(Some(PartInput { options, first: first as usize, proteins }))
    }

    fn record_part(&self, id: &str, first: usize, results: &[ProteinResult]) -> Result<Recorded, StoreError> {
        let texts = results
            .iter()
            .map(|r| serde_json::to_string(r).map_err(|source| StoreError::Json { op: "saving a result", source }))
            .collect::<Result<Vec<String>, _>>()?;
        let mut connection = self.connection();
        // A full database makes room by dropping the finished jobs that finished first, one at
        // a time, and tries again.
        loop {
            let tx = connection.transaction().map_err(query("saving a part"))?;
            match Self::save_results(&tx, id, first, &texts) {
                Ok(saved) => return tx.commit().map(|()| saved).map_err(query("saving a part")),
                Err(e) if is_full(&e) => {
                    drop(tx);
                    let tx = connection.transaction().map_err(query("saving a part"))?;
                    if !drop_oldest_finished(&tx, id)? {
                        return Err(StoreError::Full { cap: self.max_bytes });
                    }
                    tx.commit().map_err(query("making room"))?;
                }
                Err(e) => return Err(query("saving a part")(e)),
            }
        }
    }

    fn fail(&self, id: &str, error: &str) -> Result<(), StoreError> {
        self.connection()
            .execute(
                "UPDATE jobs SET status = 'failed', error = ?1, finished = ?2 WHERE id = ?3 AND status = 'running'",
                params![error, now_secs(), id],
            )
            .map_err(query("failing a job"))?;
        Ok(())
    }

    fn cancel(&self, id: &str) -> Result<Option<JobStatus>, StoreError> {
        let mut connection = self.connection();
        let tx = connection.transaction().map_err(query("cancelling a job"))?;
        let status: Option<String> = tx
            .query_row("SELECT status FROM jobs WHERE id = ?1", [id], |r| r.get(0))
            .optional()
            .map_err(query("cancelling a job"))?;
        let Some(status) = status.map(|s| JobStatus::parse(&s)) else { return Ok(None) };
        if status == JobStatus::Running {
            tx.execute(
                "UPDATE jobs SET status = 'cancelled', error = 'cancelled', finished = ?1 WHERE id = ?2",
                params![now_secs(), id],
            )
            .map_err(query("cancelling a job"))?;
        } else {
            drop_job(&tx, id)?;
        }
        tx.commit().map_err(query("cancelling a job"))?;
        Ok(Some(status))
    }

    fn report(&self, id: &str) -> Result<Option<JobReport>, StoreError> {
        let expired_before = now_secs() - keep_secs();
        self.connection()
            .query_row(
                "SELECT status, done, total, error FROM jobs WHERE id = ?1 AND (finished IS NULL OR finished >= ?2)",
                params![id, expired_before],
                |r| {
                    Ok(JobReport {
                        id: id.to_string(),
                        status: JobStatus::parse(&r.get::<_, String>(0)?),
                        done: r.get::<_, i64>(1)? as usize,
                        total: r.get::<_, i64>(2)? as usize,
                        offset: None,
                        results: None,
                        next_offset: None,
                        error: r.get(3)?,
                    })
                },
            )
            .optional()
            .map_err(query("reading a job"))
    }

    fn results_page(&self, id: &str, offset: usize, limit: usize) -> Result<ResultsPage, StoreError> {
        let connection = self.connection();
        let total: Option<i64> = connection
            .query_row("SELECT total FROM jobs WHERE id = ?1", [id], |r| r.get(0))
            .optional()
            .map_err(query("reading a job"))?;
        let Some(total) = total else { return Ok(ResultsPage::default()) };
        let mut select = connection
            .prepare("SELECT result FROM proteins WHERE job = ?1 AND idx >= ?2 ORDER BY idx LIMIT ?3")
            .map_err(query("reading results"))?;
        let mut rows = select
            .query(params![id, offset.min(i64::MAX as usize) as i64, limit.min(MAX_PAGE) as i64])
            .map_err(query("reading results"))?;
        let (mut results, mut bytes) = (Vec::new(), 0);
        while let Some(row) = rows.next().map_err(query("reading results"))? {
            // A protein without a result (the job stopped before it) reads as its error.
            let text: String = row
                .get::<_, Option<String>>(0)
                .map_err(query("reading results"))?
                .unwrap_or_else(|| NOT_PREDICTED.to_string());
            bytes += text.len();
            results.push(text);
            if bytes >= MAX_PAGE_BYTES {
                break;
            }
        }
        let end = offset.saturating_add(results.len());
        let next_offset = (end < total as usize && !results.is_empty()).then_some(end);
        Ok(ResultsPage { results, next_offset })
    }

    fn unfinished(&self) -> Result<Vec<String>, StoreError> {
        let connection = self.connection();
        let mut select = connection
            .prepare("SELECT id FROM jobs WHERE status = 'running' ORDER BY rowid")
            .map_err(query("listing unfinished jobs"))?;
        let rows = select.query_map([], |r| r.get::<_, String>(0)).map_err(query("listing unfinished jobs"))?;
        rows.collect::<Result<Vec<String>, _>>().map_err(query("listing unfinished jobs"))
    }

    fn expire(&self) -> Result<usize, StoreError> {
        let mut connection = self.connection();
        let tx = connection.transaction().map_err(query("dropping expired jobs"))?;
        let n = drop_finished_before(&tx, now_secs() - keep_secs())?;
        tx.commit().map_err(query("dropping expired jobs"))?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proteins(n: usize) -> Vec<JobProtein> {
        (0..n).map(|_| JobProtein { protein: "MKV".into(), organism: 51.into(), dna: None }).collect()
    }

    fn result() -> ProteinResult {
        ProteinResult { sequences: Vec::new(), error: Some("x".into()) }
    }

    fn store() -> SqliteJobStore {
        SqliteJobStore::temporary(MAX_DB_BYTES).unwrap()
    }

    const EIGHT: PartBounds = PartBounds { proteins: 8, residues: 1000 };

    #[test]
    fn a_job_is_done_when_every_protein_has_its_result() {
        let store = store();
        let options = serde_json::json!({"match_protein": true});
        let id = store.create(&options, &proteins(10)).unwrap();
        assert_ne!(store.create(&options, &proteins(3)).unwrap(), id, "ids differ");
        let part = store.next_part(&id, 8, EIGHT).unwrap().unwrap();
        assert_eq!((part.first, part.proteins.len(), &part.options), (8, 2, &options));
        assert!(store.next_part(&id, 10, EIGHT).unwrap().is_none());
        assert_eq!(store.unfinished().unwrap()[0], id);
        assert_eq!(store.record_part(&id, 8, &[result(), result()]).unwrap(), Recorded { saved: 2, already_saved: 0 });
        // The same part saved twice counts once.
        assert_eq!(store.record_part(&id, 8, &[result(), result()]).unwrap(), Recorded { saved: 0, already_saved: 2 });
        let r = store.report(&id).unwrap().unwrap();
        assert_eq!((r.status, r.done, r.total, r.results.is_none()), (JobStatus::Running, 2, 10, true));
        // Saved proteins are skipped: the part from 0 stops where saved results begin.
        assert_eq!(
            store.next_part(&id, 0, PartBounds { proteins: 100, residues: 1000 }).unwrap().unwrap().proteins.len(),
            8
        );
        assert!(store.next_part(&id, 8, EIGHT).unwrap().is_none());
        store.record_part(&id, 0, &vec![result(); 8]).unwrap();
        let r = store.report(&id).unwrap().unwrap();
        assert_eq!((r.status, r.done), (JobStatus::Done, 10));
        // A part run again after its job was done: nothing saved, all of it counted as repeated.
        assert_eq!(store.record_part(&id, 0, &vec![result(); 8]).unwrap(), Recorded { saved: 0, already_saved: 8 });
        let page = store.results_page(&id, 3, 4).unwrap();
        assert_eq!((page.results.len(), page.next_offset), (4, Some(7)));
        let last = store.results_page(&id, 7, 100).unwrap();
        assert_eq!((last.results.len(), last.next_offset), (3, None));
        let parsed: ProteinResult = serde_json::from_str(&last.results[0]).unwrap();
        assert_eq!(parsed, result());
        assert!(store.report("nope").unwrap().is_none());
        assert_eq!(store.unfinished().unwrap().len(), 1, "the other job");
    }

    #[test]
    fn a_part_is_bounded_in_proteins_and_residues() {
        let store = store();
        let lengths = [300, 300, 300, 900, 2000, 10, 10];
        let items: Vec<JobProtein> =
            lengths.iter().map(|&n| JobProtein { protein: "M".repeat(n), organism: 51.into(), dna: None }).collect();
        let id = store.create(&serde_json::json!({}), &items).unwrap();
        let bounds = PartBounds { proteins: 8, residues: 1000 };
        let mut parts = Vec::new();
        let mut from = 0;
        while let Some(part) = store.next_part(&id, from, bounds).unwrap() {
            from = part.first + part.proteins.len();
            parts.push(part.proteins.iter().map(|p| p.protein.len()).collect::<Vec<_>>());
            assert!(parts.len() < 10);
        }
        // A protein over the residue bound is a part of its own.
        assert_eq!(parts, vec![vec![300, 300, 300], vec![900], vec![2000], vec![10, 10]]);
        let two = PartBounds { proteins: 2, residues: 100_000 };
        assert_eq!(store.next_part(&id, 0, two).unwrap().unwrap().proteins.len(), 2);
    }

    #[test]
    fn a_cancelled_job_takes_no_more_results_and_keeps_its_own() {
        let store = store();
        let id = store.create(&serde_json::json!({}), &proteins(4)).unwrap();
        store.record_part(&id, 0, &[result(), result()]).unwrap();
        assert_eq!(store.cancel(&id).unwrap(), Some(JobStatus::Running));
        assert!(store.next_part(&id, 0, EIGHT).unwrap().is_none(), "no part of a cancelled job runs");
        store.record_part(&id, 2, &[result(), result()]).unwrap();
        let r = store.report(&id).unwrap().unwrap();
        assert_eq!((r.status, r.done), (JobStatus::Cancelled, 2));
        let page = store.results_page(&id, 0, 10).unwrap();
        assert_eq!(page.results.len(), 4);
        assert!(page.results[3].contains("not predicted"), "{}", page.results[3]);
        assert!(store.unfinished().unwrap().is_empty());
        // A finished job is deleted.
        assert_eq!(store.cancel(&id).unwrap(), Some(JobStatus::Cancelled));
        assert!(store.report(&id).unwrap().is_none());
        assert_eq!(store.cancel(&id).unwrap(), None);
    }

    #[test]
    fn a_full_store_drops_its_oldest_finished_job_and_refuses_only_when_all_run() {
        let store = store();
        let options = serde_json::json!({});
        let first = store.create(&options, &proteins(1)).unwrap();
        store.record_part(&first, 0, &[result()]).unwrap();
        let running: Vec<String> = (1..MAX_JOBS).map(|_| store.create(&options, &proteins(1)).unwrap()).collect();
        assert!(store.create(&options, &proteins(1)).is_ok(), "the finished job makes room");
        assert!(store.report(&first).unwrap().is_none());
        assert!(
            matches!(store.create(&options, &proteins(1)), Err(StoreError::TooManyJobs)),
            "every job held is running"
        );
        assert!(running.iter().all(|id| store.report(id).unwrap().is_some()));
    }

    #[test]
    fn the_size_cap_drops_finished_jobs_and_then_refuses() {
        let store = SqliteJobStore::temporary(800_000).unwrap();
        let big: Vec<JobProtein> =
            (0..100).map(|_| JobProtein { protein: "M".repeat(3000), organism: 51.into(), dna: None }).collect();
        let first = store.create(&serde_json::json!({}), &big).unwrap();
        store.cancel(&first).unwrap();
        // 300 kB of proteins are counted as 600 kB: a second job fits in 800 kB only once the
        // finished first one goes, and a third not at all while the second runs.
        let second = store.create(&serde_json::json!({}), &big).unwrap();
        assert!(store.report(&first).unwrap().is_none(), "the finished job made room");
        let third = store.create(&serde_json::json!({}), &big);
        assert!(matches!(third, Err(StoreError::Full { .. })), "{third:?}");
        assert!(store.report(&second).unwrap().is_some());
    }
}
