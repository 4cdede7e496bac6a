"""Algorithms built on pymcoll's collectives (DLRM embedding exchange,
compression, load balancing, tiered embedding caches). Installed as
``pymcoll.algorithms``; the modules arrive with their capabilities."""
