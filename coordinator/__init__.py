"""The coordinator Django app: group metadata, assignments and epochs for sharded Redis Streams.

`coordinator.protocol` is the pure (sans-I/O) core; the rest of this app is the thin Django layer
around it.
"""
