#!/usr/bin/env python3
# store-cost.py — the mail store's cost of a delivery, for experiment E2's queue variant
# (`scripts/testbed up --delivery-cost 44ms[+1ms/KB]`): an LMTP relay between Postfix and
# Dovecot on unix sockets that makes every delivered message cost the store COST, one
# message at a time, as one 2003 disk did. Postfix's lmtp clients connect here; each
# message's end of data (the "." line) waits until the store is free, holds it for
# PER_MESSAGE + size/1024 * PER_KB seconds, and only then goes on to Dovecot, so delivery
# runs at most at 1/COST messages a second however many lmtp processes Postfix starts.
# Nothing else is changed: every byte is passed on as it came, in order.
#
#   store-cost.py LISTEN_SOCKET TARGET_SOCKET COST_FILE STATS_FILE
#
# COST_FILE holds "PER_MESSAGE_S PER_KB_S" (decimal seconds), read again at most every
# 0.2 s, so the cost can change while the relay runs. STATS_FILE is rewritten after every
# delivery (before it goes on to Dovecot) and every second, with "messages=N held_s=S
# bytes=B": the deliveries that paid the cost, the seconds the store was held, their bytes.
#
# Bounded: at most MAX_CONNS connections at once, lines of at most LINE_LIMIT bytes (a
# longer one ends that connection, Postfix retries the message later).
import asyncio
import os
import sys
import time

MAX_CONNS = 256
LINE_LIMIT = 1 << 20


class Store:
    def __init__(self, cost_file, stats_file):
        self.lock = asyncio.Lock()
        self.cost_file = cost_file
        self.stats_file = stats_file
        self.cost = (0.0, 0.0)
        self.read_at = 0.0
        self.messages = 0
        self.held = 0.0
        self.bytes = 0
        self.written_at = 0.0
        self.conns = 0

    def current_cost(self):
        now = time.monotonic()
        if now - self.read_at > 0.2:
            try:
                with open(self.cost_file, encoding="ascii") as f:
                    per_msg, per_kb = (float(x) for x in f.read().split()[:2])
                self.cost = (max(0.0, per_msg), max(0.0, per_kb))
            except (OSError, ValueError):
                pass
            self.read_at = now
        return self.cost

    async def deliver(self, size):
        per_msg, per_kb = self.current_cost()
        hold = per_msg + size / 1024.0 * per_kb
        async with self.lock:
            if hold > 0:
                await asyncio.sleep(hold)
            self.messages += 1
            self.held += hold
            self.bytes += size
            # Written before the end of data goes on to Dovecot: once a message is in its
            # mailbox, the stats already count it.
            self.write_stats(True)

    def write_stats(self, force):
        now = time.monotonic()
        if not force and now - self.written_at < 1.0:
            return
        self.written_at = now
        tmp = self.stats_file + ".tmp"
        with open(tmp, "w", encoding="ascii") as f:
            f.write(f"messages={self.messages} held_s={self.held:.3f} bytes={self.bytes}\n")
        os.replace(tmp, self.stats_file)


class Conn:
    """One LMTP connection's state, shared by its two directions."""

    def __init__(self):
        self.pending = []  # commands (and end-of-data replies) whose reply is still due
        self.in_data = False
        self.accepted_rcpts = 0


async def client_to_server(conn, store, reader, writer):
    size = 0
    try:
        while True:
            line = await reader.readuntil(b"\n")
            if conn.in_data:
                if line == b".\r\n" or line == b".\n":
                    await store.deliver(size)
                    conn.in_data = False
                    # LMTP: one reply per accepted recipient after the end of data
                    conn.pending.extend(["EOD"] * max(1, conn.accepted_rcpts))
                    size = 0
                else:
                    size += len(line)
            else:
                verb = line.split(b" ", 1)[0].strip().upper()
                if verb == b"MAIL":
                    conn.accepted_rcpts = 0
                conn.pending.append(verb.decode("ascii", "replace"))
            writer.write(line)
            await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def server_to_client(conn, reader, writer):
    try:
        while True:
            line = await reader.readuntil(b"\n")
            final = len(line) < 4 or line[3:4] != b"-"
            if final and conn.pending:
                cmd = conn.pending.pop(0)
                code = line[:3]
                if cmd == "RCPT" and code.startswith(b"2"):
                    conn.accepted_rcpts += 1
                elif cmd == "DATA" and code == b"354":
                    conn.in_data = True  # before the 354 reaches the client: its body follows
            writer.write(line)
            await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def main():
    listen, target, cost_file, stats_file = sys.argv[1:5]
    store = Store(cost_file, stats_file)
    store.write_stats(True)

    async def handle(creader, cwriter):
        if store.conns >= MAX_CONNS:
            cwriter.close()
            return
        store.conns += 1
        try:
            sreader, swriter = await asyncio.open_unix_connection(target, limit=LINE_LIMIT)
        except OSError:
            store.conns -= 1
            cwriter.close()
            return
        conn = Conn()
        try:
            await asyncio.gather(
                client_to_server(conn, store, creader, swriter),
                server_to_client(conn, sreader, cwriter),
            )
        finally:
            store.conns -= 1
            store.write_stats(True)

    try:
        os.unlink(listen)
    except FileNotFoundError:
        pass
    server = await asyncio.start_unix_server(handle, path=listen, limit=LINE_LIMIT)
    os.chmod(listen, 0o666)  # Postfix's lmtp client runs as the postfix user

    async def stats_every_second():
        while True:
            await asyncio.sleep(1.0)
            store.write_stats(True)

    ticker = asyncio.ensure_future(stats_every_second())
    try:
        async with server:
            await server.serve_forever()
    finally:
        ticker.cancel()


if __name__ == "__main__":
    asyncio.run(main())
