"""pipeplan: plan, preview and run elastic pipeline × data-parallel training with freezing.

    import pipeplan
    pipeplan.preview(profile="profiles/bert-tiny@cpu-1t.json", devices_per_node=8)
    pipeplan.run(model="vit-digits", epochs=2)

`profile`, `plan`, `preview`, `run` and `export` are `pipeplan.api`'s functions (see there),
loaded on first use: importing the package stays light (no torch, no transformers).
"""

import importlib
import sys
import types

from pipeplan.errors import PipeplanError

__all__ = ["PipeplanError", "__version__", "export", "plan", "preview", "profile", "run"]

API = ("export", "plan", "preview", "profile", "run")


def _api() -> types.ModuleType:
    # By name: the package is the base layer and must not import the top layer's modules
    # until a caller asks for them (docs/architecture.md §2).
    return importlib.import_module("pipeplan.api")


def _version() -> str:
    """The installed distribution's version, asked for on first use: importlib.metadata
    costs the command's start tens of milliseconds, in which a Ctrl-C was a traceback."""
    from importlib import metadata

    try:
        return metadata.version("pipeplan")
    except metadata.PackageNotFoundError:  # a checkout on sys.path never pip-installed
        return "0.1.0"


def __getattr__(name: str):
    if name in API:
        return getattr(_api(), name)
    if name == "__version__":
        return _version()
    raise AttributeError(f"module 'pipeplan' has no attribute {name!r}")


class _PlanModule(types.ModuleType):
    """The planner module `pipeplan.plan`, callable as the API's `pipeplan.plan(...)`.

    Importing a submodule binds it as the package's attribute, which would hide the API
    function of the same name once anything imported the planner (a preview does). So the
    module answers a call with the API function, and its attributes stay as they are."""

    def __call__(self, *args, **kwargs):
        return _api().plan(*args, **kwargs)


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value) -> None:
        if name == "plan" and type(value) is types.ModuleType:  # the import binding it
            value.__class__ = _PlanModule
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
