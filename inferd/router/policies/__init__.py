"""Routing policies, one file each behind `policies.base.Policy`."""
