# shellcheck shell=bash
# scripts/testbed's JMAP server (--jmap cyrus): Debian 12's Cyrus IMAP 3.6 (JMAP in the httpd
# of cyrus-caldav), sourced by scripts/testbed. Cyrus conflicts with the installed Dovecot as a
# Debian package (Conflicts: imap-server), so its .debs are downloaded once with `apt-get
# download` into a cache and extracted there (dpkg-deb -x: no dpkg database change, nothing
# under /etc or /usr); only the plain libraries it links are installed (need_packages).
# Research and quirks: scripts/jmap/NOTES.txt. Uses scripts/testbed's helpers and variables
# (CYD, CYLOG, CY_PIDFILE, CY_LAUNCHER, CYRUS_*, USERS_FILE, DOMAIN, PASSWORD, ...).

# The packages extracted into the cache: master, imapd, lmtpd, ctl_cyrusdb and libcyrus
# (cyrus-common), imapd (cyrus-imapd), the JMAP httpd (cyrus-caldav), saslpasswd2 (sasl2-bin).
CYRUS_DEBS=(cyrus-common cyrus-imapd cyrus-caldav sasl2-bin)
# The libraries those binaries and the SASL plugins (PLAIN, sasldb) load that a fresh
# Debian 12 may lack: plain library packages, no conflict with anything installed.
CYRUS_LIBS=(libical3 libxapian30 libshp2 libjansson4 libnghttp2-14 libbrotli1 libicu72 libpq5
    libwrap0 libxml2 libsqlite3-0 libpcre3 libldap-2.5-0 libssl3 libkrb5-3 libdb5.3
    libsasl2-2 libsasl2-modules libsasl2-modules-db)
CYRUS_START_TIMEOUT=${TESTBED_CYRUS_START_TIMEOUT:-30} # seconds for master to listen

cyrus_missing_libs() { # the CYRUS_LIBS not installed, one per line
    local p
    for p in "${CYRUS_LIBS[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
    done
}

cyrus_libdir() { # where the extracted libcyrus*.so.0 are (no RPATH: LD_LIBRARY_PATH)
    local f
    f=$(find "$CYRUS_ROOT/usr/lib" -name 'libcyrus.so.0' -print -quit 2>/dev/null)
    [ -n "$f" ] && dirname "$f"
}

cyrus_mkdir() { # dir: made with its missing parents, mode 755 (master's services, as
    # $MAIL_USER, run the binaries from the cache)
    [ -d "$1" ] && return 0
    cyrus_mkdir "$(dirname "$1")"
    mkdir -m 755 "$1"
}

