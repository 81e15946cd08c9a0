#!/usr/bin/env python3
"""XMPP over WebSocket (RFC 7395) check against the test bed's server, standard library only.

    xmpp_ws_check.py URL DOMAIN USER PASSWORD [--idle SECONDS]

URL is SPATE_XMPP_WS (ws://127.0.0.1:PORT/xmpp-websocket), USER a local part (user0).
Session 1: upgrade with Sec-WebSocket-Protocol: xmpp (101, Sec-WebSocket-Accept, subprotocol
echoed), <open/>, SASL PLAIN, <open/> again, bind, a message to itself (must come back), an
XEP-0199 iq ping, a WebSocket ping, --idle seconds of silence (server pings answered with
pongs and timed), <close/> and what follows it. Session 2: two messages in ONE WebSocket
message (does the server take both?). Session 3: a stanza without an xmlns attribute.
Session 4: a WebSocket close frame instead of <close/>.
Prints every frame both ways with its time; exit status 0 when the session-1 steps passed.
Only 127.0.0.1 is accepted as the host.
"""
import base64
import hashlib
import os
import socket
import sys
import time
import xml.etree.ElementTree as ET

FRAMING = "urn:ietf:params:xml:ns:xmpp-framing"
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
T0 = time.monotonic()


def log(direction, text):
    print("%7.3f %s %s" % (time.monotonic() - T0, direction, text), flush=True)


class Closed(Exception):
    pass


class WS:
    def __init__(self, url):
        assert url.startswith("ws://"), url
        hostport, _, path = url[5:].partition("/")
        host, _, port = hostport.partition(":")
        if host != "127.0.0.1":
            sys.exit("only 127.0.0.1 is allowed, not %s" % host)
        self.sock = socket.create_connection((host, int(port or 80)), timeout=10)
        self.buf = b""
        self.pings = []  # times of server pings
        key = base64.b64encode(os.urandom(16)).decode()
        req = ("GET /%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
               "Sec-WebSocket-Protocol: xmpp\r\n\r\n" % (path, hostport, key))
        log("C>", "HTTP upgrade GET /%s (Sec-WebSocket-Protocol: xmpp)" % path)
        self.sock.sendall(req.encode())
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        log("S>", "HTTP response:\n    " + "\n    ".join(lines))
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        status = lines[0].split()[1]
        want = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        self.handshake = {
            "status 101": status == "101",
            "accept ok": headers.get("sec-websocket-accept") == want,
            "protocol xmpp": headers.get("sec-websocket-protocol") == "xmpp",
        }
        log("..", "handshake checks: %s" % self.handshake)
        if status != "101":
            raise SystemExit("no upgrade")

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise Closed("TCP connection closed by the server")
        self.buf += data

    def _need(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send_frame(self, opcode, payload=b""):
        mask = os.urandom(4)
        n = len(payload)
        if n < 126:
            head = bytes([0x80 | opcode, 0x80 | n])
        elif n < 65536:
            head = bytes([0x80 | opcode, 0x80 | 126]) + n.to_bytes(2, "big")
        else:
            head = bytes([0x80 | opcode, 0x80 | 127]) + n.to_bytes(8, "big")
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + body)

    def send(self, text):
        log("C>", text)
        self.send_frame(1, text.encode())

    def recv_frame(self):
        b0, b1 = self._need(2)
        fin, opcode, masked, n = b0 & 0x80, b0 & 0x0F, b1 & 0x80, b1 & 0x7F
        if n == 126:
            n = int.from_bytes(self._need(2), "big")
        elif n == 127:
            n = int.from_bytes(self._need(8), "big")
        mask = self._need(4) if masked else None
        data = self._need(n)
        if mask:
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        return bool(fin), opcode, bool(masked), data

    def recv(self, timeout=10):
        """The next text message; control frames are logged (pings answered) on the way."""
        deadline = time.monotonic() + timeout
        parts = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("timed out")
            self.sock.settimeout(left)
            fin, opcode, masked, data = self.recv_frame()
            if masked:
                log("!!", "server frame is masked (RFC 6455 forbids it)")
            if opcode == 9:
                self.pings.append(time.monotonic() - T0)
                log("S>", "WebSocket PING (%d bytes payload) -> answering PONG" % len(data))
                self.send_frame(10, data)
                continue
            if opcode == 10:
                log("S>", "WebSocket PONG %r" % data)
                continue
            if opcode == 8:
                code = int.from_bytes(data[:2], "big") if len(data) >= 2 else None
                log("S>", "WebSocket CLOSE code=%s reason=%r" % (code, data[2:].decode(errors="replace")))
                raise Closed("close frame %s" % code)
            parts.append(data)
            if not fin:
                log("S>", "(fragment of %d bytes, opcode %d)" % (len(data), opcode))
                continue
            text = b"".join(parts).decode()
            log("S>", text)
            return text

    def recv_until(self, pred, timeout=10):
        got = []
        deadline = time.monotonic() + timeout
        while True:
            text = self.recv(max(0.1, deadline - time.monotonic()))
            got.append(text)
            if pred(text):
                return got


