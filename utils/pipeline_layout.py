"""Megatron-core's ``--pipeline-model-parallel-layout``: what each virtual pipeline stage holds.

Reference: Megatron-LM ``megatron/core/transformer/pipeline_parallel_layer_layout.py``
(``PipelineParallelLayerLayout``: ``parse_str_to_list``, ``__init__``, ``validate_layer_layout``),
``megatron/training/arguments.py`` (the layout sets the virtual pipeline size, and excludes
``--num-layers-per-virtual-pipeline-stage`` / ``--num-virtual-stages-per-pipeline-rank``),
``megatron/core/transformer/transformer_config.py`` (the layout excludes the uneven first/last stage flags
and ``--account-for-{embedding,loss}-in-pipeline-split``) and ``docs/user-guide/features/
pipeline_parallel_layout.md``.

The grammar: ``E`` the embedding, ``t`` a transformer (decoder) layer, ``m`` a multi-token-prediction
layer, ``L`` the loss (output layer and cross entropy); ``|`` separates virtual stages (empty stages
are allowed: ``E||t|L``); ``X*N`` repeats one symbol (``|`` included), ``(...)*N`` a group; commas are
cosmetic.  Stage ``u`` of the flattened list is chunk ``u // pp`` of pipeline rank ``u % pp`` (the same
order as :meth:`utils.parallel.ParallelConfig.virtual_stage_layers`), so the string reads in layer
order.  DeepSeek-V3 on 16 stages with 2 chunks each (61 layers, one MTP layer), from Megatron-LM's
``docs/user-guide/features/pipeline_parallel_layout.md``: ``Et*3|(tt|)*29,m|L``.

Megatron parses groups with a regular expression (no nesting); this parser also accepts nested groups,
which read the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from utils.errors import ConfigError

FLAG = "--pipeline_model_parallel_layout"
SYMBOLS = {"E": "embedding", "t": "transformer layer", "m": "MTP layer", "L": "loss"}
MAX_SYMBOLS = 1_000_000
"""A layout that unrolls to more symbols than this is refused (a typo such as ``t*10000000``)."""
MAX_DEPTH = 100
"""Groups nested deeper than this are refused (Megatron nests none; 5,000 ran out of Python's stack)."""


@dataclass(frozen=True)
class StageContents:
    """One virtual stage: whether it holds the embedding and the loss, its transformer and MTP layers."""

    embedding: bool = False
    layers: int = 0
    mtp: int = 0
    loss: bool = False


@dataclass(frozen=True)
class PipelineLayout:
    """A parsed layout: ``stages`` in virtual-stage order (``u = chunk * pp + pp_rank``), ``vpp`` chunks
    per pipeline rank."""

    text: str
    pp: int
    stages: tuple[StageContents, ...]

    @property
    def vpp(self) -> int:
        return len(self.stages) // self.pp

    def layers(self) -> list[int]:
        """Transformer layers of every virtual stage."""
        return [s.layers for s in self.stages]

    def mtp(self) -> list[int]:
        """MTP layers of every virtual stage."""
        return [s.mtp for s in self.stages]

    def mtp_ranks(self) -> list[int]:
        """Pipeline ranks that hold MTP layers (Megatron's ``get_mtp_ranks``)."""
        return sorted({u % self.pp for u, s in enumerate(self.stages) if s.mtp})

    def check_model(self, num_layers: int, mtp_num_layers: int) -> None:
        """Megatron's ``validate_layer_layout``: the layout's ``t`` add up to ``--num_layers`` and its ``m``
        to ``--mtp_num_layers``, all MTP layers in one virtual stage, the last chunk of its pipeline rank,
        after every transformer layer.  Raises :class:`ConfigError` naming the flag."""
        layers = sum(s.layers for s in self.stages)
        if layers != num_layers:
            raise ConfigError(f"{FLAG} {self.text!r} holds {layers} transformer layers (t), not --num_layers {num_layers}")
        mtp = sum(s.mtp for s in self.stages)
        if mtp != mtp_num_layers:
            raise ConfigError(f"{FLAG} {self.text!r} holds {mtp} MTP layers (m), not --mtp_num_layers {mtp_num_layers}")
        holders = [u for u, s in enumerate(self.stages) if s.mtp]
        if len(holders) > 1:
            raise ConfigError(f"{FLAG} {self.text!r} spreads the MTP layers over virtual stages {holders}: Megatron "
                              "needs them all in one")
        if holders:
            u = holders[0]
            if u // self.pp != self.vpp - 1:
                raise ConfigError(f"{FLAG} {self.text!r} puts the MTP layers in chunk {u // self.pp} of pipeline rank "
                                  f"{u % self.pp}: Megatron needs them in the rank's last chunk ({self.vpp - 1})")
            if any(s.layers for s in self.stages[u + 1:]):
                raise ConfigError(f"{FLAG} {self.text!r} places transformer layers (t) after the MTP layers (m)")


def _expand(text: str) -> str:
    """The layout with every repetition unrolled (commas and surrounding blanks dropped).  Raises
    :class:`ConfigError` on an unbalanced parenthesis, a ``*`` without a count or an unknown symbol."""
    body = text.replace(",", "").strip()
    pos = 0

    def count() -> int:
        nonlocal pos
        start = pos
        while pos < len(body) and body[pos].isdigit():
            pos += 1
        if start == pos:
            raise ConfigError(f"{FLAG} {text!r}: '*' at position {start - 1} needs a repeat count")
        return int(body[start:pos]) if pos - start <= 18 else MAX_SYMBOLS + 1  # (int() refuses 4,300 digits)

    def repeat(piece: str, times: int, size: int) -> str:
        """``piece * times`` after ``size`` symbols, refused before it is built when it would pass
        :data:`MAX_SYMBOLS` (``t*10**12`` ran out of memory)."""
        if piece and size + len(piece) * times > MAX_SYMBOLS:
            raise ConfigError(f"{FLAG} {text!r} unrolls to more than {MAX_SYMBOLS:,} symbols")
        return piece * times

    def group(depth: int) -> str:
        nonlocal pos
        out: list[str] = []
        size = 0  # symbols in out (a running count: summing out at every symbol took minutes on 10^5 of them)
        while pos < len(body):
            ch = body[pos]
            if ch == ")":
                if depth == 0:
                    raise ConfigError(f"{FLAG} {text!r}: ')' at position {pos} closes no '('")
                return "".join(out)
            pos += 1
            if ch == "(":
                if depth >= MAX_DEPTH:
                    raise ConfigError(f"{FLAG} {text!r}: groups nested more than {MAX_DEPTH} deep at position {pos - 1}")
                inner = group(depth + 1)
                if pos >= len(body):
                    raise ConfigError(f"{FLAG} {text!r}: a '(' is never closed")
                pos += 1  # the ')'
                if pos < len(body) and body[pos] == "*":
                    pos += 1
                    inner = repeat(inner, count(), size)
                out.append(inner)
            elif ch in SYMBOLS or ch == "|":
                if pos < len(body) and body[pos] == "*":
                    pos += 1
                    out.append(repeat(ch, count(), size))
                else:
                    out.append(ch)
            else:
                known = ", ".join(f"{k} ({v})" for k, v in SYMBOLS.items())
                raise ConfigError(f"{FLAG} {text!r}: unknown symbol {ch!r} at position {pos - 1} (known: {known}, "
                                  "'|' between stages, (...)*N and X*N to repeat)")
            size += len(out[-1])
            if size > MAX_SYMBOLS:
                raise ConfigError(f"{FLAG} {text!r} unrolls to more than {MAX_SYMBOLS:,} symbols")
        if depth:
            raise ConfigError(f"{FLAG} {text!r}: a '(' is never closed")
        return "".join(out)

    return group(0)


def parse_layout(text: str, pp: int) -> PipelineLayout:
    """Parse ``text`` for ``pp`` pipeline ranks: the stage count is a multiple of ``pp`` (the quotient is
    the number of chunks per rank), the first symbol is the embedding and the last the loss, each exactly
    once.  Raises :class:`ConfigError` naming the flag."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{FLAG} must be a non-empty layout string, e.g. 'Et*3|(tt|)*29,m|L'")
    flat = _expand(text)
    pieces = flat.split("|")
    if len(pieces) % pp:
        raise ConfigError(f"{FLAG} {text!r} has {len(pieces)} virtual stages, not a multiple of --pipeline_model_parallel "
                          f"{pp} (stages = pipeline ranks x chunks per rank)")
    symbols = flat.replace("|", "")
    if not symbols or symbols[0] != "E":
        raise ConfigError(f"{FLAG} {text!r} must start with the embedding (E), got {symbols[:1] or 'nothing'!r}")
    if symbols[-1] != "L":
        raise ConfigError(f"{FLAG} {text!r} must end with the loss (L), got {symbols[-1]!r}")
    for ch in "EL":
        if symbols.count(ch) != 1:
            raise ConfigError(f"{FLAG} {text!r} holds the {SYMBOLS[ch]} ({ch}) {symbols.count(ch)} times, not once")
    stages = tuple(StageContents("E" in piece, piece.count("t"), piece.count("m"), "L" in piece) for piece in pieces)
    return PipelineLayout(text, pp, stages)


def embedding_stages(untie: bool, mtp_num_layers: int, pp: int, layout: PipelineLayout | None) -> tuple[int, ...] | None:
    """Pipeline ranks of the embedding group with multi-token prediction (``pretrain_gpt.py``'s
    ``get_embedding_ranks``: the first rank, the last with tied embeddings, and every rank holding MTP
    layers, whose embedding lookup keeps a copy of the word embedding); None (Megatron's default: first
    and last) without MTP or pipelining."""
    if not mtp_num_layers or pp < 2:
        return None
    stages = {0}
    if not untie:
        stages.add(pp - 1)
    stages.update(layout.mtp_ranks() if layout is not None else [pp - 1])
    return tuple(sorted(stages))


def stage_count(text: str) -> int:
    """Virtual stages of a layout string (pipeline ranks x chunks per rank), as Megatron's
    ``get_num_stages_from_str``; raises :class:`ConfigError` on a malformed string."""
    return _expand(text).count("|") + 1
