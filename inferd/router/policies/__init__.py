"""Routing policies, one file each behind `policies.base.Policy`."""

from __future__ import annotations

from collections.abc import Callable

from inferd.router.policies.base import Policy
from inferd.router.policies.direct import DirectPolicy
from inferd.router.policies.kv_aware import KvAwarePolicy
from inferd.router.policies.least_load import LeastLoadPolicy
from inferd.router.policies.precise import PrecisePolicy
from inferd.router.policies.round_robin import RoundRobinPolicy

POLICIES = ("kv-aware", "precise", "round-robin", "least-load", "direct")
DEFAULT_POLICY = "kv-aware"

KV_AWARE_OPTIONS = ("cache_threshold", "balance_abs", "balance_rel", "max_tree_chars")


def make_policy(name: str, **options) -> Policy:
    """The policy called `name` (one of POLICIES), built with `options`.

    An option given as None takes the policy's default, so a CLI may pass
    every flag it has; an option the policy does not take is a TypeError.

        kv-aware    cache_threshold, balance_abs, balance_rel, max_tree_chars
        precise     kv_overlap_weight, index, and kv-aware's (its fallback)
        direct      fallback (a policy or its name; least-load), lookup, and the
                    fallback's when it is given by name
        round-robin, least-load: none
    """
    if name not in POLICIES:
        raise ValueError(f"unknown routing policy {name!r}; choose one of {', '.join(POLICIES)}")
    given = {k: v for k, v in options.items() if v is not None}
    if name == "direct":
        fallback = given.pop("fallback", "least-load")
        lookup = given.pop("lookup", None)
        if isinstance(fallback, str):
            if fallback == "direct":
                raise ValueError("the direct policy's fallback must be another policy")
            fallback = make_policy(fallback, **given)
        elif given:
            raise TypeError(f"routing policy 'direct' takes no option {', '.join(sorted(given))} with a built fallback")
        return DirectPolicy(fallback, lookup=lookup)
    if name == "precise":
        own = {k: given.pop(k) for k in ("kv_overlap_weight", "index") if k in given}
        return PrecisePolicy(fallback=_build(KvAwarePolicy, "precise", given), **own)
    builders: dict[str, Callable[..., Policy]] = {
        "kv-aware": KvAwarePolicy,
        "round-robin": RoundRobinPolicy,
        "least-load": LeastLoadPolicy,
    }
    return _build(builders[name], name, given)


def _build(builder: Callable[..., Policy], name: str, options: dict) -> Policy:
    allowed = KV_AWARE_OPTIONS if builder is KvAwarePolicy else ()
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise TypeError(f"routing policy {name!r} takes no option {', '.join(unknown)}")
    return builder(**options)