def root(text):
    """(namespace, local name, element) of one message, or (None, None, None) if not one element."""
    try:
        el = ET.fromstring(text)
    except ET.ParseError:
        return None, None, None
    if el.tag.startswith("{"):
        ns, _, name = el.tag[1:].partition("}")
        return ns, name, el
    return "", el.tag, el


def login(url, domain, user, password, resource):
    ws = WS(url)
    ws.send('<open xmlns="%s" to="%s" version="1.0"/>' % (FRAMING, domain))
    ws.recv_until(lambda t: root(t)[1] == "features")
    auth = base64.b64encode(("\0%s\0%s" % (user, password)).encode()).decode()
    ws.send('<auth xmlns="urn:ietf:params:xml:ns:xmpp-sasl" mechanism="PLAIN">%s</auth>' % auth)
    got = ws.recv_until(lambda t: root(t)[1] in ("success", "failure"))
    if root(got[-1])[1] != "success":
        raise SystemExit("SASL PLAIN failed")
    ws.send('<open xmlns="%s" to="%s" version="1.0"/>' % (FRAMING, domain))
    ws.recv_until(lambda t: root(t)[1] == "features")
    ws.send('<iq xmlns="jabber:client" type="set" id="bind1"><bind xmlns="urn:ietf:params:xml:ns:xmpp-bind">'
            '<resource>%s</resource></bind></iq>' % resource)
    got = ws.recv_until(lambda t: root(t)[1] == "iq")
    ns, name, el = root(got[-1])
    jid = el.find(".//{urn:ietf:params:xml:ns:xmpp-bind}jid")
    if el.get("type") != "result" or jid is None:
        raise SystemExit("bind failed")
    return ws, jid.text


