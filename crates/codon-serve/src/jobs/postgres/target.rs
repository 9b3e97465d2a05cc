//! Where the PostgreSQL jobs store is, found as libpq finds it: a `postgres://` URL, with what it
//! leaves out taken from libpq's variables (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE,
//! PGSSLMODE, …) and libpq's defaults, and shown without its password ([`PostgresTarget`]).
use std::path::PathBuf;
use std::time::Duration;

use tokio_postgres::config::Host;

use crate::jobs::StoreError;

/// A PostgreSQL database given as a `postgres://` (or `postgresql://`) URL, as libpq reads one.
/// Its password is never shown: [`std::fmt::Display`] and [`std::fmt::Debug`] write the URL
/// without it.
#[derive(Clone)]
pub struct PostgresTarget {
    /// The URL as given (it may hold a password).
    url: String,
    /// The URL without its password, for messages.
    shown: String,
}

/// How TLS is used (libpq's `sslmode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SslMode {
    /// Never.
    Disable,
    /// When the server offers it, without checking its certificate (libpq's `allow` and
    /// `prefer`).
    Prefer,
    /// Always, without checking the certificate unless a root certificate file exists (then as
    /// `VerifyCa`, as libpq does).
    Require,
    /// Always, the certificate checked against the root certificates.
    VerifyCa,
    /// Always, the certificate checked and its name matched to the host.
    VerifyFull,
}

/// The settings a connection is made with.
pub(crate) struct Settings {
    /// Host, port, user, password, database and the rest, for tokio-postgres.
    pub(crate) config: tokio_postgres::Config,
    /// How TLS is used.
    pub(crate) ssl_mode: SslMode,
    /// The root certificates' file (verify-ca, verify-full; require when it exists).
    pub(crate) root_cert: Option<PathBuf>,
    /// The database without its password, for messages.
    pub(crate) shown: String,
}

/// How long a connection attempt may take unless `connect_timeout` or PGCONNECT_TIMEOUT says.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// TCP keepalive's idle time unless the URL says (libpq's default is the system's, often two
/// hours): a server gone without a word is noticed in about a minute.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);

impl PostgresTarget {
    /// Whether `value` is a PostgreSQL URL (`postgres://` or `postgresql://`).
    pub fn is_url(value: &str) -> bool {
        let lower = value.get(..13).unwrap_or(value).to_ascii_lowercase();
        lower.starts_with("postgres://") || lower.starts_with("postgresql://")
    }

    /// A PostgreSQL URL, its syntax checked (nothing is connected, and libpq's variables are
    /// read only when it is). The error never holds the password.
    pub fn parse(url: &str) -> Result<Self, StoreError> {
        if !Self::is_url(url) {
            return Err(StoreError::PostgresUrl { reason: "give a postgres:// or postgresql:// URL".into() });
        }
        let (config, own) = split(url)?;
        // The mode's word now; its root certificates when connecting (PGSSLROOTCERT may give them).
        ssl_mode(&own, &|_| None)?;
        Ok(Self { url: url.to_string(), shown: show(&config, password_of(url)) })
    }

