"""One coordinator member: the pure state machine (:mod:`.state`, its inputs and outputs in
:mod:`.values`), its member id (:mod:`.ids`) and the thin threaded loop that drives it (:mod:`.member`,
:mod:`.shard`, :mod:`.pool`)."""
