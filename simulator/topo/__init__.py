"""The topology-aware model (``--model topo``): the engine and its programs, NCCL-like collectives on the fabric, the
model and its results, placement, bubble filling, inference steps on a topology."""
