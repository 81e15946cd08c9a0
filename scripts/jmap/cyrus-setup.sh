#!/bin/bash
# Research for #37 (JMAP), kept for the work that follows: a private Cyrus 3.6 with JMAP
# beside the installed Dovecot, from the extracted Debian packages (scripts/jmap/NOTES.txt).
# Run Debian 12's Cyrus IMAP 3.6.1 (JMAP over httpd) privately, side by side with
# the installed dovecot: no dpkg -i, nothing under /etc, /var or /usr is touched.
# Usage: jmap-cyrus-setup.sh start|stop|status   (env: BASE, HTTP_PORT, LMTP_PORT, IMAP_PORT, USERS)
set -euo pipefail
BASE=${BASE:-/tmp/jmap-cyrus}
HTTP_PORT=${HTTP_PORT:-18080}
LMTP_PORT=${LMTP_PORT:-18024}
IMAP_PORT=${IMAP_PORT:-18143}
USERS=${USERS:-"alice bob"}          # every user gets password "pass"; "cyrus" is the admin
RUNAS=${RUNAS:-mail}                  # existing unprivileged account (uid 8); no useradd needed
ROOT=$BASE/root
BIN=$ROOT/usr/lib/cyrus/bin
export LD_LIBRARY_PATH=$ROOT/usr/lib/x86_64-linux-gnu

fetch_debs() {
  mkdir -p "$BASE/debs"
  cd "$BASE/debs"
  # cyrus-* + the 4 libraries that are not installed on this machine
  # (everything else they link against is already present: ldd shows no "not found"
  # except libclamav.so.12 for cyr_virusscan, which is not needed)
  [ -e .done ] || { apt-get download cyrus-common cyrus-imapd cyrus-caldav cyrus-admin \
      cyrus-clients libcyrus-imap-perl sasl2-bin libical3 libxapian30 libzephyr4 libshp2; touch .done; }
  mkdir -p "$ROOT"
  for d in *.deb; do dpkg-deb -x "$d" "$ROOT"; done
}

write_config() {
  mkdir -p "$BASE"/{conf,log,run/proc,run/lock,run/socket,var/spool/stage.}
  for i in db proc socket log msg user quota lock sieve; do mkdir -p "$BASE/var/lib/$i"; done
  for i in user quota lock sieve; do for j in {a..z}; do mkdir -p "$BASE/var/lib/$i/$j"; done; done
  cat > "$BASE/conf/imapd.conf" <<EOF
configdirectory: $BASE/var/lib
partition-default: $BASE/var/spool
defaultpartition: default
proc_path: $BASE/run/proc
mboxname_lockpath: $BASE/run/lock
lmtpsocket: $BASE/run/socket/lmtp
idlesocket: $BASE/run/socket/idle
notifysocket: $BASE/run/socket/notify
cyrus_user: $RUNAS
cyrus_group: $RUNAS
servername: localhost
admins: cyrus
allowplaintext: yes
sasl_mech_list: PLAIN LOGIN
sasl_pwcheck_method: auxprop
sasl_auxprop_plugin: sasldb
sasl_sasldb_path: $BASE/conf/sasldb2
virtdomains: off
altnamespace: yes
unixhierarchysep: yes
autocreate_post: yes
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
jmap_preview_annot: /shared/vendor/messagingengine.com/preview
syslog_prefix: jmapcyrus
EOF
  cat > "$BASE/conf/cyrus.conf" <<EOF
START {
  recover cmd="$BIN/ctl_cyrusdb -C $BASE/conf/imapd.conf -r"
}
SERVICES {
  imap     cmd="$BIN/imapd -C $BASE/conf/imapd.conf" listen="127.0.0.1:$IMAP_PORT" prefork=0 maxchild=50
  http     cmd="$BIN/httpd -C $BASE/conf/imapd.conf" listen="127.0.0.1:$HTTP_PORT" prefork=1 maxchild=100
  lmtp     cmd="$BIN/lmtpd -a -C $BASE/conf/imapd.conf" listen="127.0.0.1:$LMTP_PORT" prefork=0 maxchild=20
}
EVENTS {
  checkpoint cmd="$BIN/ctl_cyrusdb -C $BASE/conf/imapd.conf -c" period=30
}
EOF
  for u in cyrus $USERS; do
    echo -n pass | "$ROOT/usr/sbin/saslpasswd2" -p -f "$BASE/conf/sasldb2" -u localhost -c "$u" 2>/dev/null
  done
  chown -R "$RUNAS:$RUNAS" "$BASE/var" "$BASE/run" "$BASE/conf" "$BASE/log"
  chmod 640 "$BASE/conf/sasldb2"
}

start() {
  [ -x "$BIN/master" ] || fetch_debs
  [ -f "$BASE/conf/imapd.conf" ] || write_config
  # Cyrus logs only to syslog; without a syslog daemon start a tiny /dev/log catcher
  if [ ! -S /dev/log ]; then
    python3 - "$BASE/log/syslog.log" <<'PY' &
import socket, os, sys
try: os.unlink("/dev/log")
except FileNotFoundError: pass
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.bind("/dev/log"); os.chmod("/dev/log", 0o666)
with open(sys.argv[1], "a", buffering=1) as f:
    while True: f.write(s.recv(65536).decode("utf-8", "replace").rstrip("\n\0") + "\n")
PY
    echo $! > "$BASE/run/syslogd.pid"
  fi
  "$BIN/master" -C "$BASE/conf/imapd.conf" -M "$BASE/conf/cyrus.conf" -p "$BASE/run/master.pid" -d
  for _ in $(seq 50); do
    curl -s -o /dev/null "http://127.0.0.1:$HTTP_PORT/" && break; sleep 0.2
  done
  echo "master pid $(cat "$BASE/run/master.pid"); JMAP http://127.0.0.1:$HTTP_PORT/.well-known/jmap LMTP 127.0.0.1:$LMTP_PORT IMAP 127.0.0.1:$IMAP_PORT"
  # an account only exists for JMAP once its INBOX exists: create it via IMAP login
  for u in $USERS; do
    python3 -c "import imaplib,sys; c=imaplib.IMAP4('127.0.0.1',$IMAP_PORT); c.login(sys.argv[1],'pass'); c.logout()" "$u"
  done
}

stop() {
  [ -f "$BASE/run/master.pid" ] && kill "$(cat "$BASE/run/master.pid")" 2>/dev/null || true
  if [ -f "$BASE/run/syslogd.pid" ]; then
    kill "$(cat "$BASE/run/syslogd.pid")" 2>/dev/null || true
    rm -f /dev/log "$BASE/run/syslogd.pid"
  fi
  sleep 1
  ps -eo pid,args | grep "$BIN" | grep -v grep || echo "stopped"
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  status) ps -eo pid,user,args | grep "$BIN" | grep -v grep || echo "not running" ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
