"""Small shared helpers: device and dtype resolution, tensor conversion, parameter checks."""

from __future__ import annotations

import numbers

import numpy as np
import torch


def resolve_device(device) -> torch.device:
    """Return a :class:`torch.device` for ``device`` ('cpu', 'cuda', 'cuda:1', a device or None).

    Raises
    ------
    ValueError
        If the name is not a device torch knows, or CUDA is asked for and is not available.
    """
    if device is None:
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device={device!r} is not a valid torch device.") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} was requested but CUDA is not available.")
    return dev


_DTYPES = {
    "float64": torch.float64,
    "double": torch.float64,
    "float32": torch.float32,
    "float": torch.float32,
}


def resolve_dtype(dtype, device: torch.device) -> torch.dtype:
    """Return the torch floating dtype for ``dtype``.

    ``None`` means float64 on the CPU (exact filtering) and float32 on an accelerator (speed).
    Accepts torch dtypes, numpy dtypes and their names.
    """
    if dtype is None:
        return torch.float64 if device.type == "cpu" else torch.float32
    if isinstance(dtype, torch.dtype):
        out = dtype
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError as exc:
            raise ValueError(f"dtype={dtype!r} is not understood; use 'float32' or 'float64'.") from exc
        out = _DTYPES.get(name)
    if out not in (torch.float32, torch.float64):
        raise ValueError(f"dtype={dtype!r} is not supported; use 'float32' or 'float64'.")
    return out


def check_scalar(value, name, *, low=None, high=None, include_low=True, allow_none=False):
    """Validate a real scalar parameter and return it as a Python float."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} of type {type(value).__name__}.")
    value = float(value)
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}.")
    if low is not None and (value < low or (value == low and not include_low)):
        op = ">=" if include_low else ">"
        raise ValueError(f"{name} must be {op} {low}, got {value!r}.")
    if high is not None and value > high:
        raise ValueError(f"{name} must be <= {high}, got {value!r}.")
    return value


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """``t`` as a NumPy array on the host (detached; a copy only when it is not on the CPU)."""
    return t.detach().to("cpu").numpy()


def torch_generator(seed: int, device: torch.device) -> torch.Generator:
    """A torch generator on ``device`` seeded with ``seed``."""
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    return gen


def seed_from_random_state(random_state) -> int:
    """Draw a 31-bit integer seed from a scikit-learn style ``random_state``."""
    from sklearn.utils import check_random_state

    return int(check_random_state(random_state).randint(0, 2**31 - 1))


def progress_bar(enabled, total: int, desc: str):
    """A tqdm progress bar over ``total`` rows when ``enabled`` (``verbose > 0``) and tqdm is
    installed, else ``None``; callers ``update`` and ``close`` it."""
    if not enabled or total <= 0:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm is optional
        return None
    return tqdm(total=total, desc=desc, unit="row", leave=False)
