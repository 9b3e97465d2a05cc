//! libpq's password file (`PGPASSFILE`, else `~/.pgpass`): the password for a connection whose
//! URL and PGPASSWORD give none, so that a password need not be on the command line.
use std::path::PathBuf;

use tokio_postgres::config::Host;

/// The password the file holds for `config`'s first host, port, database and user: the first
/// line whose five fields (`host:port:database:user:password`, `*` for any) match. A file that
/// others may read is ignored, as libpq ignores it.
pub(super) fn lookup(config: &tokio_postgres::Config, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let path =
        env("PGPASSFILE").map(PathBuf::from).or_else(|| env("HOME").map(|home| PathBuf::from(home).join(".pgpass")))?;
    let metadata = std::fs::metadata(&path).ok()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if !metadata.is_file() || metadata.permissions().mode() & 0o077 != 0 {
            return None;
        }
    }
    #[cfg(not(unix))]
    if !metadata.is_file() {
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(name)) => name.clone(),
        // libpq matches a socket connection to `localhost`.
        #[cfg(unix)]
        Some(Host::Unix(_)) => "localhost".to_string(),
        None => config.get_hostaddrs().first().map(ToString::to_string)?,
    };
    let port = config.get_ports().first().copied().unwrap_or(5432).to_string();
    let user = config.get_user()?;
    let db = config.get_dbname().unwrap_or(user);
    let wanted = [host.as_str(), port.as_str(), db, user];
    text.lines().filter(|l| !l.trim_start().starts_with('#')).find_map(|line| {
        let fields = fields(line);
        if fields.len() != 5 {
            return None;
        }
        let matches = fields.iter().zip(wanted).all(|(field, value)| field == "*" || field == value);
        matches.then(|| fields[4].clone())
    })
}

/// A line's `:`-separated fields, `\` escaping the next character.
fn fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => fields.last_mut().into_iter().for_each(|f| f.extend(chars.next())),
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut().into_iter().for_each(|f| f.push(c)),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_matching_line_gives_the_password_and_a_readable_file_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pgpass");
        std::fs::write(&file, "# comment\nother:5432:*:codon:no\ndb.example:*:jobs:codon:pa\\:ss\n*:*:*:*:any\n")
            .unwrap();
        let path = file.to_string_lossy().into_owned();
        let env = move |key: &str| (key == "PGPASSFILE").then(|| path.clone());
        let config: tokio_postgres::Config = "postgres://codon@db.example:6000/jobs".parse().unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
            assert_eq!(lookup(&config, &env), None, "a file others can read is ignored");
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        assert_eq!(lookup(&config, &env).as_deref(), Some("pa:ss"));
        let elsewhere: tokio_postgres::Config = "postgres://someone@host/db".parse().unwrap();
        assert_eq!(lookup(&elsewhere, &env).as_deref(), Some("any"));
    }
}
