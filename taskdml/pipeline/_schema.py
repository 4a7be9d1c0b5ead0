"""The pipeline file format, version 1, as one JSON Schema, and a validator for it.

The schema is the single description of the format: ``taskdml schema`` publishes it for
editors, and :func:`check` walks a loaded file against it to report every problem with its key
path, what was expected, what was found and, for a mistyped key, the closest allowed one.
Only the JSON Schema keywords used here are implemented. Rules that span several keys (step
references, cycles, which keys a step kind allows) live in :mod:`taskdml.pipeline._model`.
"""

import copy

from taskdml.exceptions import did_you_mean
from taskdml.parallel.engine import _options

IDENTIFIER = r"^[a-z][a-z0-9_]*$"
CALLABLE = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*$"
REFERENCE = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)?$"

_reference = {
    "type": "string",
    "pattern": REFERENCE,
    "title": "a reference 'step' or 'step.output'",
}
_callable = {
    "type": "string",
    "pattern": CALLABLE,
    "title": "a callable written 'module:attr' (e.g. 'sklearn.linear_model:SGDClassifier')",
}

MODES = ("data", "model", "federated", "task", "auto")
"""The kinds of parallelism a ``fit:`` or ``search:`` step may ask for (``parallel.mode``)."""

MODE_KEYS = {
    **_options.mode_keys(),
    "federated": ("silos", "rounds", "local_epochs", "secure_aggregation", "dp", "random_state"),
}
"""The ``parallel`` keys each mode reads (``auto`` reads those of data and model): the
engine's from its options table (:mod:`taskdml.parallel.engine._options`), federated's here."""

RENAMED_KEYS = dict(_options.RENAMED)
"""Old ``parallel`` key -> new: accepted with a ``FutureWarning`` in 0.2, removed in 0.3."""

PARALLEL = {
    "type": "object",
    "description": "how a fit trains: data-parallel replicas merged sync/async, sequential in "
    "one task, model-parallel shards, or federated across silos",
    "additionalProperties": False,
    "properties": {
        "mode": {
            "enum": list(MODES),
            "description": "data: replicas of the model on chunks of the data (default); model: "
            "the model's classes split across workers; federated: trained inside the silos, "
            "only model state moves; task: one task per training (one worker); auto: chosen "
            "from the model's and the data's size against the workers' memory",
        },
        # the engine's options, generated from its table
        **_options.pipeline_properties(),
        "silos": {
            "type": "array",
            "items": {"type": "string", "pattern": IDENTIFIER},
            "description": "federated: the silos that train (default every silo of the file)",
        },
        "rounds": {
            "type": "integer",
            "minimum": 1,
            "description": "federated: rounds of local training and merging",
        },
        "local_epochs": {
            "type": "integer",
            "minimum": 1,
            "description": "federated: passes each silo makes over its data per round",
        },
        "secure_aggregation": {
            "type": "boolean",
            "description": "federated: the aggregator sees only the sum of masked updates",
        },
        "dp": {
            "type": "object",
            "additionalProperties": False,
            "required": ["clip_norm", "noise_multiplier"],
            "description": "federated: client-level differential privacy",
            "properties": {
                "clip_norm": {"type": "number", "description": "bound on a silo's update"},
                "noise_multiplier": {
                    "type": "number",
                    "description": "Gaussian noise's standard deviation over clip_norm",
                },
                "delta": {"type": "number", "description": "delta of (epsilon, delta)"},
            },
        },
    },
}

SILO = {
    "type": "object",
    "description": "a party whose data stays on its own workers",
    "additionalProperties": False,
    "required": ["load"],
    "properties": {
        "load": {
            **_callable,
            "description": "returns the silo's (X, y) or a list of such chunks; runs on the "
            "silo's workers only",
        },
        "with": {"type": "object", "description": "keyword arguments of load"},
        "workers": {
            "type": "array",
            "items": {"type": ["string", "integer"]},
            "description": "names or addresses of the silo's workers",
        },
        "resources": {
            "type": "object",
            "additionalProperties": {"type": "number"},
            "description": "a Dask resource its workers have, e.g. {hospital_a: 1}; the "
            "embedded cluster starts a worker with it",
        },
    },
}

