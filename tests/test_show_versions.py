"""skfilter.show_versions: the environment report (printed, or as a dict for benchmark records)."""

import json

import torch

import skfilter
from skfilter import kernels


def test_as_dict_has_every_section_with_the_running_versions():
    info = skfilter.show_versions(as_dict=True)
    assert info["skfilter"] == skfilter.__version__
    assert set(info["dependencies"]) == {"numpy", "scipy", "scikit-learn", "torch", "numba", "llvmlite", "joblib",
                                         "threadpoolctl"}
    assert info["dependencies"]["torch"] == torch.__version__
    assert {"pandas", "matplotlib", "tqdm", "skorch", "dask", "distributed", "dask-ml", "river"} <= set(
        info["optional_dependencies"])
    assert info["system"]["python"] and info["system"]["machine"]
    assert info["torch"]["num_threads"] == torch.get_num_threads()
    assert info["torch"]["cuda_available"] == torch.cuda.is_available()
    assert len(info["torch"]["devices"]) == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    assert info["compiled_kernels"] is kernels.enabled()
    assert isinstance(info["threadpool_info"], list)
    json.dumps(info)  # storable beside benchmark results


def test_reports_the_kernel_switch_and_thread_count_in_force():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        with kernels.compiled_kernels(False):
            info = skfilter.show_versions(as_dict=True)
    finally:
        torch.set_num_threads(before)
    assert info["compiled_kernels"] is False and info["torch"]["num_threads"] == 1


def test_missing_optional_package_is_none(monkeypatch):
    from skfilter import _show_versions

    monkeypatch.setattr(_show_versions, "OPTIONAL", ("no-such-distribution-xyz",))
    assert skfilter.show_versions(as_dict=True)["optional_dependencies"] == {"no-such-distribution-xyz": None}


def test_prints_a_report(capsys):
    assert skfilter.show_versions() is None
    out = capsys.readouterr().out
    for heading in ("System:", "Dependencies:", "Optional dependencies:", "torch:", "Threadpoolctl info:"):
        assert heading in out
    assert f"skfilter: {skfilter.__version__}" in out and "scikit-learn: " in out