    /// The connection's settings: the URL's, then libpq's variables (read through `env`) for
    /// what it leaves out, then libpq's defaults.
    pub(crate) fn settings(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Settings, StoreError> {
        let (mut config, own) = split(&self.url)?;
        let (ssl_mode, root_cert) = own_settings(&own, env)?;
        let given = |key: &str| own.present.iter().any(|k| k == key);
        if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
            match (env("PGHOST"), env("PGHOSTADDR")) {
                (Some(hosts), _) => hosts.split(',').for_each(|h| {
                    config.host(h);
                }),
                (None, Some(addrs)) => {
                    for addr in addrs.split(',') {
                        let addr = addr
                            .trim()
                            .parse()
                            .map_err(|_| url_error(format!("PGHOSTADDR {addr:?} is not an IP address")))?;
                        config.hostaddr(addr);
                    }
                }
                // libpq's default: the local server's socket (Debian's folder, else /tmp).
                (None, None) => {
                    let dir = ["/var/run/postgresql", "/tmp"].into_iter().find(|d| std::path::Path::new(d).is_dir());
                    config.host(dir.unwrap_or("localhost"));
                }
            }
        }
        if config.get_ports().is_empty() {
            if let Some(ports) = env("PGPORT") {
                for port in ports.split(',') {
                    let port =
                        port.trim().parse().map_err(|_| url_error(format!("PGPORT {port:?} is not a port number")))?;
                    config.port(port);
                }
            }
        }
        if config.get_user().is_none() {
            let user = env("PGUSER").or_else(|| env("USER")).or_else(|| env("LOGNAME")).ok_or_else(|| {
                url_error("no user: give one in the URL (postgres://USER@HOST/DB) or in PGUSER".into())
            })?;
            config.user(&user);
        }
        if config.get_password().is_none() {
            if let Some(password) = env("PGPASSWORD") {
                config.password(password);
            } else if let Some(password) = super::passfile::lookup(&config, env) {
                config.password(password);
            }
        }
        if config.get_dbname().is_none() {
            if let Some(db) = env("PGDATABASE") {
                config.dbname(&db);
            }
        }
        if config.get_options().is_none() {
            if let Some(options) = env("PGOPTIONS") {
                config.options(&options);
            }
        }
        if config.get_application_name().is_none() {
            config.application_name(env("PGAPPNAME").unwrap_or_else(|| "codon-serve".into()));
        }
        if config.get_connect_timeout().is_none() {
            let secs = env("PGCONNECT_TIMEOUT").and_then(|s| s.trim().parse::<u64>().ok()).filter(|&s| s > 0);
            config.connect_timeout(secs.map_or(CONNECT_TIMEOUT, Duration::from_secs));
        }
        if !given("keepalives_idle") {
            config.keepalives_idle(KEEPALIVE_IDLE);
        }
        if !given("target_session_attrs") {
            match env("PGTARGETSESSIONATTRS").as_deref() {
                Some("read-write") => {
                    config.target_session_attrs(tokio_postgres::config::TargetSessionAttrs::ReadWrite);
                }
                Some("any") | None => {}
                Some(other) => {
                    return Err(url_error(format!("PGTARGETSESSIONATTRS {other:?}: give any or read-write")))
                }
            }
        }
        config.ssl_mode(match ssl_mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => tokio_postgres::config::SslMode::Require,
        });
        let shown = show(&config, None);
        Ok(Settings { config, ssl_mode, root_cert, shown })
    }
}

impl std::fmt::Display for PostgresTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl std::fmt::Debug for PostgresTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("PostgresTarget").field(&self.shown).finish()
    }
}

fn url_error(reason: String) -> StoreError {
    StoreError::PostgresUrl { reason }
}

/// The URL's options that tokio-postgres does not read, and the names of all it gave.
#[derive(Default)]
struct OwnOptions {
    sslmode: Option<String>,
    sslrootcert: Option<String>,
    present: Vec<String>,
}

/// The URL parsed by tokio-postgres, less the options read here (`sslmode`, whose verify-ca and
/// verify-full it refuses, and `sslrootcert`, which it does not know).
fn split(url: &str) -> Result<(tokio_postgres::Config, OwnOptions), StoreError> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut own = OwnOptions::default();
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = decode(key);
        own.present.push(key.clone());
        match key.as_str() {
            "sslmode" => own.sslmode = Some(decode(value)),
            "sslrootcert" => own.sslrootcert = Some(decode(value)),
            _ => kept.push(pair),
        }
    }
    let rest = if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) };
    let config: tokio_postgres::Config = rest.parse().map_err(|e: tokio_postgres::Error| {
        // tokio-postgres names the option, not its value; the password is scrubbed all the same.
        let reason = super::retry::describe(&e);
        url_error(scrub(&reason, password_of(url)))
    })?;
    Ok((config, own))
}

