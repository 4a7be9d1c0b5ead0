"""The step cache: every step's outputs, stored by a key of everything they depend on.

A store is a folder (a path, or any URL fsspec opens that the client and the workers reach)::

    .secret                   a random key of this store (mode 0600): entries are signed with it
    entries/<key>/            one step's outputs (files in the formats of taskdml.cache._codec)
        entry.json            the key, the outputs' tree, the step's record, sizes, when, which run
        entry.sig             HMAC-SHA256 of entry.json with the store's key
        artifacts/            the run-directory files the step made (models, trials, pictures)
    checkpoints/<key>/        a long step's last checkpoints, until the step is stored
    steps/<pipeline>/<step>.json   the parts of the step's last key, to say why it ran again
    tmp/                      entries being written

**Writes are atomic**: an entry is written under ``tmp/`` and renamed into ``entries/`` when
complete, so a crash or a full disk leaves no half entry (``taskdml cache gc`` removes what
such a crash left in ``tmp/``). A checkpoint is written beside the last one and renamed over it.

**Only what this store wrote is read.** ``entry.json`` names the key it was written for and
is signed with the store's secret; an entry whose signature or key does not match (copied from
another store, edited) is refused with a warning and counted as a miss, and every file read
into memory is checked against the SHA-256 the entry recorded. This matters because models
skops cannot store, and values of no known format, are written with joblib, which is pickle.

The key of a step is :func:`taskdml.cache._keys.step_keys`; :mod:`taskdml.runner._runner` looks each
step up before running it and stores its outputs after.
"""

import datetime
import errno
import hashlib
import hmac
import json
import os
import posixpath
import secrets
import time
import uuid
from pathlib import Path

from taskdml.cache import _codec as _cache_codec
from taskdml.exceptions import CacheWarning, StepFailed

DEFAULT_CACHE = Path(".taskdml") / "cache"
"""The store the CLI uses when no ``--cache-dir`` is given (relative to the working folder)."""

_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


class Uncacheable(Exception):
    """A step's outputs cannot be stored (a type no format takes); the step is not cached."""


