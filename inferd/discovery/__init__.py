"""How workers and routers find each other: static URLs or etcd leases."""
