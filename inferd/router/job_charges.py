"""Batch and background items charged to the router's callers.

A router forwards an interactive request and reads its usage as the answer
passes (`admission.py`); a job's items run later on the worker, long after
the request that made the job was answered. So a worker keeps what each item
of a job made on a caller's behalf used (`jobs/store.py` charges, written
with the item's result) and the router claims them, each once, from every
worker in turn, into its usage ledger under the caller's key (and, for a key
with a daily allowance, its daily counter): /api/usage through the router
counts a key's batches as it counts its chat requests. A worker that cannot
be reached keeps its charges for the next pass.
"""

from __future__ import annotations

import asyncio
import logging

import httpx

from inferd.router.worker import Worker
from inferd.tenants.keyring import KeyNotFound

log = logging.getLogger(__name__)

CLAIM_PATH = "/v1/job-charges/claim"  # api/openai/jobs.py CHARGES_PATH
CLAIM_SECONDS = 2.0
CLAIM_TIMEOUT = 10.0
PAGE = 1000
# A background response's job id is its response id: the router admitted, and counted, the request that
# queued it, so its run adds tokens but no request.
COUNTED_AT_QUEUING = ("resp_",)


async def claim_charges(state) -> int:
    """One pass over the fleet: every charge each worker holds goes into the ledger; the number taken."""
    tenants = state.tenants
    if tenants is None or not tenants.enabled:  # no keys here: the charges wait for a router that has them
        return 0
    taken = 0
    for worker in [w for w in state.fleet.workers.values() if w.routable]:
        taken += await _claim_from(state, worker)
    return taken


async def _claim_from(state, worker: Worker) -> int:
    taken = 0
    while True:
        try:
            r = await state.client.post(f"{worker.url}{CLAIM_PATH}", params={"limit": PAGE},
                                        headers=state.worker_headers, timeout=CLAIM_TIMEOUT)
        except httpx.HTTPError as e:
            log.debug("claiming job charges from worker %s failed: %s", worker.id, e)
            return taken
        if r.status_code != 200:  # not an inferd worker, no jobs there, or a worker key that is not an admin's
            if r.status_code == 403:
                log.warning("worker %s refused the job charges claim (%s): its batch usage is not charged here",
                            worker.id, r.text[:200])
            return taken
        try:
            page = r.json()
            charges = page["data"]
        except (ValueError, KeyError, TypeError):
            return taken
        for charge in charges:
            await _charge(state.tenants, charge)
        taken += len(charges)
        if not page.get("has_more"):
            return taken


async def _charge(tenants, charge: dict) -> None:
    try:
        owner, model, day = str(charge["owner"]), str(charge["model"]), str(charge["day"])
        prompt, completion, cached = (int(charge[f"{n}_tokens"]) for n in ("prompt", "completion", "cached"))
    except (KeyError, TypeError, ValueError):
        log.warning("a job charge the router cannot read was dropped: %r", charge)
        return
    requests = 0 if str(charge.get("job_id", "")).startswith(COUNTED_AT_QUEUING) else 1
    tenants.ledger.record(owner, model, day, prompt, completion, cached, bool(charge.get("error")), requests)
    try:
        key = tenants.ring.get(owner)
    except KeyNotFound:  # removed since: its usage is kept under its name all the same
        return
    if key.limits.daily_tokens:
        try:
            await tenants.limiter.count_daily(key, day, prompt + completion)
        except Exception:  # a counter store gone away: the ledger has it, the allowance is not held to it
            log.exception("counting %s's batch tokens against its daily allowance failed", owner)


async def run_charge_claims(state, interval: float = CLAIM_SECONDS) -> None:
    while True:
        try:
            await claim_charges(state)
        except Exception:
            log.exception("claiming job charges failed; trying again in %.0f s", interval)
        await asyncio.sleep(interval)
