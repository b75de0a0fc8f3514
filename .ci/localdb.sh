#!/usr/bin/env bash
# Start (idempotently) a project-private MariaDB/MySQL server whose data lives
# under the project directory, and print exactly one line on stdout: the
# go-sql-driver DSN to reach it without a database name, e.g.
#
#     root@tcp(127.0.0.1:3307)/
#
# All diagnostics go to stderr.
#
# Usage:
#     .ci/localdb.sh               start (if needed) and print the DSN
#     .ci/localdb.sh start DB      same, but also create database DB if it is
#                                  missing and print the DSN including it,
#                                  e.g. root@tcp(127.0.0.1:3307)/DB
#     .ci/localdb.sh stop          shut the server down cleanly (if it runs)
#
# Environment:
#     FEED_LOCAL_DB_DIR   data directory      (default: $ROOT/.data/mysql, or
#                                             $ROOT/.data/mysql-PORT off 3307)
#     FEED_LOCAL_DB_PORT  TCP port            (default: 3307)
#     FEED_INBOX_ENGINE   rocksdb: start the server with deploy/rocksdb.cnf
#                         (MyRocks, installing mariadb-plugin-rocksdb when
#                         missing); a server already running without MyRocks
#                         is an error
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PORT="${FEED_LOCAL_DB_PORT:-3307}"
HOST=127.0.0.1
RUNDIR="$ROOT/.data"
# Run files for the default port are .data/mysql.{sock,pid,err}; other ports
# get their own (.data/mysql-3399.sock, ...) so that servers do not collide.
NAME=mysql
[ "$PORT" = 3307 ] || NAME="mysql-$PORT"
DATADIR="${FEED_LOCAL_DB_DIR:-$RUNDIR/$NAME}"
ROCKSDB=
case "${FEED_INBOX_ENGINE:-innodb}" in
[Rr][Oo][Cc][Kk][Ss][Dd][Bb]) ROCKSDB=1 ;;
esac
SOCKET="$RUNDIR/$NAME.sock"
PIDFILE="$RUNDIR/$NAME.pid"
ERRLOG="$RUNDIR/$NAME.err"
INSTALL_LOG="$RUNDIR/$NAME-install-db.log"
DSN="root@tcp($HOST:$PORT)/"

log() { printf 'localdb: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# Unix socket paths are limited to ~107 bytes; fall back to /tmp for deep
# checkouts (the server is only ever reached over TCP by the project anyway).
if [ "${#SOCKET}" -gt 100 ]; then
    SOCKET="/tmp/feed-localdb-$PORT.sock"
fi

find_bin() {
    # find_bin name... -> first one found on PATH or in /usr/sbin, /usr/bin
    local n p
    for n in "$@"; do
        if p="$(command -v "$n" 2>/dev/null)"; then
            printf '%s\n' "$p"
            return 0
        fi
        for p in /usr/sbin/"$n" /usr/bin/"$n" /usr/local/sbin/"$n" /usr/local/bin/"$n"; do
            if [ -x "$p" ]; then
                printf '%s\n' "$p"
                return 0
            fi
        done
    done
    return 1
}

ADMIN="$(find_bin mariadb-admin mysqladmin || true)"
CLIENT="$(find_bin mariadb mysql || true)"

# alive: does something answer on $HOST:$PORT?
alive() {
    if [ -n "$ADMIN" ]; then
        "$ADMIN" --no-defaults -h"$HOST" -P"$PORT" -uroot --connect-timeout=2 ping >/dev/null 2>&1 && return 0
    fi
    # Plain TCP check (a server that rejects our credentials still counts).
    timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$PORT" >/dev/null 2>&1
}

# can_login: can root log in over TCP with an empty password?
can_login() {
    [ -n "$CLIENT" ] || return 0
    "$CLIENT" --no-defaults -h"$HOST" -P"$PORT" -uroot --connect-timeout=5 -e 'select 1' >/dev/null 2>&1
}

pid_of_server() {
    local pid
    [ -f "$PIDFILE" ] || return 1
    pid="$(cat "$PIDFILE" 2>/dev/null || true)"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    printf '%s\n' "$pid"
}

stop_server() {
    local pid i
    pid="$(pid_of_server || true)"
    if ! alive && [ -z "$pid" ]; then
        log "no server running on $HOST:$PORT"
        return 0
    fi
    log "stopping server on $HOST:$PORT"
    if [ -n "$ADMIN" ]; then
        "$ADMIN" --no-defaults -h"$HOST" -P"$PORT" -uroot shutdown >&2 ||
            log "mariadb-admin shutdown failed"
    fi
    for ((i = 0; i < 60; i++)); do
        if [ -n "$pid" ]; then
            kill -0 "$pid" 2>/dev/null || break
        else
            alive || break
        fi
        sleep 1
    done
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        log "server (pid $pid) still running after 60 s; sending SIGTERM"
        kill "$pid" 2>/dev/null || true
        for ((i = 0; i < 30; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 1
        done
        kill -0 "$pid" 2>/dev/null && die "server (pid $pid) did not stop"
    fi
    log "stopped"
}

# finish: create the requested database (if any), print the DSN and exit.
finish() {
    if [ -n "$DBNAME" ]; then
        [ -n "$CLIENT" ] || die "mariadb client not found; cannot create database $DBNAME"
        "$CLIENT" --no-defaults -h"$HOST" -P"$PORT" -uroot \
            -e "CREATE DATABASE IF NOT EXISTS \`$DBNAME\`" >&2 ||
            die "could not create database $DBNAME on $HOST:$PORT"
    fi
    printf '%s%s\n' "$DSN" "$DBNAME"
    exit 0
}

DBNAME=
case "${1:-start}" in
stop)
    stop_server
    exit 0
    ;;
start)
    DBNAME="${2:-}"
    case "$DBNAME" in
    *[!A-Za-z0-9_]*) die "invalid database name: $DBNAME" ;;
    esac
    ;;