_distribution = {
    "type": "object",
    "minProperties": 1,
    "additionalProperties": False,
    "title": "a list of values or one of {uniform: [low, high]}, {loguniform: [low, high]}, "
    "{randint: [low, high]}, {choice: [values]}",
    "properties": {
        "uniform": {"type": "array", "items": {"type": "number"}},
        "loguniform": {"type": "array", "items": {"type": "number"}},
        "randint": {"type": "array", "items": {"type": "integer"}},
        "choice": {"type": "array"},
    },
}
_space = {
    "type": "object",
    "minProperties": 1,
    "description": "parameter -> list of values or a distribution",
    "additionalProperties": {"anyOf": [{"type": "array"}, _distribution]},
}

BUDGET = {
    "type": "object",
    "description": "how much a search may train",
    "additionalProperties": False,
    "properties": {
        "trials": {
            "type": "integer",
            "minimum": 1,
            "description": "candidates to sample (random, asha, halving)",
        },
        "max_epochs": {
            "type": "integer",
            "minimum": 1,
            "description": "most epochs of partial_fit a trial gets",
        },
        "min_epochs": {"type": "integer", "minimum": 1, "description": "epochs of the first rung"},
        "reduction_factor": {
            "type": "integer",
            "minimum": 2,
            "description": "eta: 1/eta of a rung is promoted",
        },
    },
}

STEP = {
    "type": "object",
    "description": "one step: exactly one of call, map, fit, evaluate, search",
    "title": "a step: a mapping with one of call, map, fit, evaluate, search",
    "additionalProperties": False,
    "properties": {
        "description": {"type": "string"},
        "call": {**_callable, "description": "run a Python callable as a task"},
        "map": {
            **_callable,
            "description": "apply a function to every chunk of inputs.data, where it lives",
        },
        "features": {
            "anyOf": [
                {"type": "integer", "minimum": 1, "title": "an integer >= 1"},
                {
                    "type": "array",
                    "items": {"type": "string"},
                    "title": "a list of feature names",
                },
            ],
            "description": "map: the width (or feature names) of the X its function returns; "
            "found by running it on chunk 0 when omitted",
        },
        "fit": {**_callable, "description": "fit this estimator class on inputs.data"},
        "evaluate": {
            "type": ["array", "string"],
            "items": {"type": "string"},
            "description": "metric names computed chunk-wise on inputs.data",
        },
        "with": {"type": "object", "description": "keyword arguments of the callable or estimator"},
        "inputs": {
            "type": "object",
            "description": "argument name -> 'step' or 'step.output' (or a list of them)",
            "additionalProperties": {
                "anyOf": [_reference, {"type": "array", "items": _reference}],
            },
        },
        "outputs": {
            "type": "array",
            "items": {"type": "string", "pattern": IDENTIFIER},
            "description": "names of the values the step returns, in order",
        },
        "foreach": {
            "type": ["object", "array"],
            "description": (
                "fan out: {key: [values]} (a product over keys) or a list of {key: value}"
            ),
            "additionalProperties": {"type": "array"},
            "items": {"type": "object"},
        },
        "search": {**_callable, "description": "search hyperparameters of this estimator class"},
        "method": {"enum": ["grid", "random", "halving", "hyperband", "asha"]},
        "space": {
            "anyOf": [_space, {"type": "array", "items": _space}],
            "description": "the search space (a list of spaces for conditional parameters)",
        },
        "budget": BUDGET,
        "cv": {"type": "integer", "minimum": 2, "description": "k-fold cross-validation"},
        "validation_fraction": {"type": "number", "description": "hold-out fraction for scoring"},
        "scoring": {"type": "string", "description": "a scikit-learn scorer name"},
        "classes": {"type": "array", "description": "all class labels, when fitting a classifier"},
        "parallel": PARALLEL,
        "predict": {
            "enum": ["predict", "predict_proba", "decision_function", "transform"],
            "description": "apply inputs.model (or model: {run, step}) to every chunk of "
            "inputs.data with this method, where the chunks live",
        },
        "model": {
            "type": "object",
            "additionalProperties": False,
            "required": ["run", "step"],
            "description": "predict: the model a recorded run saved, in place of inputs.model",
            "properties": {
                "run": {"type": "string", "description": "a run id, id prefix, path or latest"},
                "step": {"type": "string", "description": "its step ('step[item]' in a foreach)"},
            },
        },
        "path": {
            "type": "string",
            "pattern": r"^.*\.(parquet|zarr|csv)/?$",
            "title": "a path ending in .parquet, .zarr or .csv",
            "description": "predict: where the workers write the predictions, chunk by chunk",
        },
        "retries": {
            "type": "object",
            "description": "run the step again when it fails with an error marked transient",
            "additionalProperties": False,
            "required": ["times", "errors"],
            "properties": {
                "times": {"type": "integer", "minimum": 1, "description": "retries at most"},
                "errors": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"type": "string"},
                    "description": "exception classes: builtin names (ConnectionError) or "
                    "'module:Class'",
                },
                "backoff_s": {
                    "type": "number",
                    "minimum": 0,
                    "description": "seconds before the first retry, doubled each time (default 1)",
                },
            },
        },
    },
}

