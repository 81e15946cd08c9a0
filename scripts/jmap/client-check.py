#!/usr/bin/env python3
"""Minimal JMAP client check built on jmapc (PyPI, tested with 0.4.0).

Flow: session -> Mailbox/get -> Email/query(inMailbox=inbox, sort receivedAt desc)
      -> Email/get(first id; subject/from/receivedAt/textBody/bodyValues, fetchTextBodyValues)
      -> Email/set(update keywords/$seen = true) -> Email/get(keywords) to verify.
Optional: --import FILE.eml (upload blob + Email/import via jmapc.CustomMethod),
          --events SECONDS (read the EventSource stream for that long).

Usage:
  /tmp/jmap-venv/bin/python /tmp/jmap-client-check.py --url http://127.0.0.1:18080 \
      --user alice --password pass [--import /tmp/jmap-imp.eml] [--events 5]

Two jmapc quirks are handled here (a spate server should avoid needing them):
  * jmapc fetches the session from the hard-coded https://{host}/.well-known/jmap;
    --url lets us use plain http (the scheme of --url is used).
  * jmapc passes apiUrl/uploadUrl/downloadUrl/eventSourceUrl to requests unchanged,
    so relative URLs (Cyrus returns "/jmap/") fail; we resolve them against the
    session URL. With --strict both workarounds are off and the session URLs must
    be absolute (pass --url https://host:port, only the host:port part is used).
Exit status 0 = every step passed; the last line is "N passed, N failed".
"""
from __future__ import annotations

import argparse
import functools
import sys
import threading
import time
from urllib.parse import urljoin, urlsplit

import requests
from jmapc import Client, Comparator, EmailQueryFilterCondition
from jmapc.methods import (
    CustomMethod,
    EmailGet,
    EmailGetResponse,
    EmailQuery,
    EmailQueryResponse,
    EmailSet,
    EmailSetResponse,
    MailboxGet,
    MailboxGetResponse,
)
from jmapc.session import Session

CORE = "urn:ietf:params:jmap:core"
MAIL = "urn:ietf:params:jmap:mail"


class LocalClient(Client):
    """jmapc Client that honours the scheme of --url and absolutises session URLs."""

    def __init__(self, base_url: str, *args, **kwargs):
        self._base_url = base_url.rstrip("/")
        super().__init__(urlsplit(base_url).netloc, *args, **kwargs)

    @functools.cached_property
    def jmap_session(self) -> Session:  # type: ignore[override]
        r = self.requests_session.get(f"{self._base_url}/.well-known/jmap", timeout=30)
        r.raise_for_status()
        raw = r.json()
        for key in ("apiUrl", "uploadUrl", "downloadUrl", "eventSourceUrl"):
            if key in raw and isinstance(raw[key], str):
                # urljoin would percent-encode nothing; templates like {accountId} survive
                raw[key] = urljoin(r.url, raw[key])
        return Session.from_dict(raw)


passed = failed = 0


