//! The PostgreSQL store's schema: SQLite's two tables (jobs; proteins with their results, keyed
//! by job and index) with the lease's two columns and a byte count, created by the first server
//! on an empty schema and marked with its version. A schema that holds other tables, or jobs of
//! another version, is refused after reading alone.
use deadpool_postgres::Object;

use super::retry::Failure;
use crate::jobs::StoreError;

/// The schema's version, written in the `jobs` table's comment.
pub(super) const SCHEMA_VERSION: i32 = 1;

/// The `jobs` table's comment, before its version: the mark of a jobs database.
const MARK: &str = "codon-serve jobs, schema ";

/// The advisory lock that servers starting together take, so that one creates the tables and
/// the others find them ("CODN" and 1).
const SETUP_LOCK: i64 = 0x434f_444e_0000_0001;

/// The tables, created in one transaction with their mark.
const CREATE: &str = "
    CREATE TABLE jobs (
        id TEXT PRIMARY KEY,
        status TEXT NOT NULL,
        total BIGINT NOT NULL,
        done BIGINT NOT NULL,
        options TEXT NOT NULL,
        error TEXT,
        created BIGINT NOT NULL,
        finished BIGINT,
        bytes BIGINT NOT NULL DEFAULT 0
    );
    CREATE TABLE proteins (
        job TEXT NOT NULL,
        idx BIGINT NOT NULL,
        item TEXT NOT NULL,
        result TEXT,
        claimed_by TEXT,
        claimed_until TIMESTAMPTZ,
        PRIMARY KEY (job, idx)
    );
    CREATE INDEX proteins_open ON proteins (job, idx) WHERE result IS NULL;
    CREATE INDEX proteins_claimed ON proteins (claimed_by) WHERE result IS NULL AND claimed_by IS NOT NULL;
";

/// Check the current schema (the first of the search path) and create the tables in it if it is
/// empty. Another program's tables, or jobs of another version, are refused before anything
/// is written.
pub(super) async fn set_up(client: &mut Object, shown: &str) -> Result<(), Failure> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SETUP_LOCK]).await?;
    let schema: Option<String> = tx.query_one("SELECT current_schema()", &[]).await?.get(0);
    let Some(schema) = schema else {
        return Err(Failure::Store(StoreError::Postgres {
            target: shown.to_string(),
            op: "finding the schema to create the tables in",
            reason: "no schema of the search path exists".into(),
        }));
    };
    // Tables, views, sequences and the like; indexes go with their tables.
    let rows = tx
        .query(
            "SELECT c.relname::text, c.relkind::text, obj_description(c.oid, 'pg_class')
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
             ORDER BY c.relname",
            &[&schema],
        )
        .await?;
    if rows.is_empty() {
        tx.batch_execute(CREATE).await?;
        tx.batch_execute(&format!("COMMENT ON TABLE jobs IS '{MARK}{SCHEMA_VERSION}'")).await?;
        tx.commit().await?;
        return Ok(());
    }
    let tables: Vec<(String, String, Option<String>)> = rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
    let ours =
        tables.len() == 2 && tables.iter().all(|(name, kind, _)| kind == "r" && (name == "jobs" || name == "proteins"));
    let mark = tables.iter().find(|(name, _, _)| name == "jobs").and_then(|(_, _, comment)| comment.as_deref());
    match mark.and_then(|m| m.strip_prefix(MARK)) {
        Some(version) if ours && version == SCHEMA_VERSION.to_string() => Ok(()),
        Some(version) if ours => Err(Failure::Store(StoreError::PostgresVersion {
            target: shown.to_string(),
            found: version.chars().take(20).collect(),
            expected: SCHEMA_VERSION,
        })),
        _ => {
            let mut names: Vec<String> = tables.iter().take(5).map(|(name, _, _)| name.clone()).collect();
            if tables.len() > 5 {
                names.push(format!("and {} more", tables.len() - 5));
            }
            Err(Failure::Store(StoreError::PostgresForeign {
                target: shown.to_string(),
                schema,
                tables: names.join(", "),
            }))
        }
    }
}
