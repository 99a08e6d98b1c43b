"""Tenants: managed API keys with scopes and limits, their rate counters and
their usage ledger. Knows no engine, no dialect and no HTTP: the server and
the router call it at their doors (`http/auth.py`, `serving/admission.py`)
and turn its refusals into their dialects' errors.

    secrets.py  a key's secret: made, hashed, shown by prefix
    keys.py     the key record and its validation (names, scopes, limits)
    store.py    SQLite (WAL) under the data dir: keys (hashes only) and usage
    store_watch.py  keys edited there by another process, taken without a restart
    keyring.py  the keys in memory, bootstrap keys beside them; lookups by hash
    limiter.py  rpm, tpm, daily tokens and concurrency on `limits` counters
    counters.py those counters in memory (fixed windows in a dict), or in Redis:
    redis_counters.py  one Lua script per step (imported only when Redis is used)
    redis_scripts.py  those scripts, run on connections of their own
    ledger.py   usage per key, model and UTC day, written to the store in batches
    gate.py     one request's way through: identify, admit, settle
"""
