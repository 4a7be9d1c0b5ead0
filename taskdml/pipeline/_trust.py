"""What a pipeline file may call: the threat model of ``imports``.

A pipeline file is data. Someone who runs a file from a colleague or a repository, as they
would open a CSV, must not run code the file does not show. So:

- A step names callables only from ``imports.allow``. The default names what pipelines need
  and nothing wider: taskdml, scikit-learn's public API, numpy's top-level functions,
  scipy's distributions and sparse matrices, and XGBoost's and LightGBM's top-level names
  (their estimators; their models load from JSON or text, never pickle). Its submodules
  (``numpy.f2py``, ``numpy.ctypeslib``, ``numpy.testing``) are not in it.
- Some modules run commands or code whatever their arguments (:data:`BLOCKED`): they are never
  callable, trusted or not.
- Some callables turn data into code: deserialisers and code loaders (:data:`CODE_LOADERS`).
  ``numpy.load`` with ``allow_pickle``, ``pandas.read_pickle``, ``joblib.load``, ``pickle``,
  ``dill``, ``cloudpickle``, ``marshal``, ``importlib``, ``ctypes``, ``yaml.load``, ``eval``
  helpers, taskdml's own ``runs.load_model``. Private names (a module or attribute starting
  with ``_``) are not an API, and ``sklearn.utils._testing`` runs Python source. These are
  refused wherever they come from, even from a module the file allows, unless the file is
  *trusted*: ``imports: {trust: true}`` in the file, or ``taskdml run --trust``. Trust says
  that the file is code, and the runner prints that it was trusted.

The check is by name, on the ``module:attr`` a step names, before anything is imported or run.
"""

import fnmatch

DEFAULT_ALLOW = (
    "sklearn.*",
    "taskdml.*",
    "numpy",
    "scipy.stats",
    "scipy.sparse",
    "xgboost",
    "lightgbm",
)
"""Module globs a pipeline may name when its file says nothing: a glob without ``.*`` names
that module alone, not its submodules (``xgboost:XGBClassifier``, not ``xgboost.dask``)."""

BLOCKED = (
    "os",
    "sys",
    "subprocess",
    "shutil",
    "builtins",
    "socket",
    "pty",
    "posix",
    "multiprocessing",
)
"""Top-level modules that run commands or touch the system: never callable from a file."""

CODE_LOADERS = {
    "pickle:*": "it unpickles, which runs code",
    "_pickle:*": "it unpickles, which runs code",
    "cloudpickle:*": "it unpickles, which runs code",
    "dill:*": "it unpickles, which runs code",
    "jsonpickle:*": "it unpickles, which runs code",
    "shelve:*": "it unpickles, which runs code",
    "marshal:*": "it loads code objects",
    "joblib:load": "it unpickles, which runs code",
    "joblib.numpy_pickle:*": "it unpickles, which runs code",
    "pandas:read_pickle": "it unpickles, which runs code",
    "pandas.io.pickle:*": "it unpickles, which runs code",
    "pandas:eval": "it evaluates expressions",
    "pandas:*.eval": "it evaluates expressions",
    "pandas:*.query": "it evaluates expressions",
    "numexpr:evaluate": "it evaluates expressions",
    "sympy:sympify": "it evaluates strings with eval",
    "sympy.parsing.*": "it evaluates strings with eval",
    "yaml:load": "it builds arbitrary Python objects",
    "yaml:load_all": "it builds arbitrary Python objects",
    "yaml:unsafe_load*": "it builds arbitrary Python objects",
    "yaml:full_load*": "it builds arbitrary Python objects",
    "torch:load": "it unpickles, which runs code",
    "importlib:*": "it imports code by name",
    "importlib.*": "it imports code by name",
    "runpy:*": "it runs Python code",
    "code:*": "it runs Python code",
    "codeop:*": "it compiles Python code",
    "ctypes:*": "it calls native code",
    "ctypes.*": "it calls native code",
    "numpy:ctypeslib": "it calls native code",
    "numpy.ctypeslib:*": "it calls native code",
    "numpy.f2py:*": "it compiles and runs native code",
    "numpy.testing:*": "it runs Python source",
    "taskdml.runs:load_model": "it loads models with joblib where skops cannot, which unpickles",
}
"""``module:attr`` globs of callables that turn data into code, and why; refused unless the
file is trusted."""

UNLESS_ARGUMENT = {
    "numpy:load": ("allow_pickle", "it unpickles object arrays, which runs code"),
    "numpy.lib.npyio:load": ("allow_pickle", "it unpickles object arrays, which runs code"),
    "numpy.lib.format:read_array": ("allow_pickle", "it unpickles object arrays, which runs code"),
    "skops.io:load": ("trusted", "it loads the types it is told to trust, which runs code"),
}
"""Callables safe by default that one argument, when true, turns into code loaders."""


def refusal(path, allow, *, trust=False, arguments=()):
    """Why a pipeline file may not call *path* (``"module:attr"``), or ``None``.

    Parameters
    ----------
    path : str
    allow : sequence of str
        The file's ``imports.allow`` globs.
    trust : bool, default=False
        Whether the file is trusted like code (``imports.trust``).
    arguments : iterable of mapping
        The keyword arguments the step may call it with (its ``with`` and each ``foreach``
        item): a few callables load code only when told to.

    Returns
    -------
    str or None
        The reason, with the fix.

    Examples
    --------
    >>> refusal("sklearn.linear_model:SGDClassifier", DEFAULT_ALLOW) is None
    True
    >>> refusal("numpy:load", DEFAULT_ALLOW, arguments=[{"allow_pickle": True}])[:40]
    "'numpy:load' with allow_pickle=True can "
    """
    module, _, attr = path.partition(":")
    top = module.split(".")[0]
    if top in BLOCKED:
        return (
            f"{path!r} is refused: modules of {top!r} run commands and are never allowed, "
            "whatever imports.allow says."
        )
    if not any(
        fnmatch.fnmatchcase(module, glob) or module == glob.removesuffix(".*") for glob in allow
    ):
        return (
            f"{path!r} is outside imports.allow ({', '.join(allow)}). Add a glob for module "
            f"{module!r} to imports.allow if you trust it."
        )
    if trust:
        return None
    reason = _code_loader(path, module, attr, arguments)
    if reason is None:
        return None
    return (
        f"{reason}. A pipeline file must not run code it does not show; if you trust this "
        "file like code, say so with 'imports: {trust: true}' or 'taskdml run --trust'."
    )


def _code_loader(path, module, attr, arguments):
    for glob, why in CODE_LOADERS.items():
        if fnmatch.fnmatchcase(path, glob) or fnmatch.fnmatchcase(module, glob):
            return f"{path!r} is refused: {why}"
    if path in UNLESS_ARGUMENT:
        name, why = UNLESS_ARGUMENT[path]
        for kwargs in arguments:
            if kwargs.get(name):
                return f"{path!r} with {name}={kwargs[name]!r} can run code: {why}"
    private = [part for part in module.split(".") + attr.split(".") if part.startswith("_")]
    if private:
        return f"{path!r} is refused: {private[0]!r} is private, not an API a file may call"
    return None
