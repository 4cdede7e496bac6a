"""Implementation of the torch.distributed backend "pymcoll".

Import :mod:`pymcoll.torch`, the entry point, rather than this package: that
import registers the backend and sets torch's rendezvous variables from MPI.

- ``env``: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from MPI;
- ``tensors``: dtype and reduce-op mapping, argument checks, staging of
  non-contiguous tensors;
- ``work``: torch Work objects over pymcoll requests and the completer thread;
- ``group``: the ProcessGroup subclass and the creator torch calls.
"""