cyrus_fetch() { # the .debs downloaded once into the cache and extracted beside them
    [ -e "$CYRUS_CACHE/.extracted" ] && [ -x "$CYRUS_BIN/master" ] && return 0
    [ "$(id -u)" = 0 ] || die "--jmap cyrus must run as root (apt-get download, and master drops to $MAIL_USER)"
    cyrus_mkdir "$CYRUS_CACHE"
    mkdir -p "$CYLOG"
    local log=$CYLOG/fetch.log
    say "cyrus: downloading ${CYRUS_DEBS[*]} into $CYRUS_CACHE (once)"
    # One bed at a time fills the cache; the others wait, then find it done.
    (
        flock -w 600 9 || exit 1
        [ -e "$CYRUS_CACHE/.extracted" ] && exit 0
        mkdir -p "$CYRUS_CACHE/debs"
        cd "$CYRUS_CACHE/debs"
        if [ ! -e .downloaded ]; then
            rm -f ./*.deb
            # A fresh machine has no package lists yet: update once and try again.
            apt-get download "${CYRUS_DEBS[@]}" >>"$log" 2>&1 \
                || { apt-get update -qq >>"$log" 2>&1 && apt-get download "${CYRUS_DEBS[@]}" >>"$log" 2>&1; } \
                || exit 1
            touch .downloaded
        fi
        rm -rf "$CYRUS_ROOT.tmp"
        for d in ./*.deb; do dpkg-deb -x "$d" "$CYRUS_ROOT.tmp" || exit 1; done
        rm -rf "$CYRUS_ROOT"
        mv "$CYRUS_ROOT.tmp" "$CYRUS_ROOT"
        touch "$CYRUS_CACHE/.extracted"
    ) 9>"$CYRUS_CACHE/.lock" || { tail -20 "$log" >&2; die "cyrus: fetching the packages failed (log: $log)"; }
}

cyrus_check_libs() { # every binary the bed runs finds its libraries
    local b missing="" libdir
    libdir=$(cyrus_libdir) || die "cyrus: no libcyrus.so.0 under $CYRUS_ROOT"
    for b in master imapd lmtpd httpd ctl_cyrusdb; do
        missing+=$(LD_LIBRARY_PATH=$libdir ldd "$CYRUS_BIN/$b" 2>&1 | grep 'not found' || true)
    done
    [ -z "$missing" ] || die "cyrus: libraries not found (install them): $(echo "$missing" | awk '{print $1}' | sort -u | paste -sd' ' -)"
    runuser -u "$MAIL_USER" -- test -x "$CYRUS_BIN/httpd" \
        || die "cyrus: $MAIL_USER cannot run $CYRUS_BIN/httpd (a parent of $CYRUS_CACHE it may not enter?)"
}

cyrus_version() {
    dpkg-deb -f "$(ls "$CYRUS_CACHE"/debs/cyrus-common_*.deb 2>/dev/null | head -1)" Version 2>/dev/null || echo '?'
}

gen_cyrus() { # imapd.conf, cyrus.conf, the directories, the bed's users in a private sasldb
    local i j
    mkdir -p "$CYD"/{conf,run/proc,run/lock,run/socket,var/spool/stage.} "$CYLOG"
    for i in db proc socket log msg user quota lock sieve; do mkdir -p "$CYD/var/lib/$i"; done
    for i in user quota lock sieve; do for j in {a..z}; do mkdir -p "$CYD/var/lib/$i/$j"; done; done
    # virtdomains userid + defaultdomain: user7@example.test logs in (and takes mail) as
    # user7, whose SASL realm is the domain (= servername). INBOXes are made by the first
    # IMAP login (autocreate_quota 0, unlimited), never by a delivery (autocreate_post no:
    # mail to an unknown user is refused with 550, not filed into a new mailbox).
    cat > "$CYD/conf/imapd.conf" <<EOF
# Generated by scripts/testbed (--jmap cyrus): a private Cyrus on 127.0.0.1.
configdirectory: $CYD/var/lib
partition-default: $CYD/var/spool
defaultpartition: default
proc_path: $CYD/run/proc
mboxname_lockpath: $CYD/run/lock
lmtpsocket: $CYD/run/socket/lmtp
idlesocket: $CYD/run/socket/idle
notifysocket: $CYD/run/socket/notify
cyrus_user: $MAIL_USER
cyrus_group: $MAIL_USER
servername: $DOMAIN
defaultdomain: $DOMAIN
virtdomains: userid
allowplaintext: yes
sasl_mech_list: PLAIN LOGIN
sasl_pwcheck_method: auxprop
sasl_auxprop_plugin: sasldb
sasl_sasldb_path: $CYD/conf/sasldb2
altnamespace: yes
unixhierarchysep: yes
autocreate_post: no
autocreate_quota: 0
autocreate_inbox_folders: Drafts | Sent | Trash | Junk | Archive
xlist-drafts: Drafts
xlist-sent: Sent
xlist-trash: Trash
xlist-junk: Junk
xlist-archive: Archive
lmtp_downcase_rcpt: yes
httpmodules: jmap
httpallowcompress: no
conversations: yes
conversations_db: twoskip
syslog_prefix: spate-cyrus
# What JMAP submits (EmailSubmission/set) goes by SMTP to the bed's relay port, where a
# test that submits listens: never to this machine's sendmail (its Postfix queue).
smtp_backend: host
smtp_host: 127.0.0.1:$CYRUS_RELAY_PORT
EOF
    local c=$CYD/conf/imapd.conf
    cat > "$CYD/conf/cyrus.conf" <<EOF
# Generated by scripts/testbed (--jmap cyrus). One process per connection (maxchild); master
# listens with a backlog of 32, which 3.6 does not let cyrus.conf change.
START {
  recover cmd="$CYRUS_BIN/ctl_cyrusdb -C $c -r"
}
SERVICES {
  imap cmd="$CYRUS_BIN/imapd -C $c" listen="127.0.0.1:$CYRUS_IMAP_PORT" prefork=0 maxchild=200
  http cmd="$CYRUS_BIN/httpd -C $c" listen="127.0.0.1:$CYRUS_HTTP_PORT" prefork=1 maxchild=200
  lmtp cmd="$CYRUS_BIN/lmtpd -a -C $c" listen="127.0.0.1:$CYRUS_LMTP_PORT" prefork=0 maxchild=50
}
EVENTS {
  checkpoint cmd="$CYRUS_BIN/ctl_cyrusdb -C $c -c" period=30
}
EOF
    # The bed's users, realm = their domain (the servername for $DOMAIN). saslpasswd2 says
    # "error deleting entry from sasldb: BDB0073 DB_NOTFOUND" for every new user: harmless.
    local addr pw
    while read -r addr pw; do
        printf '%s' "$pw" | "$CYRUS_ROOT/usr/sbin/saslpasswd2" -p -c -f "$CYD/conf/sasldb2" \
            -u "${addr#*@}" "${addr%@*}" 2>/dev/null || die "cyrus: saslpasswd2 failed for $addr"
    done < "$USERS_FILE"
    chown -R "$MAIL_USER:$MAIL_USER" "$CYD"
    chmod 640 "$CYD/conf/sasldb2"
}

cyrus_ours() { # pid: its command line names this bed's Cyrus directories
    local cmd
    cmd=$(tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null) || return 1
    case $cmd in *"$CYD/"*|*"$CYLOG/"*) return 0 ;; esac
    return 1
}

cyrus_ports() { echo "$CYRUS_HTTP_PORT $CYRUS_IMAP_PORT $CYRUS_LMTP_PORT"; }

cyrus_fail() { # message: show what master said, stop what started, exit
    say "$1; the last lines of Cyrus's output:"
    local f
    for f in "$CYLOG"/*; do
        [ -f "$f" ] && [ -s "$f" ] || continue
        echo "--- $f" >&2
        tail -n 15 "$f" >&2
    done
    say "(Cyrus logs to syslog only: TESTBED_CYRUS_SYSLOG=1 catches it in $CYLOG/syslog.log)"
    stop_cyrus
    die "$1"
}

# Cyrus logs to syslog only. With TESTBED_CYRUS_SYSLOG=1 on a machine without /dev/log,
# a small catcher binds /dev/log and writes $CYLOG/syslog.log; `down` removes it.
cyrus_syslog_start() {
    [ "${TESTBED_CYRUS_SYSLOG:-0}" = 1 ] && [ ! -e /dev/log ] || return 0
    setsid python3 -S -c '
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("/dev/log")
os.chmod("/dev/log", 0o666)
with open(sys.argv[1], "a", buffering=1) as f:
    while True:
        f.write(s.recv(65536).decode("utf-8", "replace").rstrip("\n\0") + "\n")
' "$CYLOG/syslog.log" </dev/null >>"$CYLOG/syslog.stdout" 2>&1 &
    echo $! > "$CYD/run/syslog.pid"
    local i
    for ((i = 0; i < 50; i++)); do [ -S /dev/log ] && break; sleep 0.1; done
    say "cyrus: syslog caught in $CYLOG/syslog.log (pid $(cat "$CYD/run/syslog.pid"), /dev/log)"
}

cyrus_syslog_stop() {
    local p
    if p=$(pid_of "$CYD/run/syslog.pid") && cyrus_ours "$p"; then
        stop_pid "cyrus syslog catcher" "$p"
        [ -S /dev/log ] && rm -f /dev/log
    fi
    rm -f "$CYD/run/syslog.pid"
}

start_cyrus() {
    [ -n "$JMAP" ] || return 0
    local port i ready t0 launcher libdir
    if pid_of "$CY_PIDFILE" >/dev/null; then say "cyrus already running"; return 0; fi
    for port in $(cyrus_ports); do
        port_busy "$port" && die "127.0.0.1:$port is already in use by another process"
    done
    libdir=$(cyrus_libdir) || die "cyrus: no libcyrus.so.0 under $CYRUS_ROOT"
    cyrus_syslog_start
    rm -f "$CY_PIDFILE" "$CY_LAUNCHER"
    t0=$(now)
    # In the foreground (no -d) under setsid: $! is master itself; its services inherit
    # LD_LIBRARY_PATH (libcyrus has no RPATH).
    LD_LIBRARY_PATH=$libdir setsid "$CYRUS_BIN/master" -C "$CYD/conf/imapd.conf" \
        -M "$CYD/conf/cyrus.conf" -p "$CY_PIDFILE" </dev/null >>"$CYLOG/master.stdout" 2>&1 &
    launcher=$!
    echo "$launcher" > "$CY_LAUNCHER"
    for ((i = 0; i < CYRUS_START_TIMEOUT * 10; i++)); do
        ready=1
        for port in $(cyrus_ports); do port_busy "$port" || { ready=0; break; }; done
        [ $ready = 1 ] && pid_of "$CY_PIDFILE" >/dev/null && break
        ready=0
        alive "$launcher" || cyrus_fail "cyrus master exited during start-up"
        sleep 0.1
    done
    [ $ready = 1 ] || cyrus_fail "cyrus does not listen on $(cyrus_ports) after ${CYRUS_START_TIMEOUT}s"
    say "cyrus up, master pid $(pid_of "$CY_PIDFILE"), listening after $(since "$t0") s"
}

stop_cyrus() { # by PID: master (it stops its services), then what is left of the launch
    local p
    if p=$(pid_of "$CY_PIDFILE") && cyrus_ours "$p"; then stop_tree cyrus "$p"; fi
    if p=$(pid_of "$CY_LAUNCHER") && cyrus_ours "$p"; then stop_tree "cyrus launcher" "$p"; fi
    rm -f "$CY_PIDFILE" "$CY_LAUNCHER"
    cyrus_syslog_stop
}

setup_cyrus() { # fetch, configure, start, and an INBOX for every user: the JMAP part of a bed
    [ -n "$JMAP" ] || return 0
    local t0
    cyrus_fetch
    cyrus_check_libs
    t0=$(now)
    gen_cyrus
    say "cyrus $(cyrus_version): $(wc -l < "$USERS_FILE") users in its sasldb in $(since "$t0") s"
    start_cyrus
    t0=$(now)
    # An account answers JMAP methods only once its INBOX exists: the first IMAP login of
    # each user makes it (and Drafts, Sent, Trash, Junk, Archive) without adding a message;
    # then the first user's session must name an inbox over JMAP.
    python3 -S "$HERE/testbed-data/cyrus-provision.py" "$CYRUS_IMAP_PORT" "$CYRUS_HTTP_PORT" \
        "$USERS_FILE" >>"$CYLOG/provision.log" 2>&1 \
        || { tail -5 "$CYLOG/provision.log" >&2; cyrus_fail "cyrus: creating the users' INBOXes failed"; }
    say "cyrus: INBOX of every user made in $(since "$t0") s; JMAP answers"
    touch "$CYD/.provisioned"
}
