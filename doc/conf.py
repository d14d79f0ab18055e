"""Sphinx configuration of the skfilter documentation (``make docs``)."""

import os
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parent
ROOT = DOC.parent
sys.path.insert(0, str(ROOT))          # the checkout's skfilter, also without an editable install
sys.path.insert(0, str(DOC / "_ext"))  # gallery_figures
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

import gallery_figures  # noqa: E402
import skfilter  # noqa: E402

project = "skfilter"
author = "the skfilter developers"
copyright = "the skfilter developers, BSD-3-Clause"
release = skfilter.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
templates_path = ["_templates"]
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "auto_examples/*.ipynb", "auto_examples/*.py",
                    "auto_examples/*.zip", "auto_examples/*.md5", "auto_examples/*.json"]

# --- API reference: autosummary writes one page per public name listed in api.rst -----------------
autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {"member-order": "groupwise"}
autodoc_typehints = "none"              # the numpydoc "Parameters" sections give the types
numpydoc_show_class_members = False     # the class template lists the members itself
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# --- Markdown pages (myst-parser) ----------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 4                # "page.md#a-section" links resolve as on GitHub

# --- the example gallery: every script of examples/ is executed -----------------------------------
gallery_figures.remember_existing(ROOT / "examples" / gallery_figures.OUTPUT_FOLDER)
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": str(DOC / "auto_examples"),
    "filename_pattern": r".*\.py$",      # execute every example, not only plot_*.py
    "ignore_pattern": r"__init__\.py",
    "within_subsection_order": "FileNameSortKey",
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": True,
    "show_memory": False,
    # open matplotlib figures, and the PNG files an example saves under examples_output/
    "image_scrapers": ("matplotlib", "gallery_figures.saved_figures_scraper"),
}

# --- HTML ------------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"skfilter {release}"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}
html_static_path = []
html_show_sourcelink = False

# The benchmark tables (doc/*_table.md) are written by the benchmark commands and start with a
# comment or a caption, not a heading; they get their page title here so that regenerating them
# keeps the documentation building.
TABLE_TITLES = {
    "bandit_table": "Decision benchmark: the digits contextual bandit",
    "bo_table": "Decision benchmark: Bayesian optimisation",
    "calibration_table": "Calibration benchmark: log-loss beside CalibratedClassifierCV",
    "factorization_bandit_table": "Factorization benchmark: explore/exploit (DEKF paper §5.2)",
    "factorization_estimation_table": "Factorization benchmark: parameter estimation (DEKF paper §5.1)",
    "factorization_peers_table": "Factorization benchmark: against river and surprise",
    "defaults_streaming_table": "Defaults benchmark: one row per call from row 0 beside one call",
    "factorization_calls_table": "Factorization benchmark: per-event cost of fit, prequential and one row per call",
    "factorization_scale_table": "Factorization benchmark: throughput and memory",
    "factorization_multiclass_table": "Factorization benchmark: multiclass FM on digits (compiled DEKF)",
    "inbetween_table": "Low-rank filters: in-between uncertainty",
    "bocd_bandit_table": "BOCD benchmark: the non-stationary bandit",
    "bocd_cost_table": "BOCD benchmark: cost of the run-length hypotheses",
    "bocd_drift_table": "BOCD benchmark: periodic drift",
    "bocd_jumps_table": "BOCD benchmark: drift and jumps",
    "bocd_segments_table": "BOCD benchmark: piecewise regression segments",
    "bocd_wolf_table": "BOCD benchmark: WoLF with run lengths on a heavy-tailed stream",
    "speed_table": "Speed benchmark: the latest record",
    "subspace_table": "Subspace benchmark: subspace EKF, PULSE and LoFi on a digits CNN stream",
    "wolf_1d_table": "WoLF benchmark: online 1-D MLP regression with outliers",
    "wolf_labels_table": "WoLF benchmark: flipped labels",
    "wolf_tracking_table": "WoLF benchmark: 2-D tracking",
    "wolf_uci_table": "WoLF benchmark: UCI with target outliers",
}


def _title_generated_tables(app, docname, source):
    """Give a generated benchmark table its page title if it has none."""
    title = TABLE_TITLES.get(docname)
    if title and not source[0].lstrip().startswith("# "):
        source[0] = f"# {title}\n\n{source[0]}"


def _skip_foreign_members(app, what, name, obj, skip, options):
    """Document the members skfilter defines, not those inherited from scikit-learn or torch."""
    if what != "class":
        return None
    target = getattr(obj, "fget", None) or getattr(obj, "__func__", None) or obj
    module = getattr(target, "__module__", None)
    if isinstance(module, str) and not module.startswith("skfilter"):
        return True
    return None


def setup(app):
    app.connect("source-read", _title_generated_tables)
    app.connect("autodoc-skip-member", _skip_foreign_members)