class Cache:
    """A store of step outputs.

    Parameters
    ----------
    url : str or path, optional
        The store's folder, or an fsspec URL (``s3://bucket/cache``); default
        :data:`DEFAULT_CACHE`. On a cluster whose workers run on other machines it must be a
        folder they reach too (they write and read chunked outputs themselves).

    Examples
    --------
    >>> import tempfile
    >>> from taskdml.cache._store import Cache
    >>> cache = Cache(tempfile.mkdtemp())
    >>> cache.entries()
    []
    """

    def __init__(self, url=None):
        import fsspec
        from fsspec.implementations.local import LocalFileSystem

        self.url = str(DEFAULT_CACHE if url is None else url)
        self.fs, self.root = fsspec.core.url_to_fs(self.url)
        self.local = isinstance(self.fs, LocalFileSystem)
        self._secret = None

    def __repr__(self):
        return f"Cache({self.url!r})"

    # ---- paths -------------------------------------------------------------------------

    def _path(self, *parts):
        return posixpath.join(self.root, *parts)

    def _url(self, *parts):
        path = self._path(*parts)
        return path if self.local else self.fs.unstrip_protocol(path)

    # ---- signing -------------------------------------------------------------------------

    def _key(self):
        if self._secret is None:
            path = self._path(".secret")
            if not self.fs.exists(path):
                self.fs.makedirs(self.root, exist_ok=True)
                self._write_secret(path)
            self._secret = self.fs.cat_file(path)
        return self._secret

    def _write_secret(self, path):
        secret = secrets.token_hex(32).encode()
        if self.local:
            try:
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:  # another run made it first
                return
            with os.fdopen(descriptor, "wb") as file:
                file.write(secret)
        else:
            self.fs.pipe_file(path, secret)

    def _sign(self, data):
        return hmac.new(self._key(), data, hashlib.sha256).hexdigest().encode()

    def _read_signed(self, path):
        """The JSON at *path* if its ``.sig`` matches, else ``None`` (and why)."""
        try:
            data = self.fs.cat_file(path)
            signature = self.fs.cat_file(path.rsplit(".", 1)[0] + ".sig")
        except (FileNotFoundError, OSError):
            return None, "missing"
        if not hmac.compare_digest(signature.strip(), self._sign(data)):
            return None, "its signature does not match this store's key"
        return json.loads(data), None

    def _write_signed(self, path, value):
        data = json.dumps(value, indent=1, default=str).encode()  # dicts keep their order
        self.fs.pipe_file(path.rsplit(".", 1)[0] + ".sig", self._sign(data))
        self.fs.pipe_file(path, data)  # written last: an entry with its JSON is complete

    # ---- entries -------------------------------------------------------------------------

    def lookup(self, key, touch=True):
        """The entry stored for *key*, or ``None``.

        Parameters
        ----------
        key : str
        touch : bool, default True
            Note the entry as used now (what ``gc`` keeps the most recently used by).

        Returns
        -------
        dict or None
            ``entry.json`` of a complete entry this store wrote for *key*. An entry it did not
            write (bad signature, another key) is refused with a warning.
        """
        import warnings

        entry, problem = self._read_signed(self._path("entries", key, "entry.json"))
        if entry is None:
            if problem != "missing":
                warnings.warn(
                    f"the cache entry {self._url('entries', key)} is not used: {problem}. "
                    "A cache reads only what it wrote; remove it with 'taskdml cache gc'.",
                    CacheWarning,
                    stacklevel=2,
                )
            return None
        if entry.get("key") != key:
            warnings.warn(
                f"the cache entry {self._url('entries', key)} is not used: it was written for "
                f"the key {entry.get('key')}.",
                CacheWarning,
                stacklevel=2,
            )
            return None
        if touch:
            self._touch(key)
        return entry

    def _touch(self, key):
        try:
            self.fs.pipe_file(self._path("entries", key, "used"), str(time.time()).encode())
        except OSError:  # a read-only store is still read
            pass

    def load(self, entry, client):
        """The outputs of *entry*, as the step returned them (chunked values lazy).

        Parameters
        ----------
        entry : dict
            From :meth:`lookup`.
        client : distributed.Client or None

        Returns
        -------
        object
        """
        return _cache_codec.decode(entry["outputs"], self._url("entries", entry["key"]), client)

    def artifact(self, entry, name):
        """The bytes of the run-directory file *name* stored with *entry*.

        Parameters
        ----------
        entry : dict
            From :meth:`lookup`.
        name : str
            The file's path in a run directory (``models/model.skops``).

        Returns
        -------
        bytes
        """
        return self.fs.cat_file(self._path("entries", entry["key"], "artifacts", name))

    def store(self, key, outputs, *, client, about, artifacts=()):
        """Write a step's *outputs* as the entry of *key*.

        Parameters
        ----------
        key : str
        outputs : object
            What the step returned.
        client : distributed.Client or None
        about : dict
            Kept in ``entry.json``: ``pipeline``, ``step``, ``run_id``, ``parts``, ``record``
            (the step's manifest entry).
        artifacts : iterable of (name, path)
            Run-directory files of the step, copied into the entry.

        Returns
        -------
        dict
            The entry.

        Raises
        ------
        StepFailed
            When the disk fills (or a file-size limit is reached) while writing; nothing
            stored before is touched and the half-written entry is removed.
        Uncacheable
            When a value has no format the cache writes.
        """
        temporary = self._path("tmp", uuid.uuid4().hex)
        try:
            self.fs.makedirs(temporary, exist_ok=True)
            folder = temporary if self.local else self.fs.unstrip_protocol(temporary)
            entry = {
                **about,
                "key": key,
                "created": datetime.datetime.now().isoformat(timespec="seconds"),
                "outputs": _cache_codec.encode(outputs, folder, "out", client),
                "artifacts": [],
            }
            for name, path in artifacts:
                target = posixpath.join(temporary, "artifacts", name)
                self.fs.makedirs(posixpath.dirname(target), exist_ok=True)
                self.fs.put_file(str(path), target)
                entry["artifacts"].append(name)
            entry["bytes"] = int(self.fs.du(temporary))
            self._write_signed(posixpath.join(temporary, "entry.json"), entry)
            self._publish(temporary, self._path("entries", key))
        except BaseException as error:
            self._remove(temporary)
            if _disk_full(error):
                self._remove_late(temporary)
                raise StepFailed(
                    "the disk is full (or a file-size limit was reached) while writing the "
                    f"step's outputs to the cache {self.url} ({error}). "
                    "Free space there, point --cache-dir at a larger disk, or run with "
                    "--no-cache; the outputs of earlier steps are kept.",
                    step=about["step"],
                ) from None
            if isinstance(error, Exception) and not isinstance(error, StepFailed):
                raise Uncacheable(f"{type(error).__name__}: {error}") from error
            raise
        return entry

    def discard(self, key):
        """Remove the entry of *key*, if there is one (one that cannot be read, say).

        Parameters
        ----------
        key : str
        """
        self._remove(self._path("entries", key))

    def _publish(self, temporary, final):
        if self.local:
            os.makedirs(os.path.dirname(final), exist_ok=True)
            try:
                os.rename(temporary, final)
            except OSError as error:
                if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                self._remove(temporary)  # the same outputs, stored by another run meanwhile
        elif not self.fs.exists(final):
            self.fs.mv(temporary, final, recursive=True)
        else:
            self._remove(temporary)

    def _remove_late(self, temporary):
        """Remove a failed entry once more after a second: workers may still have been writing
        chunks when the first write failed (``gc`` removes any left after that)."""
        time.sleep(1.0)
        self._remove(temporary)

    def _remove(self, path):
        try:
            self.fs.rm(path, recursive=True)
        except (FileNotFoundError, OSError):
            pass

    def entries(self):
        """Every complete entry, oldest first.

        Returns
        -------
        list of dict
            Each entry's ``key``, ``pipeline``, ``step``, ``run_id``, ``created``, ``bytes``,
            ``used`` (``time.time()`` of its last use) and ``valid`` (signed by this store).
        """
        found = []
        for path in self._listed("entries"):
            key = posixpath.basename(path)
            entry, problem = self._read_signed(posixpath.join(path, "entry.json"))
            if entry is None and problem == "missing":
                continue
            found.append(
                {
                    "key": key,
                    "pipeline": (entry or {}).get("pipeline"),
                    "step": (entry or {}).get("step"),
                    "run_id": (entry or {}).get("run_id"),
                    "created": (entry or {}).get("created"),
                    "bytes": (entry or {}).get("bytes", 0),
                    "used": self._used(path),
                    "valid": entry is not None and entry.get("key") == key,
                }
            )
        return sorted(found, key=lambda e: e["created"] or "")

    def _listed(self, *parts):
        try:
            return sorted(self.fs.ls(self._path(*parts), detail=False))
        except (FileNotFoundError, OSError):
            return []

    def _used(self, path):
        try:
            return float(self.fs.cat_file(posixpath.join(path, "used")))
        except (FileNotFoundError, OSError, ValueError):
            try:
                return self.fs.modified(posixpath.join(path, "entry.json")).timestamp()
            except (FileNotFoundError, OSError, NotImplementedError):
                return 0.0

    def clear(self, pipeline=None, step=None):
        """Remove entries: all, or those of one pipeline (and one step of it).

        Parameters
        ----------
        pipeline, step : str, optional

        Returns
        -------
        list of dict
            The entries removed (as :meth:`entries` lists them).
        """
        removed = [
            entry
            for entry in self.entries()
            if (pipeline is None or entry["pipeline"] == pipeline)
            and (step is None or entry["step"] == step)
        ]
        for entry in removed:
            self._remove(self._path("entries", entry["key"]))
            self._remove(self._path("checkpoints", entry["key"]))
        if pipeline is None and step is None:
            for folder in ("checkpoints", "steps", "tmp"):
                self._remove(self._path(folder))
        return removed

    def gc(self, *, older_than_s=None, max_bytes=None):
        """Remove what a crash left behind, entries unused for *older_than_s* seconds, and the
        least recently used entries beyond *max_bytes*.

        Parameters
        ----------
        older_than_s : float, optional
        max_bytes : int, optional

        Returns
        -------
        list of dict
            The entries removed; entries that this store did not sign are removed too.
        """
        for path in self._listed("tmp"):
            self._remove(path)
        entries = sorted(self.entries(), key=lambda e: e["used"])
        now, removed = time.time(), []
        total = sum(entry["bytes"] for entry in entries)
        for entry in entries:
            stale = older_than_s is not None and now - entry["used"] > older_than_s
            over = max_bytes is not None and total > max_bytes
            if stale or over or not entry["valid"]:
                self._remove(self._path("entries", entry["key"]))
                total -= entry["bytes"]
                removed.append(entry)
        kept = {entry["key"] for entry in entries} - {entry["key"] for entry in removed}
        for path in self._listed("checkpoints"):
            if posixpath.basename(path) in kept:  # the step finished: its checkpoints are done
                self._remove(path)
        return removed

    # ---- what the last run of a step was ---------------------------------------------------

    def remember(self, pipeline, step, parts):
        """Keep the *parts* of the key *step* of *pipeline* last ran with (for explanations).

        Parameters
        ----------
        pipeline, step : str
        parts : dict
            What the step's key hashed (:func:`taskdml.cache._keys.step_keys`).
        """
        path = self._path("steps", pipeline, f"{step}.json")
        self.fs.makedirs(posixpath.dirname(path), exist_ok=True)
        self.fs.pipe_file(path, json.dumps(parts, sort_keys=True, default=str).encode())

    def last(self, pipeline, step):
        """The parts *step* of *pipeline* last ran with.

        Parameters
        ----------
        pipeline, step : str

        Returns
        -------
        dict or None
            ``None`` when the step never ran with this store.
        """
        try:
            return json.loads(self.fs.cat_file(self._path("steps", pipeline, f"{step}.json")))
        except (FileNotFoundError, OSError, ValueError):
            return None

    # ---- checkpoints of long steps ---------------------------------------------------------

    def save_checkpoint(self, key, name, state):
        """Keep *state* as checkpoint *name* of the step of *key*, replacing the last one.

        Parameters
        ----------
        key : str
            The step's key.
        name : str
            Which checkpoint of the step (a training, one foreach item's training).
        state : object
            Written with joblib; read back only if this store signed it.
        """
        import io

        import joblib

        buffer = io.BytesIO()
        joblib.dump(state, buffer)
        data = buffer.getvalue()
        folder = self._path("checkpoints", key)
        self.fs.makedirs(folder, exist_ok=True)
        final = posixpath.join(folder, f"{name}.checkpoint")
        temporary = posixpath.join(folder, f".{name}.{uuid.uuid4().hex}")
        try:  # the signature travels in the file: one rename replaces both
            self.fs.pipe_file(temporary, self._sign(data) + b"\n" + data)
            self.fs.mv(temporary, final)
        except BaseException:
            self._remove(temporary)
            raise

    def load_checkpoint(self, key, name):
        """The last checkpoint *name* of the step of *key*.

        Parameters
        ----------
        key : str
            The step's key.
        name : str
            Which checkpoint of the step.

        Returns
        -------
        object or None
            The state saved, or ``None`` when there is none this store signed.
        """
        import io

        import joblib

        try:
            held = self.fs.cat_file(self._path("checkpoints", key, f"{name}.checkpoint"))
        except (FileNotFoundError, OSError):
            return None
        signature, _, data = held.partition(b"\n")
        if not hmac.compare_digest(signature, self._sign(data)):
            return None  # written by another store, or the signature of a newer one
        return joblib.load(io.BytesIO(data))

    def drop_checkpoints(self, key):
        """Remove the checkpoints of the step of *key* (it finished and is stored).

        Parameters
        ----------
        key : str
        """
        self._remove(self._path("checkpoints", key))


def _disk_full(error):
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in _FULL:
            return True
        error = error.__cause__ or error.__context__
    return False
