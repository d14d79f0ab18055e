"""The documentation sources are complete and cite papers, not the project's private notes.

* Every public name is in the API reference (``doc/api.rst``): the names in the ``__all__`` of each
  public module, or, for a module without ``__all__``, the public classes and functions it defines.
  Public modules are found by walking the package, so a new module is checked without editing this
  file. A name counts as documented when the object it names is documented under any module (the
  posterior classes are documented once, under :mod:`skfilter.posteriors`).
* No user-facing text mentions ``spec/`` (or ``DESIGN.md``): the Markdown pages of ``doc/``, ``README.md``, the
  example scripts, and every docstring the API reference renders (public
  modules, public objects, and the public members of public classes, inherited ones included).
  ``CONTRIBUTING.md`` is for contributors, who have the notes, and may point to them.

These checks read sources and docstrings only; they do not run Sphinx (``make docs`` does).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import skfilter

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "doc"
API_SOURCES = sorted(DOC.glob("*.rst"))

#: subpackages whose modules are not part of the API: command-line benchmarks, compiled internals
#: (``skfilter.kernels`` itself is public: its switches are)
SKIPPED_PACKAGES = ("skfilter.benchmarks", "skfilter.kernels.")


def public_modules():
    """Names of skfilter's public modules: no underscore in any part, not benchmarks or kernel internals."""
    names = ["skfilter"]
    for info in pkgutil.walk_packages(skfilter.__path__, "skfilter."):
        parts = info.name.split(".")
        if any(part.startswith("_") for part in parts):
            continue
        if info.name == "skfilter.benchmarks" or info.name.startswith(SKIPPED_PACKAGES):
            continue
        names.append(info.name)
    return names


def public_names(module):
    """The public names of ``module``: its ``__all__`` (dunder names aside), or without ``__all__``
    the classes and functions it defines whose names do not start with an underscore."""
    exported = getattr(module, "__all__", None)
    if exported is not None:
        return [name for name in exported if not name.startswith("__")]
    return [name for name, obj in vars(module).items()
            if not name.startswith("_") and (inspect.isclass(obj) or inspect.isfunction(obj))
            and getattr(obj, "__module__", None) == module.__name__]


def autosummary_entries(text):
    """Fully qualified names listed in the ``autosummary`` directives of a reST source, each
    resolved against the ``currentmodule`` in force where it appears."""
    entries, module, in_summary = [], None, False
    for line in text.splitlines():
        directive = re.match(r"\.\.\s+(currentmodule|module)::\s*(\S+)", line.strip())
        if directive:
            module, in_summary = directive.group(2), False
            continue
        if re.match(r"\.\.\s+autosummary::", line.strip()):
            in_summary = True
            continue
        if not in_summary:
            continue
        if line and not line[0].isspace():
            in_summary = False          # the directive's indented block has ended
            continue
        item = line.strip()
        if not item or item.startswith(":"):
            continue
        item = item.lstrip("~")
        entries.append(item if module is None or item.startswith("skfilter.") else f"{module}.{item}")
    return entries


def resolve(qualified):
    """The object a fully qualified name ``pkg.module.name`` names (importing the module)."""
    module_name, _, attribute = qualified.rpartition(".")
    return getattr(importlib.import_module(module_name), attribute)


def documented():
    """(qualified names, ids of the objects) listed in the API reference sources."""
    names = [entry for path in API_SOURCES for entry in autosummary_entries(path.read_text(encoding="utf-8"))]
    return set(names), {id(resolve(name)) for name in names}


def _is_object(obj):
    return inspect.isclass(obj) or inspect.isfunction(obj) or inspect.isroutine(obj)


def try_import(module_name):
    """``(module, None)``, or ``(None, name)`` when an optional dependency ``name`` is not installed."""
    try:
        return importlib.import_module(module_name), None
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] != "skfilter":
            return None, exc.name
        raise


def import_public(module_name):
    """Import a public module; skip the test when an optional dependency of it is not installed."""
    module, missing = try_import(module_name)
    if module is None:
        pytest.skip(f"{module_name} needs the optional dependency {missing}")
    return module


@pytest.mark.parametrize("module_name", public_modules())
def test_every_public_name_is_in_the_api_reference(module_name):
    module = import_public(module_name)
    names, ids = documented()
    missing = []
    for name in public_names(module):
        obj = getattr(module, name)
        if f"{module_name}.{name}" in names or (_is_object(obj) and id(obj) in ids):
            continue
        missing.append(name)
    assert not missing, f"add to doc/api.rst (module {module_name}): {missing}"


def test_api_reference_entries_exist():
    names, _ = documented()
    assert len(names) > 50
    for name in sorted(names):
        resolve(name)                   # raises for a stale entry