*)
    die "usage: $0 [start [DBNAME] | stop]"
    ;;
esac

# has_rocksdb: does the running server have the MyRocks engine?
has_rocksdb() {
    [ -n "$CLIENT" ] || return 0
    [ "$("$CLIENT" --no-defaults -h"$HOST" -P"$PORT" -uroot --connect-timeout=5 -N \
        -e "SELECT COUNT(*) FROM information_schema.ENGINES WHERE ENGINE = 'ROCKSDB' AND SUPPORT IN ('YES', 'DEFAULT')" 2>/dev/null)" = 1 ]
}

# ready: the running server will do; print the DSN.
ready() {
    can_login || log "warning: a server answers on $HOST:$PORT but root cannot log in with an empty password"
    if [ -n "$ROCKSDB" ] && ! has_rocksdb; then
        die "the server on $HOST:$PORT runs without MyRocks; stop it (.ci/localdb.sh stop, or make db-stop) and run again with FEED_INBOX_ENGINE=rocksdb"
    fi
    finish
}

# 1. Already running? Just print the DSN.
if alive; then
    ready
fi

# Serialise concurrent starts (e.g. two `make test` at once) and re-check.
mkdir -p "$RUNDIR"
if command -v flock >/dev/null 2>&1; then
    exec 9>"$RUNDIR/$NAME.lock"
    flock -w 180 9 || die "timed out waiting for $RUNDIR/$NAME.lock"
    if alive; then
        ready
    fi
fi

# apt_install installs Debian packages, keeping their postinst from failing
# when it cannot start or restart the system service (containers without
# an init): only the files are needed. Returns apt-get's status.
apt_install() {
    local policy=/usr/sbin/policy-rc.d added= rc=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod +x "$policy"
        added=1
    fi
    {
        apt-get update -qq &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
    } >&2 || rc=$?
    # If a postinst still bailed out, finish configuring what it can.
    if [ "$rc" -ne 0 ]; then
        log "apt-get install returned $rc; trying dpkg --configure -a"
        DEBIAN_FRONTEND=noninteractive dpkg --configure -a >&2 || true
    fi
    [ -z "$added" ] || rm -f "$policy"
    return "$rc"
}

# 2. Make sure the server binaries exist.
MARIADBD="$(find_bin mariadbd mysqld || true)"
INSTALL_DB="$(find_bin mariadb-install-db mysql_install_db || true)"
if [ -z "$MARIADBD" ]; then
    if [ "$(id -u)" -ne 0 ]; then
        die "mariadbd not found: install mariadb-server (Debian) or set FEED_MYSQL_DSN / FEED_TEST_MYSQL_DSN"
    fi
    command -v apt-get >/dev/null 2>&1 ||
        die "mariadbd not found and apt-get unavailable: install mariadb-server or set FEED_MYSQL_DSN / FEED_TEST_MYSQL_DSN"
    log "mariadbd not found; installing mariadb-server with apt-get"
    rc=0
    apt_install mariadb-server || rc=$?
    MARIADBD="$(find_bin mariadbd mysqld || true)"
    INSTALL_DB="$(find_bin mariadb-install-db mysql_install_db || true)"
    ADMIN="$(find_bin mariadb-admin mysqladmin || true)"
    CLIENT="$(find_bin mariadb mysql || true)"
    [ -n "$MARIADBD" ] ||
        die "mariadb-server installation failed (apt-get rc=$rc); install mariadb-server or set FEED_MYSQL_DSN / FEED_TEST_MYSQL_DSN"
fi

