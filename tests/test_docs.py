"""The documentation site (docs/): it builds with warnings as errors, every gallery example
runs, its internal links resolve, the user guide's doctests pass, the API reference covers
every public name, and a page opens in headless Chromium (Debian's ``chromium``, driven by
Playwright)."""

import doctest
import importlib
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from browser import CHROMIUM, launch

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
ARTIFACTS = Path(os.environ.get("TASKDML_TEST_ARTIFACTS", ROOT / "build" / "test-artifacts"))
PUBLIC_MODULES = ("taskdml", "taskdml.parallel", "taskdml.model_selection")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built from scratch: a fresh output and doctree folder, every gallery example
    run again (``run_stale_examples``), warnings as errors."""
    out = tmp_path_factory.mktemp("docs")
    command = [
        sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
        "-d", str(out / "doctrees"), "-D", "sphinx_gallery_conf.run_stale_examples=True",
        str(DOCS), str(out / "html"),
    ]  # fmt: skip
    built = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert built.returncode == 0, built.stdout + built.stderr
    return out / "html"


class _Links(HTMLParser):
    """The ids of one HTML page and the relative links (``href``, ``src``) it holds."""

    def __init__(self):
        super().__init__()
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for name in ("id", "name") if tag != "meta" else ():
            if attrs.get(name):
                self.ids.add(attrs[name])
        for name in ("href", "src"):
            if attrs.get(name) is not None:
                self.links.append(attrs[name])


def _parse(page):
    parser = _Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def broken_links(html_root):
    """``(page, link, why)`` for every relative link of the built site whose file or anchor
    does not exist."""
    pages = {  # _static/ holds the theme's templates, not pages
        page: _parse(page)
        for page in html_root.rglob("*.html")
        if "_static" not in page.relative_to(html_root).parts
    }
    broken = []
    for page, parsed in pages.items():
        for link in parsed.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//"):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if not target.exists():
                broken.append((page.relative_to(html_root), link, "no such file"))
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append((page.relative_to(html_root), link, "no such anchor"))
    return broken


@pytest.mark.slow
def test_the_site_builds_and_its_internal_links_resolve(site):
    """Every page of the user guide, the API reference and the gallery is built, and every
    relative link and anchor of every page points at something that exists."""
    for page in ("index", "user_guide/parallelism", "api/generated/taskdml.DataParallel",
                 "auto_examples/plot_federated", "performance"):  # fmt: skip
        assert (site / f"{page}.html").exists(), page
    assert len(list((site / "auto_examples").glob("plot_*.html"))) >= 4
    assert not broken_links(site)


@pytest.mark.slow
def test_generated_pages_follow_the_code(site):
    """The schema, merge-rule and performance pages show what the code and RESULTS.md hold
    today: a key of the schema, every registered family, a benchmark heading."""
    schema_page = (site / "user_guide" / "pipeline_files.html").read_text(encoding="utf-8")
    assert "Keys under" in schema_page and "parallel.sync_every" in schema_page
    merges = (site / "user_guide" / "merge_rules.html").read_text(encoding="utf-8")
    # The registry as a fresh process has it (tests in this one register rules of their own).
    families = subprocess.run(
        [sys.executable, "-c", "from taskdml.parallel.merge._registry import RULES; "
         "print('\\n'.join({r.family for _, r in RULES.items() if hasattr(r, 'family')}))"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert families
    for family in families:
        assert family in merges
    performance = (site / "performance.html").read_text(encoding="utf-8")
    assert "Class-sharded model parallelism" in performance


def test_the_link_check_finds_a_missing_file_and_a_missing_anchor(tmp_path):
    """The internal link check itself: a link to a missing page and one to a missing anchor
    are reported, a good link and an external one are not."""
    (tmp_path / "a.html").write_text(
        '<p id="here"><a href="b.html#there">x</a><a href="missing.html">y</a>'
        '<a href="#here">z</a><a href="https://example.org/nowhere">w</a></p>'
    )
    (tmp_path / "b.html").write_text('<p id="elsewhere"></p>')
    assert {(link, why) for _, link, why in broken_links(tmp_path)} == {
        ("b.html#there", "no such anchor"),
        ("missing.html", "no such file"),
    }


PYCON = re.compile(r"^```pycon\n(.*?)^```", re.M | re.S)
GUIDE_PAGES = [
    page
    for page in sorted((DOCS / "user_guide").glob("*.md"))
    if PYCON.search(page.read_text(encoding="utf-8"))
]


@pytest.mark.parametrize("page", GUIDE_PAGES, ids=[page.stem for page in GUIDE_PAGES])
def test_user_guide_doctests(page):
    """The ``pycon`` blocks of each user-guide page run and print what the page shows."""
    blocks = PYCON.findall(page.read_text(encoding="utf-8"))
    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(verbose=False)
    for number, block in enumerate(blocks):
        test = parser.get_doctest(block, {}, f"{page.stem}[{number}]", str(page), 0)
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_the_api_reference_lists_every_public_name():
    """Every name of ``taskdml.__all__``, ``taskdml.parallel.__all__`` and
    ``taskdml.model_selection.__all__`` is in docs/api/index.rst (once, under the first of
    those modules that exports it)."""
    text = (DOCS / "api" / "index.rst").read_text(encoding="utf-8")
    listed = set(re.findall(r"^   ([A-Za-z_]\w*)$", text, re.M))
    missing = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        missing += [name for name in module.__all__ if name not in listed and name != "__version__"]
    assert not missing


@pytest.mark.slow
@pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"),  # CI installs it (.ci/run): never skipped
    reason="Debian's chromium is not installed (apt-get install chromium)",
)
def test_pages_open_in_chromium(site):
    """Headless Chromium opens a user-guide page, an API page and a gallery example from the
    built site: the theme's navigation, a table and the example's plot are shown; screenshots
    are kept in build/test-artifacts/."""
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto((site / "user_guide" / "parallelism.html").as_uri())
            assert page.locator("nav.bd-links a").count() >= 5
            assert page.locator("article table").count() >= 1
            page.screenshot(path=str(ARTIFACTS / "docs-user-guide.png"), full_page=True)
            page.goto((site / "api" / "generated" / "taskdml.DataParallel.html").as_uri())
            assert page.locator("dl.py.class dt#taskdml\\.DataParallel").count() == 1
            page.screenshot(path=str(ARTIFACTS / "docs-api.png"))
            page.goto((site / "auto_examples" / "plot_federated.html").as_uri())
            plot = page.locator("img.sphx-glr-single-img").first
            plot.scroll_into_view_if_needed()
            assert plot.evaluate("image => image.complete && image.naturalWidth > 0")
            page.screenshot(path=str(ARTIFACTS / "docs-example.png"), full_page=True)
        finally:
            browser.close()
    assert (ARTIFACTS / "docs-user-guide.png").stat().st_size > 10_000
