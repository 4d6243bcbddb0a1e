"""The optional compiled part: the sizing simulation's event loop (``planner/replica_sim_compiled.pyx``).

Everything else is in ``pyproject.toml``. The extension is built where Cython and a C compiler are
present; where either is missing, or the build fails, the package installs without it and
``planner.replica_sim`` runs its Python loop, which gives the same timelines (only slower).
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """A failed compile is a warning, not a failed install: the pure-Python loop is the reference."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, no Python headers: any of distutils' errors
            self.warn(f"the compiled sizing loop was not built ({exc}); the Python loop runs instead")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self.warn(f"{ext.name} was not built ({exc}); the Python loop runs instead")


def extensions() -> list[Extension]:
    try:
        from Cython.Build import cythonize
    except ImportError:
        return []
    # -ffp-contract=off: no fused multiply-add, so each rounding is the Python loop's (bit-identical timelines)
    ext = Extension(
        "planner.replica_sim_compiled",
        ["planner/replica_sim_compiled.pyx"],
        extra_compile_args=["-O2", "-ffp-contract=off"],
    )
    return list(cythonize([ext], language_level=3, quiet=True))


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
