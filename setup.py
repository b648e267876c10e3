"""The optional compiled extension (everything else is declared in pyproject.toml).

``pytimely._speedups`` is built from ``pytimely/_speedups.c`` when a C compiler and the Python
headers are there; ``optional=True`` makes a failed build a warning, not a failed install:
pytimely then runs its pure-Python paths (``pytimely --version`` says which are active).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "pytimely._speedups",
            sources=["pytimely/_speedups.c"],
            optional=True,
        )
    ]
)