/// `sslmode` and the root certificates' file (URL's `sslrootcert`, then PGSSLROOTCERT, then
/// `~/.postgresql/root.crt` where it exists).
fn own_settings(
    own: &OwnOptions,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(SslMode, Option<PathBuf>), StoreError> {
    let mode = ssl_mode(own, env)?;
    let given = own.sslrootcert.clone().or_else(|| env("PGSSLROOTCERT")).map(PathBuf::from);
    let default = env("HOME").map(|home| PathBuf::from(home).join(".postgresql").join("root.crt"));
    let root = match given {
        Some(path) => Some(path),
        None => default.filter(|p| p.is_file()),
    };
    if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) && root.is_none() {
        return Err(url_error(
            "sslmode verify-ca and verify-full need the root certificates: give sslrootcert=FILE (or PGSSLROOTCERT, or ~/.postgresql/root.crt)".into(),
        ));
    }
    Ok((mode, root))
}

/// `sslmode`: the URL's, then PGSSLMODE, then `prefer`.
fn ssl_mode(own: &OwnOptions, env: &dyn Fn(&str) -> Option<String>) -> Result<SslMode, StoreError> {
    let mode = own.sslmode.clone().or_else(|| env("PGSSLMODE")).unwrap_or_else(|| "prefer".into());
    Ok(match mode.as_str() {
        "disable" => SslMode::Disable,
        "allow" | "prefer" => SslMode::Prefer,
        "require" => SslMode::Require,
        "verify-ca" => SslMode::VerifyCa,
        "verify-full" => SslMode::VerifyFull,
        other => {
            return Err(url_error(format!(
                "sslmode {other:?}: give disable, allow, prefer, require, verify-ca or verify-full"
            )))
        }
    })
}

/// Percent-decoded text (invalid UTF-8 replaced).
fn decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text).decode_utf8_lossy().into_owned()
}

/// The password written in `url`'s user part, decoded, if any.
fn password_of(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let (user_info, _) = authority.rsplit_once('@')?;
    let (_, password) = user_info.split_once(':')?;
    Some(decode(password)).filter(|p| !p.is_empty())
}

/// `text` with `secret` (and its percent-encoded form) replaced by `***`.
fn scrub(text: &str, secret: Option<String>) -> String {
    match secret {
        Some(secret) => {
            let encoded =
                percent_encoding::utf8_percent_encode(&secret, percent_encoding::NON_ALPHANUMERIC).to_string();
            text.replace(&secret, "***").replace(&encoded, "***")
        }
        None => text.to_string(),
    }
}

