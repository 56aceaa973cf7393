"""The data plane's and the producer's Redis Functions library: its Lua (one file per operation, the
fence in front) and its assembly (:mod:`rsc_redis.dataplane.library`), shared by the coordinator, which
loads it, and the members and producers, which call it (docs/protocol.md section 7, "Functions")."""
