"""JAX's persistent compilation cache, as the core's compile cache (autograder/kernel/compile_cache.py)
hands it to kernels: the environment of the reference run's kernels, which fill it with every
program the instructor's notebooks compile, and of the learners' kernels, which only read it."""

from __future__ import annotations

from autograder.kernel.adapter import CompileCacheEnv

#: A minimum compile time no compile reaches: the kernel reads the cache and never writes it.
NEVER = "1e9"


def _common(folder: str) -> dict[str, str]:
    return {
        "JAX_COMPILATION_CACHE_DIR": str(folder),
        # By default JAX also points XLA's autotuning cache into the folder, which puts the
        # folder's path in every key: the kernels that fill and read it see different paths.
        "JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES": "none",
        # XLA:CPU logs a feature-list "mismatch" for each executable it loads (it compares
        # tuning flags the host list never shows); the core's host signature is the real check.
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }


def writing_env(folder: str) -> dict[str, str]:
    """Environment of a trusted kernel that fills the cache: keep every compile."""
    return {
        **_common(folder),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }


def reading_env(folder: str) -> dict[str, str]:
    """Environment of a student kernel: load from the cache, never write to it."""
    return {**_common(folder), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": NEVER}


JAX_CACHE = CompileCacheEnv(
    writing_env,
    reading_env,
    withheld=("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE", "JAX_ENABLE_COMPILATION_CACHE"),
)