def step(name: str, ok: bool, detail: str = "") -> None:
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:18080")
    ap.add_argument("--user", default="alice")
    ap.add_argument("--password", default="pass")
    ap.add_argument("--token", help="use Bearer auth instead of Basic")
    ap.add_argument("--strict", action="store_true", help="plain jmapc.Client, no workarounds")
    ap.add_argument("--import", dest="import_file", help="RFC 5322 file to upload + Email/import")
    ap.add_argument("--events", type=float, default=0, help="seconds to read the EventSource")
    a = ap.parse_args()

    if a.strict:
        host = urlsplit(a.url).netloc or a.url
        client = (Client.create_with_api_token(host, a.token) if a.token
                  else Client.create_with_password(host, a.user, a.password))
    else:
        client = (LocalClient.create_with_api_token(a.url, a.token) if a.token
                  else LocalClient.create_with_password(a.url, a.user, a.password))

    # 1. session
    s = client.jmap_session
    step("session", bool(s.api_url), f"user={s.username} apiUrl={s.api_url} state={s.state} "
         f"account={client.account_id} caps={sorted(s.capabilities.urns)}")

    # 2. Mailbox/get (ids omitted = all)
    mb = client.request(MailboxGet(ids=None), raise_errors=True)
    assert isinstance(mb, MailboxGetResponse)
    inbox = next((m for m in mb.data if (m.role or "").lower() == "inbox"), None)
    step("Mailbox/get", inbox is not None,
         ", ".join(f"{m.name}({m.role},{m.total_emails}/{m.unread_emails})" for m in mb.data))
    if inbox is None:
        return 1

    # 3. Email/query on the inbox, newest first
    q = client.request(
        EmailQuery(
            filter=EmailQueryFilterCondition(in_mailbox=inbox.id),
            sort=[Comparator(property="receivedAt", is_ascending=False)],
            position=0, limit=10, calculate_total=True,
        ),
        raise_errors=True,
    )
    assert isinstance(q, EmailQueryResponse)
    step("Email/query", True, f"total={q.total} ids={q.ids} queryState={q.query_state}")
    if not q.ids:
        step("inbox has mail", False, "deliver a message first")
        return 1

    # 4. Email/get of the first message with body values
    first = q.ids[0]
    g = client.request(
        EmailGet(
            ids=[first],
            properties=["id", "blobId", "threadId", "mailboxIds", "keywords",
                        "subject", "from", "receivedAt", "textBody", "bodyValues"],
            fetch_text_body_values=True,
        ),
        raise_errors=True,
    )
    assert isinstance(g, EmailGetResponse)
    e = g.data[0] if g.data else None
    text = ""
    if e and e.text_body and e.body_values:
        text = "".join(e.body_values[p.part_id].value or "" for p in e.text_body
                       if p.part_id in e.body_values)
    step("Email/get", e is not None and e.id == first and bool(text),
         f"subject={e.subject!r} from={[f.email for f in (e.mail_from or [])]} "
         f"receivedAt={e.received_at} keywords={e.keywords} body={text[:40]!r}" if e else "no email")

    # 5. Email/set keywords/$seen (patch syntax)
    st = client.request(EmailSet(update={first: {"keywords/$seen": True}}), raise_errors=True)
    assert isinstance(st, EmailSetResponse)
    step("Email/set $seen", bool(st.updated) and first in st.updated and not st.not_updated,
         f"oldState={st.old_state} newState={st.new_state}")
    g2 = client.request(EmailGet(ids=[first], properties=["keywords"]), raise_errors=True)
    assert isinstance(g2, EmailGetResponse)
    step("Email/get keywords", bool(g2.data and (g2.data[0].keywords or {}).get("$seen")),
         f"{g2.data[0].keywords if g2.data else None}")

    # 6. optional: upload + Email/import (jmapc has no EmailImport class; use CustomMethod)
    if a.import_file:
        blob = client.upload_blob(a.import_file)  # Content-Type guessed from the suffix
        step("upload", bool(blob.id), f"blobId={blob.id} type={blob.type} size={blob.size}")
        m = CustomMethod(data={"accountId": client.account_id,
                               "emails": {"k1": {"blobId": blob.id,
                                                 "mailboxIds": {inbox.id: True},
                                                 "keywords": {}}}})
        m.jmap_method = "Email/import"
        m.using = {CORE, MAIL}
        r = client.request(m, raise_errors=True)
        created = (r.data or {}).get("created") or {}
        step("Email/import", "k1" in created, f"{r.data}")

    # 7. optional: EventSource (jmapc yields only 'event: state' events)
    if a.events > 0:
        got: list = []

        def reader() -> None:
            try:
                for ev in client.events:
                    got.append(ev)
            except Exception as exc:  # noqa: BLE001
                got.append(exc)

        threading.Thread(target=reader, daemon=True).start()
        time.sleep(min(1.0, a.events))
        # cause a change so a StateChange is pushed
        client.request(EmailSet(update={first: {"keywords/$flagged": True}}), raise_errors=True)
        time.sleep(max(0.0, a.events - 1.0))
        evs = [x for x in got if not isinstance(x, Exception)]
        step("EventSource", bool(evs), f"{got[:3]}")

    return 0 if failed == 0 else 1


if __name__ == "__main__":
    try:
        rc = main()
    except requests.HTTPError as exc:
        step("http", False, f"{exc} body={exc.response.text[:300]!r}")
        rc = 1
    except Exception as exc:  # noqa: BLE001
        step("exception", False, f"{type(exc).__name__}: {exc}")
        rc = 1
    print(f"{passed} passed, {failed} failed")
    sys.exit(rc)
