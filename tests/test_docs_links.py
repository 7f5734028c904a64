"""Every document the code, the help texts and the README cite exists in the repository (issue 21, item 15:
they cited the SimAI-model, simulation-model and file-format notes of a private folder outside it)."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import ROOT

EXTERNAL = {
    "doc/PERFORMANCE.md",  # nccl-tests' own document, cited as such
    "docs/legacy.md",  # deepseek-ai/DeepEP's, cited with its repository
    "docs/performance-summary-archive.md",  # NVIDIA-NeMo/Megatron-Bridge's, cited with its repository
    "docs/source/performance/perf-overview.md", "perf-overview.md",  # NVIDIA/TensorRT-LLM's
    "docs/user-guide/features/pipeline_parallel_layout.md", "pipeline_parallel_layout.md",  # NVIDIA/Megatron-LM's
}
CITED = re.compile(r"(?<![\w/.-])([\w./-]+\.md)\b")


def test_cited_documents_exist():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    missing = []
    for name in files:
        path = ROOT / name
        if path.suffix not in (".py", ".md", ".sh", ".toml", ".txt", ".cfg") or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            for cited in CITED.findall(line):
                if cited in EXTERNAL or cited.startswith(("http", "//")):
                    continue
                if not ((ROOT / cited).is_file() or (path.parent / cited).is_file()):
                    missing.append(f"{name}:{number}: {cited}")
    assert missing == []


def test_simulator_help_names_the_model_documents():
    from simulator.cli import build_parser

    text = build_parser().format_help()
    assert "docs/simai_analytical.md" in text and "docs/sim_model.md" in text
    for cited in ("docs/simai_analytical.md", "docs/sim_model.md", "docs/formats.md", "docs/topology.md"):
        assert (ROOT / cited).is_file()
