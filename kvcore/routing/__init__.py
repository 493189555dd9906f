"""KV-aware routing: a group-aware prefix residency index built from the replicas'
KV-cache events (:class:`ResidencyIndex`), and conformance vectors that other routers
can test themselves against (:mod:`kvcore.routing.vectors`; docs/ROUTING.md).

Reads specs, the ``KVCacheConfig`` and the runtime's hit search; never imports
``kvcore.sim``.  The core (specs, grouping, planning, runtime) does not import it.
"""

from __future__ import annotations

from kvcore.errors import KVEventError
from kvcore.routing.events import event_from_dict, event_to_dict
from kvcore.routing.index import ReplicaState, ResidencyIndex, UnknownReplicaError

__all__ = ["ResidencyIndex", "ReplicaState", "KVEventError", "UnknownReplicaError",
           "event_to_dict", "event_from_dict"]
