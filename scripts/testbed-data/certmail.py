#!/usr/bin/env python3
# certmail.py — the test bed's certified-mail content filter (experiment E1, OpenPec's role),
# run by Postfix's pipe(8) once per message (`scripts/testbed up --filter sign|verify`):
#
#   certmail.py sign|verify CERTMAIL_DIR SENDER RECIPIENT...
#
# The message is on stdin. What it does, by mode:
#   sign    signs the message with `openssl cms -sign` (the bed's certmail certificate) and
#           sends the signed copy — an S/MIME multipart/signed message whose signed content
#           is the original as message/rfc822 — back to the sender (OpenPec's signed
#           acceptance notice: the sender's proof); the original goes on to its recipients
#           with its body untouched and a header `X-Certified: signed`.
#   verify  checks the message's S/MIME signature with `openssl cms -verify` (the bed's CA):
#           good -> on to its recipients with `X-Certified: verified`; bad (tampered,
#           unknown signer, expired certificate) -> on to its recipients with
#           `X-Certified: verification-failed` and a verification-failure notice to the
#           sender; not signed at all -> treated as malformed (bounced).
# Every derived message carries `X-Certified-For: <original Message-ID>` and
# `X-Certified: signed-copy|verification-failure`, so `spate verify --rules` counts it.
# Re-injection: SMTP to the bed's second smtpd on loopback, the one without content_filter
# (Postfix's FILTER_README; its sendmail cannot be used by an unprivileged filter on a
# private instance: "unauthorized configuration directory").
#
# Exit status, as pipe(8) reads sysexits: 0 done; 65 (EX_DATAERR) a malformed message —
# a non-conformant header (8-bit or not `Name: value`), no From, or in verify mode no
# signature: Postfix bounces it with this program's one-line reason; 69 (EX_UNAVAILABLE)
# the signing certificate expired: bounced too; 75 (EX_TEMPFAIL) re-injection failed:
# Postfix retries. The fault file (`scripts/testbed filter-fault crash|expired|none`) makes
# it crash on purpose (SIGABRT: Postfix defers and retries, the drain never ends) or sign
# with an expired certificate.
import os
import re
import smtplib
import subprocess
import sys
import tempfile
import time
import uuid

EX_DATAERR, EX_UNAVAILABLE, EX_TEMPFAIL = 65, 69, 75
FIELD = re.compile(rb"^[!-9;-~]+:")