SECURITY_FILES = (
    "tls_ca_file",
    "tls_client_cert",
    "tls_client_key",
    "tls_scheduler_cert",
    "tls_scheduler_key",
    "tls_worker_cert",
    "tls_worker_key",
)
"""The ``security`` keys that name files (PEM); with the other keys, Security's arguments."""

CLUSTER = {
    "type": "object",
    "description": (
        "where to run: a LocalCluster (default), a scheduler address, or a cluster class"
    ),
    "additionalProperties": False,
    "properties": {
        "n_workers": {"type": "integer", "minimum": 1},
        "threads_per_worker": {"type": "integer", "minimum": 1},
        "memory_limit": {"type": ["string", "integer"]},
        "processes": {"type": "boolean"},
        "dashboard_address": {"type": ["string", "null"]},
        "address": {
            "type": "string",
            "description": "an existing scheduler, e.g. tcp://127.0.0.1:8786",
        },
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["class"],
            "properties": {
                "class": {
                    **_callable,
                    "description": "a cluster class, e.g. dask_jobqueue:SLURMCluster",
                },
                "kwargs": {"type": "object"},
                "scale": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "ask the cluster manager for this many workers",
                },
                "adapt": {
                    "type": "object",
                    "additionalProperties": False,
                    "description": "let the cluster manager add and remove workers",
                    "properties": {
                        "minimum": {"type": "integer", "minimum": 0},
                        "maximum": {"type": "integer", "minimum": 1},
                        "minimum_jobs": {"type": "integer", "minimum": 0},
                        "maximum_jobs": {"type": "integer", "minimum": 1},
                        "interval": {"type": "string", "description": "e.g. 1s"},
                        "wait_count": {"type": "integer", "minimum": 1},
                        "target_duration": {"type": "string", "description": "e.g. 5s"},
                    },
                },
            },
        },
        "security": {
            "type": "object",
            "additionalProperties": False,
            "description": (
                "TLS for a tls:// scheduler: keyword arguments of distributed.security.Security"
            ),
            "properties": {
                **{name: {"type": "string"} for name in SECURITY_FILES},
                "require_encryption": {"type": "boolean"},
                "tls_ciphers": {"type": "string"},
                "tls_min_version": {"enum": [1.2, 1.3], "description": "TLS 1.2 or 1.3"},
                "tls_max_version": {"enum": [1.2, 1.3], "description": "TLS 1.2 or 1.3"},
                "extra_conn_args": {"type": "object"},
            },
        },
    },
}

TRACKING = {
    "type": "object",
    "additionalProperties": False,
    "required": ["mlflow"],
    "description": "log the run to MLflow (taskdml[tracking]); --track URI overrides mlflow",
    "properties": {
        "mlflow": {
            "type": "string",
            "description": "a tracking URI: a folder (mlruns), sqlite:///mlflow.db or "
            "http://HOST:PORT of a server",
        },
        "experiment": {
            "type": "string",
            "description": "the MLflow experiment (default: the pipeline's name)",
        },
    },
}

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://taskdml.dev/schema/pipeline-1.json",
    "title": "taskdml pipeline file, version 1",
    "type": "object",
    "additionalProperties": False,
    "required": ["taskdml", "name", "steps"],
    "properties": {
        "taskdml": {"const": 1, "description": "the format version: 1"},
        "name": {
            "type": "string",
            "pattern": r"^[A-Za-z][A-Za-z0-9_.-]*$",
            "title": "a name of letters, digits, '_', '.' or '-', starting with a letter",
        },
        "description": {"type": "string"},
        "params": {"type": "object", "description": "values for ${params.*} and CLI overrides"},
        "cluster": CLUSTER,
        "silos": {
            "type": "object",
            "minProperties": 1,
            "description": "the parties of federated steps: name -> {load, with, workers or "
            "resources}",
            "propertyNames": {"pattern": IDENTIFIER},
            "additionalProperties": SILO,
        },
        "imports": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "allow": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "module globs whose callables may be named",
                },
                "trust": {
                    "type": "boolean",
                    "description": "the file is trusted like code: it may name deserialisers "
                    "and code loaders (numpy.load with allow_pickle, joblib.load, ...)",
                },
            },
        },
        "steps": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"pattern": IDENTIFIER},
            "additionalProperties": STEP,
        },
        "tracking": TRACKING,
    },
}

_TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "null": type(None),
}
_NAMES = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


def schema():
    """The JSON Schema of the pipeline file format (a copy the caller may change).

    Returns
    -------
    dict
        A JSON Schema (draft 2020-12) that every valid pipeline file satisfies; ``taskdml
        schema`` prints it for editors.

    Examples
    --------
    >>> import taskdml
    >>> taskdml.schema()["properties"]["taskdml"]
    {'const': 1, 'description': 'the format version: 1'}
    """
    return copy.deepcopy(SCHEMA)


def check(value, schema, path=()):
    """Every way *value* breaks *schema*.

    Parameters
    ----------
    value : object
        A loaded pipeline file, or a part of one.
    schema : dict
        A JSON Schema using the keywords this module implements.
    path : tuple, default ()
        The key path of *value*, which prefixes every problem's path.

    Returns
    -------
    list of (tuple, str)
        ``(key path, what was expected and what was found)``; empty when *value* is valid.
    """
    if "anyOf" in schema:
        if any(not check(value, option, path) for option in schema["anyOf"]):
            return []
        wanted = " or ".join(_expected(option) for option in schema["anyOf"])
        return [(path, f"expected {wanted}, found {value!r}.")]
    if "const" in schema and value != schema["const"]:
        return [(path, f"expected {schema['const']!r}, found {value!r}.")]
    if "enum" in schema and value not in schema["enum"]:
        choices = ", ".join(repr(choice) for choice in schema["enum"])
        return [
            (
                path,
                f"expected one of {choices}, found {value!r}.{did_you_mean(value, schema['enum'])}",
            )
        ]
    if "type" in schema and not _is_type(value, schema["type"]):
        return [(path, f"expected {_expected(schema)}, found {value!r}.")]
    if isinstance(value, dict):
        return _check_mapping(value, schema, path)
    if isinstance(value, list) and "items" in schema:
        return [
            p for i, item in enumerate(value) for p in check(item, schema["items"], path + (i,))
        ]
    return _check_scalar(value, schema, path)


def _check_mapping(value, schema, path):
    import re

    problems = []
    for key in schema.get("required", ()):
        if key not in value:
            problems.append((path, f"missing required key {key!r}."))
    if len(value) < schema.get("minProperties", 0):
        problems.append((path, "expected at least one entry, found none."))
    known = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    names = schema.get("propertyNames")
    for key, item in value.items():
        if names and not (isinstance(key, str) and re.match(names["pattern"], key)):
            problems.append(
                (
                    path + (key,),
                    f"name {key!r} is not allowed: use lowercase letters, digits and '_', "
                    "starting with a letter (e.g. 'train_model').",
                )
            )
            continue
        if key in known:
            problems += check(item, known[key], path + (key,))
        elif extra is False:
            allowed = ", ".join(sorted(known))
            problems.append(
                (
                    path + (key,),
                    f"unknown key {key!r}.{did_you_mean(key, known)} Allowed here: {allowed}.",
                )
            )
        elif isinstance(extra, dict):
            problems += check(item, extra, path + (key,))
    return problems


def _check_scalar(value, schema, path):
    import re

    if "pattern" in schema and isinstance(value, str) and not re.match(schema["pattern"], value):
        return [(path, f"expected {_expected(schema)}, found {value!r}.")]
    if "minimum" in schema and isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < schema["minimum"]:
            return [(path, f"expected a value >= {schema['minimum']}, found {value!r}.")]
    return []


def _is_type(value, types):
    types = [types] if isinstance(types, str) else types
    if isinstance(value, bool):
        return "boolean" in types
    return any(isinstance(value, _TYPES[name]) for name in types)


def _expected(schema):
    if "title" in schema:
        return schema["title"]
    if "enum" in schema:
        return "one of " + ", ".join(repr(choice) for choice in schema["enum"])
    types = schema.get("type", "object")
    types = [types] if isinstance(types, str) else types
    names = [_NAMES[name] for name in types]
    if "items" in schema and "array" in types and "anyOf" not in schema["items"]:
        names[types.index("array")] = f"a list of items each {_expected(schema['items'])}"
    return " or ".join(names)
