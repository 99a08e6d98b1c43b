"""What admitting a request costs: the key lookup and limit checks a
generating request passes, with 1,000 managed keys, each with rpm, tpm,
daily_tokens and max_concurrent limits.

    python benchmarks/admission.py [--keys 1000] [--requests 20000] [--storage memory://|redis://HOST:PORT]

Rows (microseconds per request, p50 / p99 / max, over --requests requests
spread over the keys; wall time, and this thread's CPU time, which a
preemption by another process on a shared machine does not inflate):
- tenants alone: identify (hash + lookup) -> enter (lease, rpm) -> admit
  (scope, tpm and daily reservation), which is admission in `inferd serve`;
  identify -> admit (all of it in one step), which is admission in `inferd
  router`; settle (refund, lease back, ledger), which comes after the
  answer; with Redis, a bare PING beside them (each step is one round trip);
- the door: the same through `http/auth.py`'s ASGI middleware around an app
  that admits and answers at once, side by side with the middleware with no
  keys (auth off) in the same run; the difference is admission's cost.
  "admission" is up to the answer's first message (identify, enter, admit:
  what a request waits for before it runs); "whole" adds settling after the
  answer. Each request ends with a turn of the event loop, as a server's
  requests do, so work a request leaves on the loop counts against it.

Every key is used once before measuring (its first request of the day reads
the ledger), as in a server that has been up a while. Rounds alternate
between the two doors; only ratios and differences are comparable across
runs on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import random
import statistics
import time

from inferd.http.auth import ApiKeyAuth
from inferd.http.request_context import current_request
from inferd.kernels import isa
from inferd.tenants.gate import Tenants, Ticket
from inferd.tenants.keyring import KeyRing
from inferd.tenants.ledger import Ledger
from inferd.tenants.limiter import Limiter

PATH = "/v1/chat/completions"
BIG = 10**9  # limits no benchmark request reaches: every check runs, none refuses


def tenants_with(keys: int, storage: str) -> tuple[Tenants, list[bytes]]:
    ring = KeyRing(bootstrap=["bench-admin"])
    limits = {"rpm": BIG, "tpm": BIG, "daily_tokens": BIG, "max_concurrent": 64, "scopes": ("bench",)}
    secrets = [ring.add(f"key-{i}", limits)[1].encode() for i in range(keys)]
    tenants = Tenants(ring, Limiter(storage), Ledger(ring))
    return tenants, secrets


def percentiles(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)
    return (statistics.median(ordered) * 1e6, ordered[int(len(ordered) * 0.99) - 1] * 1e6, ordered[-1] * 1e6)


async def tenants_alone(tenants: Tenants, secrets: list[bytes], n: int, *, door: bool = True) -> tuple[list, list]:
    """(admission: identify, enter, admit, or identify and admit in one step as the router does;
    settling), each (wall, CPU) per request."""
    rng = random.Random(1)
    admitting, settling = [], []
    for _ in range(n):
        secret = rng.choice(secrets)
        start, cpu = time.perf_counter(), time.thread_time()
        ticket = Ticket(tenants.identify([secret]), generating=True)
        if door:
            await tenants.enter(ticket)
        await tenants.admit(ticket, "bench", 300)
        admitted, admitted_cpu = time.perf_counter(), time.thread_time()
        ticket.meters.append(lambda: (100, 50, 0))
        await tenants.settle(ticket, 200)
        admitting.append((admitted - start, admitted_cpu - cpu))
        settling.append((time.perf_counter() - admitted, time.thread_time() - admitted_cpu))
    return admitting, settling


async def round_trips(tenants: Tenants, n: int) -> list:
    """A bare PING on the counters' Redis connection: the floor under each step."""
    connection = tenants.limiter.counters.storage.bridge.get_connection()
    samples = []
    for _ in range(n):
        start, cpu = time.perf_counter(), time.thread_time()
        await connection.ping()
        samples.append((time.perf_counter() - start, time.thread_time() - cpu))
    return samples


ADMITTED: list[tuple[float, float]] = []  # (wall, CPU) clock readings as each answer starts


async def admitting_app(scope, receive, send):
    ctx = current_request()
    if ctx is not None and ctx.ticket is not None:
        await ctx.tenants.admit(ctx.ticket, "bench", 300)
        ctx.ticket.meters.append(lambda: (100, 50, 0))
    ADMITTED.append((time.perf_counter(), time.thread_time()))
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"{}", "more_body": False})


