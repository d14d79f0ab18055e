"""Shared pytest configuration: the ``cuda`` marker (tests that need a CUDA device).

setup.cfg may register it too; it is added here only when missing, so the tests also run under
``--strict-markers`` with another configuration file.
"""


def pytest_configure(config):
    if not any(line.split(":")[0].strip() == "cuda" for line in config.getini("markers")):
        config.addinivalue_line(
            "markers", "cuda: needs a CUDA device (skipped with reason 'CUDA is not available' otherwise)"
        )

    # Small-tensor filter steps gain nothing from intra-op threads and slow down badly when the
    # cores are shared (CI runners, parallel jobs); one thread also makes float64 results independent
    # of the machine's core count.
    import torch

    torch.set_num_threads(1)
