#!/usr/bin/env python3
"""scripts/testbed --jmap cyrus: an INBOX for every user of the bed, then a JMAP check.

Cyrus lists a JMAP account as soon as its user authenticates, but answers every method
with accountNotFound until the user's INBOX exists. With autocreate_quota >= 0 the first
IMAP login creates it (and autocreate_inbox_folders) without adding a message, which a
delivery with autocreate_post would. Then the first user's session resource (through the
301 from /.well-known/jmap) and Mailbox/get must name an inbox.

usage: cyrus-provision.py IMAP_PORT HTTP_PORT USERS_FILE
"""
import base64
import concurrent.futures
import imaplib
import json
import sys
import urllib.parse
import urllib.request

HOST = "127.0.0.1"


def make_inbox(imap_port, user, password):
    c = imaplib.IMAP4(HOST, imap_port, timeout=60)
    try:
        c.login(user, password)
        typ, data = c.status("INBOX", "(MESSAGES)")
        if typ != "OK":
            raise RuntimeError("%s: STATUS INBOX: %s %s" % (user, typ, data))
    finally:
        try:
            c.logout()
        except Exception:
            pass


def jmap_check(http_port, user, password):
    auth = "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
    url = "http://%s:%d/.well-known/jmap" % (HOST, http_port)
    req = urllib.request.Request(url, headers={"Authorization": auth})
    with urllib.request.urlopen(req, timeout=60) as r:  # follows Cyrus's 301
        session = json.load(r)
    account = session["primaryAccounts"]["urn:ietf:params:jmap:mail"]
    api = urllib.parse.urljoin(url, session["apiUrl"])
    body = json.dumps({
        "using": ["urn:ietf:params:jmap:core", "urn:ietf:params:jmap:mail"],
        "methodCalls": [["Mailbox/get", {"accountId": account, "ids": None}, "m"]],
    }).encode()
    req = urllib.request.Request(api, data=body, headers={
        "Authorization": auth, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        answer = json.load(r)
    name, args, _ = answer["methodResponses"][0]
    roles = [m.get("role") for m in args.get("list", [])] if name == "Mailbox/get" else []
    if "inbox" not in roles:
        raise RuntimeError("%s: Mailbox/get names no inbox: %s" % (user, answer))
    print("jmap: %s (account %s) has mailboxes %s" % (user, account, roles))


def main():
    imap_port, http_port, users_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    users = []
    with open(users_file) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2:
                users.append((parts[0], parts[1]))
    if not users:
        sys.exit("no users in %s" % users_file)
    # A few logins at once: each creates six mailboxes, mostly waiting on fsync.
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        for f in [pool.submit(make_inbox, imap_port, u, p) for u, p in users]:
            f.result()
    print("imap: %d INBOXes" % len(users))
    jmap_check(http_port, *users[0])
    jmap_check(http_port, *users[-1])


if __name__ == "__main__":
    main()