# MyRocks: Debian's plugin package, and the project's option file.
DEFAULTS=(--no-defaults)
if [ -n "$ROCKSDB" ]; then
    if command -v dpkg-query >/dev/null 2>&1 && ! dpkg-query -W -f='${Status}' mariadb-plugin-rocksdb 2>/dev/null | grep -q "ok installed"; then
        [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1 ||
            die "FEED_INBOX_ENGINE=rocksdb needs MyRocks: install mariadb-plugin-rocksdb (as root)"
        log "installing mariadb-plugin-rocksdb with apt-get"
        apt_install mariadb-plugin-rocksdb || die "installing mariadb-plugin-rocksdb failed"
    fi
    DEFAULTS=(--defaults-file="$ROOT/deploy/rocksdb.cnf")
fi

USER_ARGS=()
if [ "$(id -u)" -eq 0 ]; then
    # mariadbd refuses to run as root unless told to explicitly.
    USER_ARGS=(--user=root)
fi

mkdir -p "$RUNDIR" "$(dirname "$DATADIR")"

# 3. Initialise the data directory if needed (MariaDB keeps the privilege
#    tables in mysql/*.frm, MySQL 8 in mysql.ibd).
if [ ! -f "$DATADIR/mysql/db.frm" ] && [ ! -f "$DATADIR/mysql.ibd" ]; then
    MARKER="$DATADIR/.feed-localdb-initialising"
    if [ -d "$DATADIR" ] && [ -n "$(ls -A "$DATADIR")" ] && [ ! -e "$MARKER" ]; then
        die "$DATADIR is not empty and holds no database; refusing to initialise it (remove it or set FEED_LOCAL_DB_DIR)"
    fi
    log "initialising data directory $DATADIR"
    rm -rf "$DATADIR" # empty, or left over from an interrupted initialisation
    mkdir -p "$DATADIR"
    : >"$MARKER"
    if "$MARIADBD" --no-defaults --version 2>/dev/null | grep -qi mariadb; then
        [ -n "$INSTALL_DB" ] || die "mariadb-install-db not found (install mariadb-server)"
        basedir_args=()
        # mariadb-install-db looks for its SQL scripts relative to --basedir.
        case "$MARIADBD" in
        /usr/sbin/* | /usr/bin/*) basedir_args=(--basedir=/usr) ;;
        esac
        init_cmd=("$INSTALL_DB" --no-defaults "${basedir_args[@]}" --datadir="$DATADIR"
            "${USER_ARGS[@]}" --auth-root-authentication-method=normal --skip-test-db)
    else
        # Oracle MySQL: no mysql_install_db any more; root gets an empty password.
        init_cmd=("$MARIADBD" --no-defaults --initialize-insecure --datadir="$DATADIR"
            "${USER_ARGS[@]}")
    fi
    if ! "${init_cmd[@]}" >"$INSTALL_LOG" 2>&1; then
        tail -n 40 "$INSTALL_LOG" >&2 || true
        rm -rf "$DATADIR"
        die "initialising $DATADIR failed (full log: $INSTALL_LOG)"
    fi
    rm -f "$MARKER"
fi

# 4. Start the server in the background, detached from this shell.
rm -f "$SOCKET" "$PIDFILE"
log "starting $MARIADBD on $HOST:$PORT (data: $DATADIR, log: $ERRLOG)"
setsid nohup "$MARIADBD" "${DEFAULTS[@]}" \
    "${USER_ARGS[@]}" \
    --datadir="$DATADIR" \
    --port="$PORT" \
    --bind-address="$HOST" \
    --socket="$SOCKET" \
    --pid-file="$PIDFILE" \
    --log-error="$ERRLOG" \
    --innodb-buffer-pool-size=1G \
    --max-connections=500 \
    --innodb-flush-log-at-trx-commit=1 \
    --skip-name-resolve \
    --character-set-server=utf8mb4 \
    --collation-server=utf8mb4_unicode_ci \
    </dev/null >/dev/null 2>&1 9>&- &
SERVER_PID=$!

for ((i = 0; i < 60; i++)); do
    alive && break
    # setsid normally execs in place (so $! is the server); also accept a
    # live pid file in case it had to fork.
    if ! kill -0 "$SERVER_PID" 2>/dev/null && ! pid_of_server >/dev/null; then
        alive && break
        log "server exited during startup; tail of $ERRLOG:"
        tail -n 40 "$ERRLOG" >&2 || true
        exit 1
    fi
    sleep 1
done
if ! alive; then
    log "server did not answer on $HOST:$PORT within 60 s; tail of $ERRLOG:"
    tail -n 40 "$ERRLOG" >&2 || true
    exit 1
fi

# 5. Make sure root can log in over TCP from 127.0.0.1 with an empty password.
if ! can_login; then
    log "root cannot log in over TCP; fixing grants via the unix socket"
    "$CLIENT" --no-defaults --socket="$SOCKET" -uroot >&2 <<'SQL' || true
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
CREATE USER IF NOT EXISTS 'root'@'%' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;
FLUSH PRIVILEGES;
SQL
    can_login || die "root cannot log in over TCP on $HOST:$PORT with an empty password; see $ERRLOG"
fi

log "ready"
finish
