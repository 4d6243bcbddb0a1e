"""The optional compiled parts: the sizing simulation's event loop (``planner/simulation/replica_sim_compiled.pyx``),
the closed loop plans step through the engine (``planner/simulation/closed_loop_compiled.pyx``) and the native
wire's per-read path (``loadgen/wire/fastread.pyx``).

Everything else is in ``pyproject.toml``. The extensions are built where Cython and a C compiler are
present; where either is missing, or a build fails, the package installs without it and the Python
code runs instead (``planner.simulation.replica_sim``'s loop, ``loadgen.wire.native`` alone), with the same
results, only slower.
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """A failed compile is a warning, not a failed install: the pure-Python loop is the reference."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, no Python headers: any of distutils' errors
            self.warn(f"the compiled parts were not built ({exc}); their Python twins run instead")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self.warn(f"{ext.name} was not built ({exc}); its Python twin runs instead")


def extensions() -> list[Extension]:
    try:
        from Cython.Build import cythonize
    except ImportError:
        return []
    # -ffp-contract=off: no fused multiply-add, so each rounding is the Python loop's (bit-identical timelines)
    sizing = Extension(
        "planner.simulation.replica_sim_compiled",
        ["planner/simulation/replica_sim_compiled.pyx"],
        extra_compile_args=["-O2", "-ffp-contract=off"],
    )
    closed = Extension(
        "planner.simulation.closed_loop_compiled",
        ["planner/simulation/closed_loop_compiled.pyx"],
        extra_compile_args=["-O2", "-ffp-contract=off"],
    )
    reader = Extension("loadgen.wire.fastread", ["loadgen/wire/fastread.pyx"], extra_compile_args=["-O2"])
    return list(cythonize([sizing, closed, reader], language_level=3, quiet=True))


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