async def through_door(door: ApiKeyAuth, secrets: list[bytes], n: int) -> tuple[list, list]:
    """(admission: until the answer starts; the whole request, settling and a turn of the loop included),
    each (wall, CPU) per request."""
    rng = random.Random(2)

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        pass

    admitting, whole = [], []
    for _ in range(n):
        headers = [(b"authorization", b"Bearer " + rng.choice(secrets))] if secrets else []
        scope = {"type": "http", "method": "POST", "path": PATH, "headers": headers}
        ADMITTED.clear()
        start, cpu = time.perf_counter(), time.thread_time()
        await door(scope, receive, send)
        await asyncio.sleep(0)  # the loop's turn between requests: what they scheduled runs
        whole.append((time.perf_counter() - start, time.thread_time() - cpu))
        admitting.append((ADMITTED[0][0] - start, ADMITTED[0][1] - cpu))
    return admitting, whole


def respond(path, err):
    raise AssertionError(f"refused: {err.message}")


async def main(args) -> None:
    tenants, secrets = tenants_with(args.keys, args.storage)
    managed = ApiKeyAuth(admitting_app, lambda: tenants, (), respond, generating=lambda p: p == PATH)
    open_door = ApiKeyAuth(admitting_app, lambda: None, (), respond, generating=lambda p: p == PATH)
    for secret in secrets:  # each key's first request of the day, which reads the ledger
        ticket = Ticket(tenants.identify([secret]), generating=True)
        await tenants.admit(ticket, "bench", 1)
        await tenants.settle(ticket, 200)
    await tenants_alone(tenants, secrets, 1000)  # warm-up
    admitting, settling, one_step, pings = [], [], [], []
    keyed, unkeyed = ([], []), ([], [])  # (admission, whole) each
    rounds = 5
    for r in range(rounds):
        a, s = await tenants_alone(tenants, secrets, args.requests // rounds)
        admitting += a
        settling += s
        one_step += (await tenants_alone(tenants, secrets, args.requests // rounds, door=False))[0]
        if not tenants.limiter.in_memory:
            pings += await round_trips(tenants, args.requests // rounds)
        pair = [(keyed, managed, secrets), (unkeyed, open_door, [])]
        for samples, door, keys in (pair if r % 2 == 0 else pair[::-1]):
            admitted, whole = await through_door(door, keys, args.requests // rounds)
            samples[0].extend(admitted)
            samples[1].extend(whole)
    print(f"# {args.keys} keys, {args.requests} requests, storage {args.storage}; "
          f"{platform.processor() or platform.machine()}, ISA {isa.selected()}")
    print(f"{'':34} {'wall p50':>9} {'p99':>8} {'max':>9}   {'CPU p50':>8} {'p99':>8} {'max':>8}   (us)")
    rows = (("tenants: identify + enter + admit", admitting), ("tenants: identify + admit (router)", one_step),
            ("tenants: settle", settling),
            ("tenants: all four", [(a[0] + b[0], a[1] + b[1]) for a, b in zip(admitting, settling)]),
            ("door, managed keys: admission", keyed[0]), ("door, no keys: admission", unkeyed[0]),
            ("door, managed keys: whole", keyed[1]), ("door, no keys: whole", unkeyed[1]),
            ("Redis PING (one round trip)", pings))
    for label, samples in rows:
        if not samples:
            continue
        wall, cpu = percentiles([w for w, _ in samples]), percentiles([c for _, c in samples])
        print(f"{label:34} {wall[0]:9.1f} {wall[1]:8.1f} {wall[2]:9.1f}   {cpu[0]:8.1f} {cpu[1]:8.1f} {cpu[2]:8.1f}")
    for part, j in (("admission", 0), ("whole", 1)):
        for kind, i in (("wall", 0), ("CPU", 1)):
            k, u = percentiles([s[i] for s in keyed[j]]), percentiles([s[i] for s in unkeyed[j]])
            print(f"door {part}, {kind} (keyed - unkeyed): p50 {k[0] - u[0]:.1f} us, p99 {k[1] - u[1]:.1f} us")
    tenants.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--storage", default="memory://")
    asyncio.run(main(parser.parse_args()))
