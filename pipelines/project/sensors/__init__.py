"""The example project's own code: a loader and a per-chunk feature function."""
