"""A Sphinx-Gallery image scraper for the figures an example saves to a file.

The examples write their figures under ``examples_output/`` (relative to the folder they run in,
which for the gallery is ``examples/``) and close them, so Sphinx-Gallery's matplotlib scraper
sees no open figure. This scraper shows, after each code block, the PNG files that block wrote
there.
"""

import shutil
from pathlib import Path

from sphinx_gallery.scrapers import figure_rst

#: the folder, beside the example scripts, that the examples write their figures to
OUTPUT_FOLDER = "examples_output"

#: ``{png path: modification time}`` of the files already shown (or present before the build)
_seen = {}


def _pngs(folder):
    return {png: png.stat().st_mtime_ns for png in sorted(folder.glob("*.png"))} if folder.is_dir() else {}


def remember_existing(folder):
    """Record the PNG files in ``folder`` so that only files written later are shown."""
    _seen.update(_pngs(Path(folder)))


def saved_figures_scraper(block, block_vars, gallery_conf, **kwargs):
    """Copy the PNG files the block wrote into ``examples_output/`` to the gallery's images and
    return the reST that shows them (Sphinx-Gallery's scraper interface)."""
    folder = Path(block_vars["src_file"]).parent / OUTPUT_FOLDER
    shown = []
    for png, stamp in _pngs(folder).items():
        if _seen.get(png) == stamp:
            continue
        _seen[png] = stamp
        destination = next(block_vars["image_path_iterator"])
        shutil.copyfile(png, destination)
        shown.append(destination)
    return figure_rst(shown, gallery_conf["src_dir"])
