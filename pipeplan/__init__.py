"""pipeplan: plan, preview and run elastic pipeline × data-parallel training with freezing."""

from pipeplan.errors import PipeplanError

__version__ = "0.1.0"
__all__ = ["PipeplanError", "__version__"]