def test_public_module_discovery():
    modules = public_modules()
    for expected in ("skfilter.pipeline", "skfilter.metrics", "skfilter.kernels", "skfilter.posteriors.lofi"):
        assert expected in modules
    assert not any(m.startswith(("skfilter.benchmarks", "skfilter.kernels.")) or "._" in m for m in modules)


def test_autosummary_parser_catches_a_missing_name():
    text = ".. currentmodule:: skfilter.metrics\n\n.. autosummary::\n   :toctree: generated/\n\n   brier_score\n" \
           "   ~skfilter.plotting.plot_coverage\n\nProse ``gaussian_nlpd`` is not an entry.\n"
    assert autosummary_entries(text) == ["skfilter.metrics.brier_score", "skfilter.plotting.plot_coverage"]


# --- no references to spec/ files in what users read -------------------------------------------

#: mentions of the project's notes, which users do not have: ``spec/…`` files, "spec §…", DESIGN.md
SPEC = re.compile(r"\bspec(/| §)|\bDESIGN\.md")


def user_facing_pages():
    pages = [p for p in DOC.rglob("*.md") if "_build" not in p.parts and "auto_examples" not in p.parts]
    pages += [p for p in DOC.glob("*.rst")]
    pages += [ROOT / "README.md"]
    pages += sorted((ROOT / "examples").glob("*.py")) + sorted((ROOT / "examples").glob("*.rst"))
    return pages


def rendered_docstrings():
    """``(where, docstring)`` of every docstring the API reference renders."""
    seen = set()
    for module_name in public_modules():
        module, _ = try_import(module_name)
        if module is None:
            continue                    # an optional dependency is missing: nothing to render
        yield module_name, module.__doc__ or ""
        for name in public_names(module):
            obj = getattr(module, name)
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if _is_object(obj):
                yield f"{module_name}.{name}", inspect.getdoc(obj) or ""
            if inspect.isclass(obj):
                for member_name, member in inspect.getmembers(obj):
                    if member_name.startswith("_"):
                        continue
                    target = getattr(member, "fget", None) or getattr(member, "__func__", None) or member
                    if str(getattr(target, "__module__", "")).startswith("skfilter"):
                        yield f"{module_name}.{name}.{member_name}", inspect.getdoc(member) or ""


def test_user_facing_pages_cite_papers_not_spec_files():
    offenders = [f"{p.relative_to(ROOT)}:{i}" for p in user_facing_pages()
                 for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if SPEC.search(line)]
    assert not offenders, offenders


def test_rendered_docstrings_cite_papers_not_spec_files():
    offenders = sorted({where for where, doc in rendered_docstrings() if SPEC.search(doc)})
    assert not offenders, offenders


def test_spec_check_can_fail():
    assert SPEC.search("see spec/lofi.md §3") and SPEC.search("(spec §2.2)") and SPEC.search("(DESIGN.md, A.1)")
    assert not SPEC.search("the LoFi paper, §3.2 (Chang et al. 2023); the specification")


# --- the example gallery ------------------------------------------------------------------------

EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def gallery_title(source):
    """The reST title that opens a script's module docstring (Sphinx-Gallery needs one), or None."""
    docstring = ast.get_docstring(ast.parse(source), clean=False) or ""
    lines = docstring.strip("\n").splitlines()
    if len(lines) >= 2 and lines[0].strip() and re.fullmatch(r"([=\-~^\"'#*+])\1*", lines[1].strip()) \
            and len(lines[1].strip()) >= len(lines[0].strip()):
        return lines[0].strip()
    return None


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_every_example_has_a_gallery_title(script):
    assert gallery_title(script.read_text(encoding="utf-8")), \
        f"{script.name}: start the module docstring with a title line underlined with '='"


def test_gallery_title_check_can_fail():
    assert gallery_title('"""Title\n=====\n\nText."""') == "Title"
    assert gallery_title('"""Title.\n\nText."""') is None
    assert gallery_title('"""A long title\n===\n"""') is None


def test_every_generated_table_has_a_page_title():
    """A benchmark table (doc/*_table.md, written by the benchmark commands) is a page of the
    toctree: it starts with a heading or gets its title from doc/conf.py's TABLE_TITLES (else the
    build warns, and warnings are errors)."""
    doc = Path(__file__).resolve().parents[1] / "doc"
    titled = set(re.findall(r'^\s+"(\w+_table)":', (doc / "conf.py").read_text(encoding="utf-8"), flags=re.M))
    untitled = [p.stem for p in sorted(doc.glob("*_table.md"))
                if not p.read_text(encoding="utf-8").lstrip().startswith("#") and p.stem not in titled]
    assert not untitled, f"add a title to TABLE_TITLES in doc/conf.py for {untitled}"
