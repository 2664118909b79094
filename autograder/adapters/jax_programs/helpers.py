"""The JAX adapter's helper processes of the judge (autograder/kernel/helpers.py runs them, each in a
sandbox of its own, confined like a kernel):

- `builder`: a Python with JAX that rebuilds a learner's function from its answer cells alone and
  writes its program as data (sandboxed/program_builder.py): the kernel is never asked for a program;
- `artifacts`: a Python with JAX that makes that program again from the data, transforms it, runs
  it on the judge's inputs or reads its compiled memory plan (sandboxed/artifact_runner.py); no
  learner code runs there.
"""

from __future__ import annotations

from pathlib import Path

from autograder.adapters.jax_programs.compile_cache import JAX_CACHE
from autograder.kernel.helpers import HelperProcess

#: The texts these helpers run, sent into their sandboxes.
SENT = Path(__file__).resolve().parent / "sandboxed"


class ArtifactRunner(HelperProcess):
    """Makes programs written as data again, transforms them, runs them on the judge's inputs or
    compiles them for their memory plans."""

    runner = SENT / "artifact_runner.py"
    sent = (SENT / "program_data.py",)
    uses_compile_cache = True

    def config(self) -> dict:
        # The shipped modules, for the wraps a check applies to a program (a renaming of checkpoint names, say).
        inside = self.assignment_inside()
        return {} if inside is None else {"assignment": inside}

    def extra_env(self) -> dict[str, str]:
        inside = self.cache_inside()
        if inside is None:
            return {}
        return JAX_CACHE.writing(inside) if self.cache_writable else JAX_CACHE.reading(inside)


class ProgramBuilder(HelperProcess):
    """Rebuilds a learner's function from its answer cells and writes its program as data (never runs it).

    An answer cell runs here as the notebook's kernel runs it: started as the kernel is (no
    isolated mode), with the kernel's environment, its working directory holding the shipped
    files, the compile cache and a /run/kernel folder where the kernel has them, as `__main__`
    (sandboxed/program_builder.py)."""

    runner = SENT / "program_builder.py"
    sent = (SENT / "program_data.py",)
    uses_compile_cache = True
    isolated = False

    def config(self) -> dict:
        from nbclient import NotebookClient

        return {
            "assignment": self.assignment_inside(),
            # A kernel's command line ends with the argument nbclient starts every kernel with.
            "kernel_args": [f"--HistoryManager.hist_file={NotebookClient.ipython_hist_file.default_value}"],
        }

    def environment(self, scratch: str) -> dict[str, str]:
        if self.kernel_environment is None or self.sandbox.unsafe:
            return super().environment(scratch)
        return dict(self.kernel_environment)

    def extra_env(self) -> dict[str, str]:
        inside = self.cache_inside()
        return {} if inside is None else JAX_CACHE.reading(inside)

    def connection(self) -> Path | None:
        if self.sandbox.unsafe:
            return None
        empty = self.folder / "run-kernel"
        empty.mkdir(parents=True, exist_ok=True)
        return empty
