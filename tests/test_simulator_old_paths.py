"""simulator/ was split into folders (issue 27, item 7): every old module path still imports for one release, with a
DeprecationWarning that names the new path, and gives the moved module itself (so that a notebook's monkeypatch of
the old name reaches the code that runs)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from tests.conftest import ROOT

MOVED = {
    "simai_model": "simai.model", "simai_tables": "simai.tables", "busbw_file": "simai.busbw_file",
    "engine": "topo.engine", "programs": "topo.programs", "collectives": "topo.collectives", "fabric": "topo.fabric",
    "topo_model": "topo.model", "topo_result": "topo.result", "topo_stream": "topo.stream", "session": "topo.session",
    "host_model": "topo.host_model", "moe_comm": "topo.moe_comm", "moe_overlap": "topo.moe_overlap",
    "param_gather": "topo.param_gather", "trace": "topo.trace", "bubble_fill": "topo.bubble_fill",
    "placed_fabric": "topo.placed_fabric", "placement": "topo.placement", "inference": "topo.inference",
    "search_space": "search.space", "search_report": "search.report", "search_cache": "search.cache",
    "search_comm": "search.comm", "search_files": "search.files", "search_pool": "search.pool", "sweep": "search.sweep",
    "place_cli": "search.place", "profile_db": "profiles.db", "profile_fit": "profiles.fit",
    "profile_flags": "profiles.flags",
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_path_warns_and_is_the_moved_module(old):
    # in a fresh interpreter: the warning is raised once, at the first import of the old path
    code = (f"import warnings; warnings.simplefilter('error')\n"
            f"import simulator.{MOVED[old]} as new\n"
            f"try:\n    import simulator.{old}\nexcept DeprecationWarning as w:\n    print(w)\n"
            f"warnings.simplefilter('ignore')\nimport simulator.{old} as old\nprint(old is new)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"simulator.{old} moved to simulator.{MOVED[old]}; the old path goes in the next release", "True"]


def test_the_two_modules_that_became_packages_still_hand_out_their_names():
    with pytest.warns(DeprecationWarning, match=r"simulator\.search\.main moved to simulator\.search\.run\.main"):
        from simulator.search import main
    assert main is importlib.import_module("simulator.search.run").main
    with pytest.warns(DeprecationWarning, match=r"simulator\.profiles\.use_profile moved to simulator\.profiles\.measured"):
        from simulator.profiles import use_profile
    assert use_profile is importlib.import_module("simulator.profiles.measured").use_profile
    with pytest.raises(ImportError):
        from simulator.search import no_such_name  # noqa: F401


def test_nothing_inside_the_toolkit_uses_an_old_path():
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "import simulator.cli, simulator.api, simulator.validation, simulator.search.run, simulator.search.place\n"
            "import simulator.serve.cli, simulator.topo.model, simulator.simai.model, simulator.profiles.measured\n"
            "import simulator.__main__\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
