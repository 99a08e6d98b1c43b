"""The counters' Lua scripts, run on Redis connections of their own.

The connections are redis-py's, made by the `limits` storage's pool (so its
address, credentials, database and TLS), but used directly: EVALSHA
written, its reply read, the connection kept for the next step. redis-py's
client wraps every command in a pool lock, a retry policy and observability
hooks that cost about as much CPU again as the round trip itself
(`benchmarks/admission.py`), on every generating request.

A script Redis does not hold (restarted, flushed) is sent whole once
(EVAL), which makes Redis keep it. A connection that failed or was
interrupted mid-reply is closed, never reused; an idle one the server has
closed meanwhile is replaced once, at once.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

_LOST = (RedisConnectionError, RedisTimeoutError, OSError)


class Script:
    def __init__(self, body: str):
        self.body = body
        self.sha = hashlib.sha1(body.encode()).hexdigest()  # the name Redis keeps a script under


class ScriptRunner:
    def __init__(self, pool):
        self._pool = pool  # a redis.asyncio ConnectionPool: only its make_connection is used
        self._idle: list = []
        self._loop: asyncio.AbstractEventLoop | None = None

    async def run(self, script: Script, keys: Sequence[str], args: Sequence) -> object:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # connections belong to the loop that opened them
            self._loop, self._idle = loop, []
        reused = bool(self._idle)
        connection = self._idle.pop() if reused else self._pool.make_connection()
        try:
            reply = await _evaluate(connection, script, keys, args)
        except _LOST:
            await connection.disconnect(nowait=True)
            if not reused:
                raise
            connection = self._pool.make_connection()  # the server closed an idle one: a new one, once
            try:
                reply = await _evaluate(connection, script, keys, args)
            except BaseException:
                await connection.disconnect(nowait=True)
                raise
        except ResponseError:  # the script's own error, answered in full: the connection is sound
            self._idle.append(connection)
            raise
        except BaseException:  # cancelled mid-reply: what comes next on it would answer the wrong step
            await connection.disconnect(nowait=True)
            raise
        self._idle.append(connection)
        return reply


async def _evaluate(connection, script: Script, keys: Sequence[str], args: Sequence) -> object:
    await connection.connect()  # nothing when connected
    try:
        await connection.send_command("EVALSHA", script.sha, len(keys), *keys, *args, check_health=False)
        return await connection.read_response()
    except NoScriptError:
        await connection.send_command("EVAL", script.body, len(keys), *keys, *args, check_health=False)
        return await connection.read_response()
