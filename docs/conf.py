"""Sphinx configuration of taskdml's documentation.

Build it from the repository root with
``sphinx-build -W --keep-going -b html docs build/docs``; warnings are errors.

Pages that restate what the code knows are written at build time by ``_ext/taskdml_docs.py``
(the pipeline file's schema, the merge rules, what a pipeline file may call, the benchmark
results), so they cannot drift from it.
"""

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))  # the checkout's taskdml, installed or not
sys.path.insert(0, str(DOCS / "_ext"))

import taskdml  # noqa: E402

project = "taskdml"
author = "the taskdml developers"
copyright = "the taskdml developers"
release = version = taskdml.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
    "taskdml_docs",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
templates_path = ["_templates"]
exclude_patterns = [
    "_build",
    "_generated",  # included by pages, never pages of their own
    "auto_examples/*.ipynb",
    "auto_examples/*.py",
    "auto_examples/*.zip",
    "auto_examples/*.json",
    "auto_examples/*.md5",
    "examples",  # the gallery's sources; sphinx-gallery writes their pages to auto_examples
    "guides/examples",
]

# -- API reference ----------------------------------------------------------------------------
autosummary_generate = True
autodoc_typehints = "none"  # numpydoc's Parameters sections say the types
autodoc_default_options = {"members": False}
numpydoc_show_class_members = False  # the class template lists the methods itself
numpydoc_class_members_toctree = False
# numpydoc's style validation (GL01, SA01, ...) is not run: the test suite checks that every
# public object has numpydoc sections (tests/test_docstrings.py), and rendering errors are
# Sphinx warnings, which fail this build.
numpydoc_validation_checks = set()

# -- MyST -------------------------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# -- Example gallery --------------------------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": "examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",  # every plot_*.py example runs
    "run_stale_examples": False,  # an unchanged example is not run again (md5 of its source)
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "matplotlib_animations": False,
    "image_scrapers": ("matplotlib",),
    "abort_on_example_error": True,
    "show_memory": False,
    "min_reported_time": 1,
}
if os.environ.get("TASKDML_DOCS_NO_EXAMPLES"):  # a quick build of the prose only
    sphinx_gallery_conf["plot_gallery"] = "False"

# -- HTML -------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"taskdml {version}"
html_static_path = ["_static"]
html_css_files = ["taskdml.css"]
html_show_sourcelink = False
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    # API pages give the right sidebar's room to their signatures and examples
    "secondary_sidebar_items": {
        page: ["page-toc"]
        for page in (
            "index",
            "performance",
            "api/index",
            "user_guide/*",
            "auto_examples/*",
            "guides/*",
        )
    },
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
