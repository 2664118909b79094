"""Kernels and helper processes: the sandbox they run in, their limits, the compile cache, and the
channel the judge speaks to a kernel through."""
