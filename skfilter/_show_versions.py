"""Environment report for bug reports and benchmark records, in the style of :func:`sklearn.show_versions`."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from sklearn.utils._show_versions import _get_sys_info

#: distributions skfilter needs (import name -> distribution name where they differ)
REQUIRED = ("numpy", "scipy", "scikit-learn", "torch", "numba", "llvmlite", "joblib", "threadpoolctl")
#: optional distributions used by extras, examples and benchmarks
OPTIONAL = ("pandas", "matplotlib", "tqdm", "skorch", "dask", "distributed", "dask-ml", "river", "tabulate")


def _versions(names) -> dict:
    """Installed version of each distribution in ``names`` (``None`` when not installed), read from
    package metadata without importing it."""
    out = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def _torch_info() -> dict:
    """torch's build and runtime: CUDA and cuDNN versions, visible devices, thread counts."""
    import torch

    cuda = torch.cuda.is_available()
    return {
        "version": torch.__version__,
        "cuda_build": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cuda_available": cuda,
        "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        "parallel_backend": next((line.split(":", 1)[1].strip() for line in torch.__config__.parallel_info()
                                  .splitlines() if line.startswith("ATen parallel backend")), None),
    }


def show_versions(as_dict: bool = False):
    """Print (or return) system, dependency, torch and thread-pool information for bug reports.

    Sections: the Python interpreter and machine (:func:`sklearn.show_versions`'s system
    part), skfilter, its required and optional dependencies (versions from package metadata,
    ``None`` when not installed), torch's build (CUDA and cuDNN versions, visible GPUs, intra- and
    inter-op threads, parallel backend), whether skfilter's compiled (numba) kernels are on
    (:func:`skfilter.kernels.enabled`), and the native thread pools seen by
    :func:`threadpoolctl.threadpool_info` (BLAS, OpenMP).

    Parameters
    ----------
    as_dict : bool, default=False
        Return the information as a dict instead of printing it.

    Returns
    -------
    dict or None
        With ``as_dict=True``: keys ``system``, ``skfilter``, ``dependencies``,
        ``optional_dependencies``, ``torch``, ``compiled_kernels`` and ``threadpool_info``
        (a list of dicts); otherwise None.

    Examples
    --------
    >>> import skfilter
    >>> info = skfilter.show_versions(as_dict=True)
    >>> sorted(info)  # doctest: +NORMALIZE_WHITESPACE
    ['compiled_kernels', 'dependencies', 'optional_dependencies', 'skfilter', 'system',
     'threadpool_info', 'torch']
    >>> info["skfilter"] == skfilter.__version__
    True
    """
    from threadpoolctl import threadpool_info

    from . import __version__, kernels

    info = {
        "system": _get_sys_info(),
        "skfilter": __version__,
        "dependencies": _versions(REQUIRED),
        "optional_dependencies": _versions(OPTIONAL),
        "torch": _torch_info(),
        "compiled_kernels": kernels.enabled(),
        "threadpool_info": threadpool_info(),
    }
    if as_dict:
        return info
    print("\nSystem:")
    for key, value in info["system"].items():
        print(f"{key:>22}: {value}")
    print(f"\nskfilter: {info['skfilter']}  (compiled kernels {'on' if info['compiled_kernels'] else 'off'})")
    for title, key in (("Dependencies", "dependencies"), ("Optional dependencies", "optional_dependencies"),
                       ("torch", "torch")):
        print(f"\n{title}:")
        for name, value in info[key].items():
            print(f"{name:>22}: {value}")
    print("\nThreadpoolctl info:")
    for pool in info["threadpool_info"]:
        print()
        for key, value in pool.items():
            print(f"{key:>22}: {value}")
    return None
