"""Evaluations of the Dual Chunk Attention patches, apart from patchctl.

- ``evals.longctx``: the long-context quality harness (real models through llama-server's HTTP API);
- ``evals.dca``: accuracy and throughput scripts for the DCA patches (errors against float64
  references, the shape matrix, the LSE op on the CPU);
- ``evals/device/``: the scripts that run the measurements on a lent GPU machine.

Nothing here imports patchctl's internals: patchctl is a tool these evaluations use (to build the
trees they measure, through its CLI and the DCA test fixtures), not a library they extend.
``evals.errors`` is their error base and ``evals.fsio`` the few file helpers they need.
"""
