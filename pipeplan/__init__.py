"""pipeplan: plan, preview and run elastic pipeline × data-parallel training with freezing."""

from importlib import metadata

from pipeplan.errors import PipeplanError

try:
    __version__ = metadata.version("pipeplan")
except metadata.PackageNotFoundError:  # a checkout on sys.path that was never pip-installed
    __version__ = "0.1.0"
__all__ = ["PipeplanError", "__version__"]
