"""The public estimators document every ``__init__`` parameter (issue 15): a numpydoc
"Parameters" section in the class's own docstring, one entry per parameter of the signature, in
signature order, each ``default=`` the signature's default.

The section is read by a small parser (numpydoc and ``sklearn.utils._testing`` are not dependencies):
an entry is a line at the section's indentation, ``name : type, default=value`` (``value`` compared
with ``repr`` of the signature default) or, for the ``**`` catch-all that holds ``module__<name>``
(and, for the baselines, ``optimizer__<name>``) arguments, ``**name`` without a type or default;
the lines indented below an entry are its description, which must not be empty. The self-tests at
the end feed the checker docstrings with each kind of mistake, so this module can fail.
"""

from __future__ import annotations

import inspect
import re

import pytest
from sklearn.base import BaseEstimator

import skfilter
import skfilter.baselines

#: every estimator exported today; any estimator exported later is checked too
KNOWN = {"EKFRegressor", "EKFClassifier", "LoFiRegressor", "LoFiClassifier", "ReplaySGDRegressor",
         "ReplaySGDClassifier"}


def public_estimators():
    """Estimator classes in the ``__all__`` of :mod:`skfilter` and :mod:`skfilter.baselines`."""
    found = {}
    for module in (skfilter, skfilter.baselines):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) and issubclass(obj, BaseEstimator):
                found[name] = obj
    return found



def _section(doc: str, title: str):
    """The lines of the numpydoc section ``title`` of ``doc`` (dedented), or None if absent."""
    lines = inspect.cleandoc(doc).splitlines()
    for i in range(len(lines) - 1):
        if lines[i].strip() == title and set(lines[i + 1].strip()) == {"-"}:
            body = []
            for j in range(i + 2, len(lines)):
                nxt = lines[j + 1] if j + 1 < len(lines) else ""
                if lines[j].strip() and not lines[j].startswith(" ") and nxt.strip() and set(nxt.strip()) == {"-"}:
                    break  # the next section's header
                body.append(lines[j])
            return body
    return None


def parse_parameters(doc: str):
    """``[(name, type_text, default_text, description)]`` of the "Parameters" section of ``doc``
    (``type_text``/``default_text`` None where absent), or None without such a section."""
    body = _section(doc or "", "Parameters")
    if body is None:
        return None
    entries = []
    for line in body:
        if not line.strip():
            continue
        if not line.startswith(" "):  # an entry
            name, sep, spec = line.partition(" : ")
            spec = spec.strip() if sep else None
            default = None
            if spec is not None:
                m = re.search(r"(?:^|,\s*)default=(.+)$", spec)
                default = m.group(1).strip() if m else None
            entries.append([name.strip(), spec, default, []])
        elif entries:
            entries[-1][3].append(line.strip())
    return [(n, t, d, " ".join(desc)) for n, t, d, desc in entries]


def docstring_problems(cls) -> list[str]:
    """What is wrong with the documentation of ``cls.__init__``'s parameters (empty if nothing)."""
    doc = vars(cls).get("__doc__")
    entries = parse_parameters(doc)
    if entries is None:
        return [f"{cls.__name__}: no Parameters section in its own docstring"]
    params = list(inspect.signature(cls).parameters.values())
    expected = ["**" + p.name if p.kind == p.VAR_KEYWORD else "*" + p.name if p.kind == p.VAR_POSITIONAL
                else p.name for p in params]
    documented = [e[0] for e in entries]
    problems = []
    if documented != expected:
        problems.append(f"{cls.__name__}: documented {documented}, signature {expected}")
    by_name = {e[0]: e for e in entries}
    for p, name in zip(params, expected):
        if name not in by_name:
            continue
        _, spec, default, description = by_name[name]
        if not description:
            problems.append(f"{cls.__name__}.{name}: no description")
        if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            if spec is not None:
                problems.append(f"{cls.__name__}.{name}: a catch-all has no type or default, got {spec!r}")
            continue
        if spec is None:
            problems.append(f"{cls.__name__}.{name}: no 'name : type' line")
            continue
        if p.default is inspect.Parameter.empty:
            if default is not None:
                problems.append(f"{cls.__name__}.{name}: documented default={default} but it is required")
        elif default is None:
            problems.append(f"{cls.__name__}.{name}: no default= (signature default {p.default!r})")
        elif default != repr(p.default):
            problems.append(f"{cls.__name__}.{name}: documented default={default}, signature {p.default!r}")
    return problems