def fail(code, text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    sys.exit(code)


def conf(cdir):
    out = {}
    with open(os.path.join(cdir, "certmail.conf"), encoding="ascii") as f:
        for line in f:
            k, _, v = line.strip().partition("=")
            if k:
                out[k] = v
    return out


def split(raw):
    for sep in (b"\r\n\r\n", b"\n\n"):
        i = raw.find(sep)
        if i >= 0:
            return raw[: i + len(sep) // 2], raw[i + len(sep) :]
    return raw, b""


def nonconformant(head):
    """A reason the header block breaks RFC 5322, or None."""
    lines = head.replace(b"\r\n", b"\n").split(b"\n")
    for n, line in enumerate(lines):
        if not line:
            continue
        if any(b > 0x7E or (b < 0x20 and b != 0x09) for b in line):
            return "8-bit or control characters in a header line (line %d)" % (n + 1)
        if line[:1] in (b" ", b"\t"):
            if n == 0:
                return "a continuation line before any field"
            continue
        if not FIELD.match(line):
            return "a header line that is not 'Name: value' (line %d)" % (n + 1)
    return None


def header(head, name):
    pat = re.compile(rb"^" + re.escape(name.encode()) + rb":[ \t]*(.*)$", re.I | re.M)
    m = pat.search(head.replace(b"\r\n", b"\n"))
    return m.group(1).decode("ascii", "replace").strip() if m else ""


def openssl(args, data=None):
    return subprocess.run(["openssl"] + args, input=data, capture_output=True, check=False)


def sendmail(c, sender, rcpts, data):
    """Re-injection over SMTP into the bed's second smtpd (no content filter there)."""
    host, _, port = c["reinject"].rpartition(":")
    try:
        with smtplib.SMTP(host, int(port), timeout=60) as s:
            refused = s.sendmail(sender, rcpts, data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
    except (OSError, smtplib.SMTPException) as e:
        fail(EX_TEMPFAIL, "4.3.0 re-injection failed: %s" % str(e)[:200])
    if refused:
        fail(EX_TEMPFAIL, "4.3.0 re-injection refused for %s" % ", ".join(refused))


def notice(c, to, kind, subject, msgid, mime):
    """A derived message from the gateway to `to`: headers, then a MIME entity."""
    head = (
        "From: Certified mail gateway <certmail@%s>\r\n"
        "To: <%s>\r\n"
        "Subject: %s\r\n"
        "Date: %s\r\n"
        "Message-ID: <%s.certmail@%s>\r\n"
        "X-Certified: %s\r\n"
        "X-Certified-For: %s\r\n"
        % (c["domain"], to, subject, time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime()),
           uuid.uuid4().hex, c["domain"], kind, msgid)
    )
    return head.encode() + mime


def tagged(raw, value):
    return ("X-Certified: %s\r\n" % value).encode() + raw


def sign(c, cdir, sender, rcpts, raw, head, fault):
    cert, key = os.path.join(cdir, "signer.pem"), os.path.join(cdir, "signer.key")
    if fault == "expired":
        cert, key = os.path.join(cdir, "expired.pem"), os.path.join(cdir, "expired.key")
    # A gateway must not certify with a certificate that is no longer valid.
    if openssl(["x509", "-in", cert, "-noout", "-checkend", "0"]).returncode != 0:
        fail(EX_UNAVAILABLE, "5.7.0 certified mail: the signing certificate has expired")
    entity = b"Content-Type: message/rfc822\r\n\r\n" + raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    p = openssl(["cms", "-sign", "-signer", cert, "-inkey", key, "-md", "sha256", "-outform", "SMIME"], entity)
    if p.returncode != 0:
        fail(EX_TEMPFAIL, "4.3.0 openssl cms -sign failed: " + p.stderr.decode(errors="replace").strip()[:200])
    msgid = header(head, "Message-ID")
    subject = header(head, "Subject")
    copy = notice(c, sender, "signed-copy", "ACCEPTED: " + subject, msgid, p.stdout)
    if sender:
        sendmail(c, "", [sender], copy)
    sendmail(c, sender, rcpts, tagged(raw, "signed; by=certmail@%s" % c["domain"]))


def verify(c, cdir, sender, rcpts, raw, head):
    ctype = header(head, "Content-Type").lower()
    if not (ctype.startswith("multipart/signed") or "pkcs7-mime" in ctype):
        fail(EX_DATAERR, "5.7.5 certified mail: the message is not signed (Content-Type %s)" % (ctype or "none"))
    with tempfile.NamedTemporaryFile(dir=os.path.join(cdir, "tmp")) as f:
        f.write(raw)
        f.flush()
        p = openssl(["cms", "-verify", "-in", f.name, "-CAfile", c["ca"], "-out", "/dev/null"])
    err = p.stderr.decode(errors="replace")
    if p.returncode == 0:
        sendmail(c, sender, rcpts, tagged(raw, "verified"))
        return
    if "unable to" in err.lower() and "read" in err.lower() and "smime" in err.lower():
        fail(EX_DATAERR, "5.6.0 certified mail: the S/MIME structure cannot be read")
    reason = "expired certificate" if "expired" in err else (
        "signature does not match the content" if "digest failure" in err or "content verify error" in err
        else "signature not verified")
    msgid = header(head, "Message-ID")
    subject = header(head, "Subject")
    text = (
        "Content-Type: text/plain; charset=us-ascii\r\n\r\n"
        "The certified message %s to %s failed verification: %s.\r\n"
        % (msgid, ", ".join(rcpts), reason)
    ).encode()
    if sender:
        sendmail(c, "", [sender], notice(c, sender, "verification-failure", "VERIFICATION FAILED: " + subject, msgid, text))
    sendmail(c, sender, rcpts, tagged(raw, "verification-failed; reason=%s" % reason.replace(" ", "-")))


def corpus(cdir, out, count, size, kind):
    """count .eml files of about size bytes in out: plain, signed (by the bed's certmail
    certificate), tampered (signed, then one byte of the signed text changed) or malformed
    (an unencoded 8-bit Subject). From/To are placeholders: spate rewrites them."""
    os.makedirs(out, exist_ok=True)
    words = "certified mail carries a signature that proves who sent what and when".split()
    for k in range(count):
        lines, n, i = [], 0, k
        while n < size:
            line = " ".join(words[(i + j) % len(words)] for j in range(11)) + " %d" % i
            lines.append(line)
            n += len(line) + 2
            i += 1
        entity = ("Content-Type: text/plain; charset=us-ascii\r\n\r\n" + "\r\n".join(lines) + "\r\n").encode()
        subject = b"certified message %d" % k
        if kind == "malformed":
            subject += b" caf\xe9 cr\xe8me"
        head = (b"From: <sender@example.test>\r\nTo: <rcpt@example.test>\r\nSubject: " + subject
                + b"\r\nDate: " + time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime()).encode() + b"\r\n")
        if kind in ("signed", "tampered"):
            p = openssl(["cms", "-sign", "-signer", os.path.join(cdir, "signer.pem"), "-inkey",
                         os.path.join(cdir, "signer.key"), "-md", "sha256", "-outform", "SMIME"], entity)
            if p.returncode != 0:
                sys.exit("openssl cms -sign: " + p.stderr.decode(errors="replace"))
            body = p.stdout
            if kind == "tampered":
                body = body.replace(b"certified mail carries", b"certified mail carried", 1)
            msg = head + body
        else:
            msg = head + b"MIME-Version: 1.0\r\n" + entity
        # one line ending throughout (openssl writes its own headers with LF): CRLF
        msg = msg.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
        with open(os.path.join(out, "%s-%02d.eml" % (kind, k)), "wb") as f:
            f.write(msg)


def main():
    if len(sys.argv) == 7 and sys.argv[1] == "corpus":
        corpus(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
        return
    if len(sys.argv) < 5 or sys.argv[1] not in ("sign", "verify"):
        fail(EX_DATAERR, "5.3.5 usage: certmail.py sign|verify DIR SENDER RECIPIENT...")
    mode, cdir, sender, rcpts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    c = conf(cdir)
    try:
        with open(os.path.join(cdir, "fault"), encoding="ascii") as f:
            fault = f.read().strip()
    except OSError:
        fault = "none"
    raw = sys.stdin.buffer.read()
    if fault == "crash":
        os.abort()  # killed by a signal: pipe(8) defers the message and Postfix retries
    head, _ = split(raw)
    problem = nonconformant(head)
    if problem:
        fail(EX_DATAERR, "5.6.0 certified mail: non-conformant header: " + problem)
    if not header(head, "From"):
        fail(EX_DATAERR, "5.6.0 certified mail: no From header")
    if mode == "sign":
        sign(c, cdir, sender, rcpts, raw, head, fault)
    else:
        verify(c, cdir, sender, rcpts, raw, head)


if __name__ == "__main__":
    main()
