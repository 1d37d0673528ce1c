"""paro-kernels: ParoQuant formats, fp64/torch reference ops and checkpoint tooling.

Imports torch only: never vLLM, and Triton stays optional (GPU kernels import it lazily).
"""

__version__ = "0.1.0"