/// `postgres://USER@HOST:PORT/DB`: never the password.
fn show(config: &tokio_postgres::Config, scrubbed: Option<String>) -> String {
    let ports = config.get_ports();
    let hosts: Vec<String> = if config.get_hosts().is_empty() {
        config.get_hostaddrs().iter().map(|a| if a.is_ipv6() { format!("[{a}]") } else { a.to_string() }).collect()
    } else {
        config
            .get_hosts()
            .iter()
            .map(|h| match h {
                Host::Tcp(name) if name.contains(':') => format!("[{name}]"),
                Host::Tcp(name) => name.clone(),
                #[cfg(unix)]
                Host::Unix(path) => {
                    percent_encoding::utf8_percent_encode(&path.to_string_lossy(), percent_encoding::NON_ALPHANUMERIC)
                        .to_string()
                }
            })
            .collect()
    };
    let hosts: Vec<String> = hosts
        .into_iter()
        .enumerate()
        .map(|(i, h)| match ports.get(i).or(ports.first()) {
            Some(port) => format!("{h}:{port}"),
            None => h,
        })
        .collect();
    let user = config.get_user().map(|u| format!("{u}@")).unwrap_or_default();
    let db = config.get_dbname().unwrap_or("");
    scrub(&format!("postgres://{user}{}/{db}", hosts.join(",")), scrubbed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |key| vars.iter().find(|(k, _)| *k == key).map(|(_, v)| v.to_string())
    }

    #[test]
    fn the_password_is_never_shown() {
        let target = PostgresTarget::parse("postgres://codon:s3cr%40t@db.example:5433/jobs?sslmode=require").unwrap();
        assert_eq!(target.to_string(), "postgres://codon@db.example:5433/jobs");
        assert!(!format!("{target:?}").contains("s3cr"), "{target:?}");
        let settings = target.settings(&env_of(&[])).unwrap();
        assert_eq!(settings.config.get_password(), Some(&b"s3cr@t"[..]));
        assert_eq!(settings.ssl_mode, SslMode::Require);
        assert!(!settings.shown.contains("s3cr"), "{}", settings.shown);
        // A refused option names itself, never the password.
        let refused = PostgresTarget::parse("postgres://codon:hunter2@db/jobs?sslmode=sometimes").unwrap_err();
        assert!(!refused.to_string().contains("hunter2") && refused.to_string().contains("sslmode"), "{refused}");
        let refused = PostgresTarget::parse("postgres://codon:hunter2@db:notaport/jobs").unwrap_err().to_string();
        assert!(!refused.contains("hunter2"), "{refused}");
    }

    #[test]
    fn jobs_db_takes_a_url_or_a_path_and_shows_no_password() {
        use crate::jobs::JobsDb;
        let url = JobsDb::parse(std::ffi::OsStr::new("postgresql://svc:pw0rd@db:5432/jobs")).unwrap();
        assert!(matches!(url, JobsDb::Postgres(_)));
        assert_eq!(url.to_string(), "postgres://svc@db:5432/jobs");
        assert!(!format!("{url:?}").contains("pw0rd"));
        let file = JobsDb::parse(std::ffi::OsStr::new("data/jobs.sqlite3")).unwrap();
        assert!(matches!(file, JobsDb::File(ref p) if p == std::path::Path::new("data/jobs.sqlite3")));
        // A URL that cannot be read is refused now, not taken for a file name.
        assert!(JobsDb::parse(std::ffi::OsStr::new("postgres://svc:pw0rd@db:port/jobs")).is_err());
    }

    #[test]
    fn what_the_url_leaves_out_comes_from_libpqs_variables() {
        let target = PostgresTarget::parse("postgresql:///jobs").unwrap();
        let env = env_of(&[
            ("PGHOST", "pg1.internal,pg2.internal"),
            ("PGPORT", "5433,5434"),
            ("PGUSER", "svc"),
            ("PGPASSWORD", "pw"),
            ("PGDATABASE", "ignored"),
            ("PGSSLMODE", "disable"),
            ("PGCONNECT_TIMEOUT", "3"),
        ]);
        let s = target.settings(&env).unwrap();
        assert_eq!(s.config.get_hosts().len(), 2);
        assert_eq!(s.config.get_ports(), &[5433, 5434]);
        assert_eq!(s.config.get_user(), Some("svc"));
        assert_eq!(s.config.get_password(), Some(&b"pw"[..]));
        assert_eq!(s.config.get_dbname(), Some("jobs"), "the URL's database wins");
        assert_eq!(s.ssl_mode, SslMode::Disable);
        assert_eq!(s.config.get_connect_timeout(), Some(&Duration::from_secs(3)));
        assert_eq!(s.shown, "postgres://svc@pg1.internal:5433,pg2.internal:5434/jobs");
        // The URL's own values win over the variables; prefer is the default.
        let target = PostgresTarget::parse("postgres://me@127.0.0.1:6000/db").unwrap();
        let s = target.settings(&env_of(&[("PGUSER", "svc"), ("PGPORT", "1")])).unwrap();
        assert_eq!((s.config.get_user(), s.config.get_ports()), (Some("me"), &[6000][..]));
        assert_eq!(s.ssl_mode, SslMode::Prefer);
    }

    #[test]
    fn verification_needs_root_certificates_and_unknown_modes_are_refused() {
        let refused = PostgresTarget::parse("postgres://u@h/db?sslmode=verify-full").unwrap().settings(&env_of(&[]));
        assert!(matches!(refused, Err(StoreError::PostgresUrl { .. })));
        let given = PostgresTarget::parse("postgres://u@h/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem").unwrap();
        let s = given.settings(&env_of(&[])).unwrap();
        assert_eq!((s.ssl_mode, s.root_cert), (SslMode::VerifyFull, Some(PathBuf::from("/etc/ca.pem"))));
        assert!(PostgresTarget::parse("postgres://u@h/db?unknown=1").is_err());
        assert!(!PostgresTarget::is_url("/var/lib/jobs.sqlite3"));
        assert!(PostgresTarget::is_url("PostgreSQL://h/db"));
    }
}
