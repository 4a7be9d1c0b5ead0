"""Headless Debian chromium for the tests that open pages (playwright cannot download one)."""

import shutil

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
"""The browser binary, or None where it is not installed (CI installs it: .ci/run)."""


def launch(playwright):
    """A headless chromium that makes no network requests of its own.

    Parameters
    ----------
    playwright : playwright.sync_api.Playwright

    Returns
    -------
    playwright.sync_api.Browser
    """
    return playwright.chromium.launch(
        executable_path=CHROMIUM,
        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--no-first-run"],
    )  # fmt: skip