def main():
    args = sys.argv[1:]
    idle = 0.0
    if "--idle" in args:
        i = args.index("--idle")
        idle = float(args[i + 1])
        del args[i:i + 2]
    if len(args) != 4:
        sys.exit(__doc__)
    url, domain, user, password = args
    ok = {}

    print("=== session 1")
    ws, jid = login(url, domain, user, password, "ws1")
    ok.update(ws.handshake)
    ok["login+bind"] = True
    log("..", "bound as %s" % jid)

    ws.send('<message xmlns="jabber:client" to="%s" type="chat" id="m1"><body>with xmlns</body></message>' % jid)
    got = ws.recv_until(lambda t: 'id="m1"' in t or "id='m1'" in t)
    ns, name, el = root(got[-1])
    ok["message with xmlns echoed"] = name == "message" and el.get("type") != "error"
    log("..", "server's message element namespace: %r" % ns)

    ws.send('<iq xmlns="jabber:client" to="%s" type="get" id="p1"><ping xmlns="urn:xmpp:ping"/></iq>' % domain)
    got = ws.recv_until(lambda t: 'id="p1"' in t or "id='p1'" in t)
    ok["iq ping answered"] = root(got[-1])[2].get("type") == "result"

    log("C>", "WebSocket PING 'hi'")
    ws.send_frame(9, b"hi")
    ws.sock.settimeout(5)
    fin, opcode, masked, data = ws.recv_frame()
    log("S>", "frame opcode %d payload %r" % (opcode, data))
    ok["client ping answered with pong"] = opcode == 10 and data == b"hi"

    if idle > 0:
        log("..", "idle for %.0f s, watching for server pings" % idle)
        end = time.monotonic() + idle
        try:
            while time.monotonic() < end:
                try:
                    ws.recv(timeout=max(0.1, end - time.monotonic()))
                except socket.timeout:
                    break
        except Closed as e:
            log("..", "closed while idle: %s" % e)
        log("..", "server pings at %s (seconds since start)" % ["%.1f" % t for t in ws.pings])

    ws.send('<close xmlns="%s"/>' % FRAMING)
    try:
        while True:
            ws.recv(timeout=10)
    except Closed as e:
        log("..", "after <close/>: %s" % e)
    except socket.timeout:
        log("..", "after <close/>: nothing more within 10 s, connection still open")
    try:
        ws.sock.settimeout(10)
        rest = ws.sock.recv(65536)
        log("..", "after that: %s" % ("TCP EOF" if not rest else "more bytes %r" % rest[:80]))
    except OSError as e:
        log("..", "after that: %s" % e)
    ws.sock.close()

    print("=== session 2: two stanzas in one WebSocket message")
    ws, jid = login(url, domain, user, password, "ws2")
    ws.send('<message xmlns="jabber:client" to="%s" id="d1"><body>one</body></message>'
            '<message xmlns="jabber:client" to="%s" id="d2"><body>two</body></message>' % (jid, jid))
    seen = []
    try:
        while len(seen) < 2:
            t = ws.recv(timeout=5)
            for i in ("d1", "d2"):
                if 'id="%s"' % i in t or "id='%s'" % i in t:
                    seen.append(i)
    except (Closed, socket.timeout) as e:
        log("..", "stopped: %r" % e)
    log("..", "of the two messages sent in one WebSocket message, came back: %s" % seen)
    try:
        ws.send('<close xmlns="%s"/>' % FRAMING)
        while True:
            ws.recv(timeout=5)
    except (Closed, socket.timeout, OSError) as e:
        log("..", "end of session 2: %r" % e)
    ws.sock.close()

    print("=== session 3: a stanza without any xmlns attribute")
    ws, jid = login(url, domain, user, password, "ws3")
    ws.send('<message to="%s" type="chat" id="m2"><body>without xmlns</body></message>' % jid)
    try:
        got = ws.recv_until(lambda t: 'id="m2"' in t or "id='m2'" in t, timeout=5)
        ns, name, el = root(got[-1])
        info = "came back: %s" % ("yes" if name == "message" and el.get("type") != "error" else got[-1])
    except (Closed, socket.timeout) as e:
        info = "refused: %r" % e
    log("..", "message without xmlns: %s" % info)
    try:
        ws.send('<close xmlns="%s"/>' % FRAMING)
        while True:
            ws.recv(timeout=5)
    except (Closed, socket.timeout, OSError) as e:
        log("..", "end of session 3: %r" % e)
    ws.sock.close()

    print("=== session 4: a WebSocket close frame (1000) instead of <close/>")
    ws, jid = login(url, domain, user, password, "ws4")
    log("C>", "WebSocket CLOSE 1000")
    ws.send_frame(8, (1000).to_bytes(2, "big") + b"bye")
    try:
        while True:
            ws.recv(timeout=5)
    except (Closed, socket.timeout, OSError) as e:
        log("..", "after the close frame: %r" % e)
    try:
        ws.sock.settimeout(5)
        rest = ws.sock.recv(65536)
        log("..", "after that: %s" % ("TCP EOF" if not rest else "more bytes %r" % rest[:80]))
    except OSError as e:
        log("..", "after that: %r" % e)
    ws.sock.close()

    print("=== results")
    for k, v in ok.items():
        print("%-40s %s" % (k, "ok" if v else "FAILED"))
    return 0 if all(ok.values()) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (Closed, OSError) as e:
        sys.exit("FAILED: %r" % e)
