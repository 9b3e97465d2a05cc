#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests of the shared jobs store (codon-serve, issue #62).
#
#   eval "$(tools/postgres.sh start DIR)"   # a cluster in DIR (new); prints the exports below
#   tools/postgres.sh restart DIR           # an immediate stop (as a crash) and a start on the same port
#   tools/postgres.sh stop DIR              # stops it and removes DIR
#
# Exported by start: CODON_TEST_POSTGRES_URL (postgres://codon:PASSWORD@127.0.0.1:PORT/postgres,
# a superuser, password authentication over TCP with TLS offered) and CODON_TEST_POSTGRES_DIR (DIR).
# The server also listens on a unix socket in DIR. Debian's `postgresql` is installed by apt-get
# when no initdb is found (Debian keeps it in /usr/lib/postgresql/VERSION/bin, off PATH). initdb
# refuses root, so as root the cluster runs as `nobody`.
set -euo pipefail

usage() {
    echo "usage: $0 start|restart|stop DIR" >&2
    exit 2
}
[ $# -eq 2 ] || usage
action=$1
dir=$2

# The folder of initdb and pg_ctl: on PATH, else Debian's newest version.
bin_dir() {
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(command -v pg_ctl)"
        return
    fi
    local newest
    newest=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -n "$newest" ] && [ -x "$newest/initdb" ]; then
        echo "$newest"
    fi
}

# Run a command as the cluster's owner (from /, which any user may enter).
as_owner() {
    if [ "$(id -u)" -eq 0 ]; then
        (cd / && runuser -u nobody -- "$@")
    else
        (cd / && "$@")
    fi
}

pg_options() {
    local port=$1 ssl=off
    [ -f "$dir/server.crt" ] && ssl=on
    # fsync off: a throwaway cluster; a restart below is an immediate stop, which keeps what the
    # operating system holds.
    echo "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir -c fsync=off" \
        "-c ssl=$ssl -c ssl_cert_file=$dir/server.crt -c ssl_key_file=$dir/server.key -c max_connections=200"
}

start() {
    local bin
    bin=$(bin_dir)
    if [ -z "$bin" ]; then
        echo "postgres.sh: installing Debian's postgresql" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >&2
        apt-get install -y -qq --no-install-recommends postgresql openssl >&2
        bin=$(bin_dir)
        [ -n "$bin" ] || { echo "postgres.sh: no initdb after installing postgresql" >&2; exit 1; }
    fi
    [ ! -e "$dir" ] || { echo "postgres.sh: $dir exists; give a new folder" >&2; exit 1; }
    # The password file and the key are the owner's alone.
    umask 077
    mkdir -p "$dir"
    local password
    password=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
    printf '%s\n' "$password" >"$dir/password"
    # A certificate for localhost and 127.0.0.1 signed by a CA of its own (ca.crt), so that TLS is
    # offered, and can be verified as a client would (sslmode=verify-full&sslrootcert=DIR/ca.crt).
    if command -v openssl >/dev/null 2>&1; then
        openssl req -new -x509 -days 2 -nodes -subj /CN=codon-test-ca \
            -keyout "$dir/ca.key" -out "$dir/ca.crt" >/dev/null 2>&1
        openssl req -new -nodes -subj /CN=localhost -keyout "$dir/server.key" -out "$dir/server.csr" >/dev/null 2>&1
        printf '%s\n' "subjectAltName=DNS:localhost,IP:127.0.0.1" "basicConstraints=CA:FALSE" \
            "keyUsage=digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" >"$dir/server.ext"
        openssl x509 -req -days 2 -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
            -extfile "$dir/server.ext" -out "$dir/server.crt" >/dev/null 2>&1
        rm -f "$dir/ca.key" "$dir/server.csr" "$dir/server.ext" "$dir/ca.srl"
        chmod 644 "$dir/ca.crt" "$dir/server.crt"
    fi
    if [ "$(id -u)" -eq 0 ]; then
        chown -R nobody "$dir"
    fi
    # The tests reach the socket and the CA's certificate in the owner's folder.
    chmod 711 "$dir"
    as_owner "$bin/initdb" -D "$dir/data" -U codon --pwfile="$dir/password" --auth-local=trust \
        --auth-host=scram-sha-256 -E UTF8 --locale=C --no-sync --no-instructions >"$dir/initdb.log" 2>&1 || {
        cat "$dir/initdb.log" >&2
        exit 1
    }
    # A free port: a few tries, since another program may take one between the check and the start.
    local port started=
    for _ in 1 2 3 4 5 6 7 8; do
        port=$((20000 + RANDOM % 40000))
        if as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -o "$(pg_options "$port")" start >/dev/null; then
            started=1
            break
        fi
    done
    [ -n "$started" ] || { cat "$dir/server.log" >&2; exit 1; }
    echo "$port" >"$dir/port"
    echo "$bin" >"$dir/bin"
    echo "export CODON_TEST_POSTGRES_URL='postgres://codon:$password@127.0.0.1:$port/postgres'"
    echo "export CODON_TEST_POSTGRES_DIR='$dir'"
}

restart() {
    local bin port
    bin=$(cat "$dir/bin")
    port=$(cat "$dir/port")
    as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -o "$(pg_options "$port")" start >/dev/null
}

stop() {
    if [ -f "$dir/bin" ] && [ -d "$dir/data" ]; then
        as_owner "$(cat "$dir/bin")/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
}

case $action in
start) start ;;
restart) restart ;;
stop) stop ;;
*) usage ;;
esac