def test_every_known_estimator_is_checked():
    assert KNOWN <= set(public_estimators())


@pytest.mark.parametrize("name", sorted(public_estimators()))
def test_parameters_documented_in_signature_order_with_their_defaults(name):
    assert docstring_problems(public_estimators()[name]) == []


# ---------------------------------------------------------------------------------------------
# self-tests: the checker finds each kind of mistake
# ---------------------------------------------------------------------------------------------
class _Good(BaseEstimator):
    """Summary.

    Parameters
    ----------
    sizes : tuple of int, default=(50,)
        Widths.
    mode : {'a', 'b'}, default='a'
        A choice, with a comma, in the text.
    scale : 'auto' or float, default='auto'
        Scale.
    noise : float, default=0.0
        Noise.
    flag : bool, default=False
        Flag.
    seed : int or None, default=None
        Seed.
    **module_kwargs
        ``module__<name>=value``.

    Attributes
    ----------
    n_features_in_ : int
    """

    def __init__(self, sizes=(50,), mode="a", *, scale="auto", noise=0.0, flag=False, seed=None, **module_kwargs):
        pass


def _variant(old, new):
    doc = _Good.__doc__
    assert old in doc
    return type("Bad", (BaseEstimator,), {"__doc__": doc.replace(old, new), "__init__": _Good.__init__})


def test_checker_accepts_a_correct_docstring_and_parses_it():
    assert docstring_problems(_Good) == []
    entries = parse_parameters(_Good.__doc__)
    assert [e[0] for e in entries] == ["sizes", "mode", "scale", "noise", "flag", "seed", "**module_kwargs"]
    assert [e[2] for e in entries] == ["(50,)", "'a'", "'auto'", "0.0", "False", "None", None]
    assert entries[1][3] == "A choice, with a comma, in the text."


@pytest.mark.parametrize("old, new, message", [
    ("default=(50,)", "default=(100,)", "documented default=(100,), signature (50,)"),
    ("default='auto'", "default=1.0", "documented default=1.0, signature 'auto'"),
    ("default=0.0", "default=0", "documented default=0, signature 0.0"),
    (", default=False", "", "no default= (signature default False)"),
    ("    flag : bool, default=False\n        Flag.\n", "", "documented ['sizes', 'mode', 'scale', 'noise', 'seed'"),
    ("    **module_kwargs\n        ``module__<name>=value``.\n", "", "'seed'], signature"),
    ("    noise : float, default=0.0\n        Noise.\n    flag : bool, default=False\n        Flag.\n",
     "    flag : bool, default=False\n        Flag.\n    noise : float, default=0.0\n        Noise.\n",
     "'flag', 'noise'"),
    ("        Widths.\n", "", "sizes: no description"),
    ("    **module_kwargs\n", "    **module_kwargs : dict\n", "a catch-all has no type or default"),
    ("    mode : {'a', 'b'}, default='a'\n", "    mode\n", "mode: no 'name : type' line"),
    ("Parameters\n    ----------\n", "", "no Parameters section"),
])
def test_checker_finds_each_kind_of_mistake(old, new, message):
    problems = docstring_problems(_variant(old, new))
    assert any(message in p for p in problems), problems


def test_checker_reads_the_class_own_docstring_not_an_inherited_one():
    child = type("Child", (_Good,), {"__init__": _Good.__init__})
    assert "no Parameters section" in docstring_problems(child)[0]
