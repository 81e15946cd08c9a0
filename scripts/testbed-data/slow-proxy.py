#!/usr/bin/env python3
# slow-proxy.py — a delaying TCP proxy on loopback, for experiment E2's slow directory
# (`scripts/testbed ldap-slow DELAY`): Postfix's LDAP lookups go through it to slapd, and
# every answer from slapd is held DELAY seconds before the client gets it, in order. Only
# this one port is slowed (not all of lo, as `tc netem` would). The delay is read from
# DELAY_FILE (seconds, a decimal) when each answer arrives, so it can change while the
# proxy runs.
#
#   slow-proxy.py LISTEN_PORT TARGET_PORT DELAY_FILE
#
# Bounded: at most MAX_CONNS connections at once, at most MAX_HELD bytes held per
# connection (beyond that it stops reading from slapd until the client caught up).
import asyncio
import sys
import time

MAX_CONNS = 1024
MAX_HELD = 4 << 20


def delay(path, cache=[0.0, 0.0]):
    now = time.monotonic()
    if now - cache[1] > 0.2:
        try:
            with open(path, encoding="ascii") as f:
                cache[0] = max(0.0, float(f.read().strip() or 0))
        except (OSError, ValueError):
            pass
        cache[1] = now
    return cache[0]


async def pump(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def slow_pump(reader, writer, path):
    held = asyncio.Queue()
    size = [0]

    async def send():
        try:
            while True:
                due, data = await held.get()
                if data is None:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                size[0] -= len(data)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    sender = asyncio.ensure_future(send())
    try:
        while not sender.done():
            while size[0] > MAX_HELD and not sender.done():
                await asyncio.sleep(0.01)
            data = await reader.read(65536)
            if not data:
                break
            size[0] += len(data)
            held.put_nowait((time.monotonic() + delay(path), data))
    except (ConnectionError, OSError):
        pass
    held.put_nowait((0.0, None))
    await sender


async def main():
    listen, target, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    slots = asyncio.Semaphore(MAX_CONNS)

    async def handle(creader, cwriter):
        async with slots:
            try:
                sreader, swriter = await asyncio.open_connection("127.0.0.1", target)
            except OSError:
                cwriter.close()  # slapd is down: the client sees the connection close
                return
            await asyncio.gather(pump(creader, swriter), slow_pump(sreader, cwriter, path))

    server = await asyncio.start_server(handle, "127.0.0.1", listen, backlog=512)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
