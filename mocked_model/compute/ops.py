"""The kernels of each mocked operation: the dispatch from an item's ``meta['op']`` to its kernel list, training
(:mod:`mocked_model.compute.training_ops`: what Megatron-LM launches per software stack) or inference
(:mod:`mocked_model.compute.inference_ops`: what SGLang and vLLM launch per step), and the key that lets a consumer
price each distinct operation once.
"""

from __future__ import annotations

from collections.abc import Callable

from mocked_model.compute.inference_ops import OPS as INFERENCE_OPS
from mocked_model.compute.kernel_list import Kernel, Precision
from mocked_model.compute.training_ops import OPS as TRAINING_OPS
from mocked_model.compute.training_ops import ROUTER


def kernels_of(item, p: Precision) -> list[Kernel] | None:
    """The kernels of one computation item, or None when its operation has no law here."""
    meta = item.meta or {}
    op = meta.get("op")
    if op == "gemm" and str(meta.get("name", "")).endswith("router"):
        return ROUTER(item, p)
    law = OPS.get(op)
    return law(item, p) if law is not None else None


def price_key(item) -> tuple | None:
    """Everything :func:`kernels_of` reads of an item, as a hashable key (None when a value is not
    hashable): the phase of its stage, its shapes, its meta without the layer index and the module
    name (only whether the name ends in ``router`` matters).  Items of identical layers share a key,
    so a consumer prices each distinct operation once."""
    meta = item.meta or {}
    name = meta.get("name")
    key = (item.stage.split(".", 1)[0], item.shapes, name is not None and str(name).endswith("router"),
           *[(k, v) for k, v in meta.items() if k != "layer" and k != "name"])
    try:
        hash(key)  # meta in insertion order: the same code builds identical layers' meta alike
    except TypeError:
        try:
            key = (*key[:3], *[(k, _frozen(v)) for k, v in key[3:]])
            hash(key)
        except TypeError:
            return None
    return key


def _frozen(value):
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value


OPS: dict[str, Callable[[object, Precision], list[Kernel]]] = {**TRAINING_OPS, **INFERENCE_OPS}
"""Operation name (``meta['op']``) -> its kernel list."""

__all__ = ["OPS", "Kernel", "Precision", "kernels_of", "price_key"]
