"""`inferd router`: one front door over a fleet of workers.

The router holds no weights. It keeps a live view of the fleet (static
`--worker` URLs or etcd registrations), checks each worker's health, and
forwards every request to the worker a policy picks, streaming the answer
back byte for byte.
"""
